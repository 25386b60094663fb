"""Issue 23: held-out folds by hardware class and framework, speedup beside n and 0.75 n, band coverage."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from ditpar.plan.decide import uncertainty
from ditpar.plan.judge import evaluate as ev
from ditpar.plan.judge import heldout

COLS = ev.COLUMNS


def _row(repo, hw, ic, n, u, r, cfg, lat):
    return {"source_repo": repo, "source_path": "doc.md", "model": "FLUX.1-dev", "hardware": hw, "interconnect": ic,
            "n_devices": str(n), "resolution_or_seq": "1024x1024", "steps": "28", "ulysses": str(u), "ring": str(r),
            "pipefusion": "1", "cfg": str(cfg), "tp": "1", "other_config": "", "latency_s": str(lat),
            "notes": "kind=table"}


def frames():
    a = pd.DataFrame([_row("xdit-project/xDiT", "A100", "NVLink", 1, 1, 1, 1, 20.0),
                      _row("xdit-project/xDiT", "A100", "NVLink", 2, 2, 1, 1, 11.0),
                      _row("xdit-project/xDiT", "A100", "NVLink", 2, 1, 2, 1, 12.5),
                      _row("xdit-project/xDiT", "A100", "NVLink", 4, 4, 1, 1, 6.0)], columns=COLS)
    b = pd.DataFrame([_row("vipshop/cache-dit", "L20", "PCIe", 1, 1, 1, 1, 24.0),
                      _row("vipshop/cache-dit", "L20", "PCIe", 2, 2, 1, 1, 14.0),
                      _row("vipshop/cache-dit", "L20", "PCIe", 2, 1, 2, 1, 13.0)], columns=COLS)
    return {"a.csv": a, "b.csv": b}


@pytest.mark.parametrize("by,groups", [("source", ["a.csv", "b.csv"]), ("hardware", ["A100", "L20"]),
                                       ("framework", ["cache-dit", "xDiT"])])
def test_folds_are_the_named_groups(by, groups):
    from ditpar.plan.cost import Tunables
    res = heldout.evaluate_heldout(frames(), Tunables(), by=by)
    assert res["by"] == by and [r.source for r in res["sources"]] == groups
    assert "held-out (leave one" in heldout.render(res)


def test_speedup_and_baselines_by_hand():
    """Held out by hardware class: the A100 fold's speedups recomputed from the fold's own predictions."""
    from ditpar.plan.cost import Tunables
    res = heldout.evaluate_heldout(frames(), Tunables(), by="hardware")
    a100 = res["sources"][0]
    # 3 multi-card A100 rows: measured speedups 20/11, 20/12.5, 20/6 against n = 2, 2, 4 and 0.75 n
    meas = [20 / 11, 20 / 12.5, 20 / 6]
    assert a100.linear_log2 == pytest.approx([abs(math.log2(n / m)) for n, m in zip((2, 2, 4), meas, strict=True)])
    assert a100.three_quarter_log2 == pytest.approx(
        [abs(math.log2(0.75 * n / m)) for n, m in zip((2, 2, 4), meas, strict=True)])
    rows = heldout.collect_rows(frames())
    scorer = heldout.Scorer(rows, Tunables(), False)
    c = a100.constants
    preds = scorer.predict(c["launch_us"], c["overlap_efficiency"], heldout.derive_mfu(rows, "A100", Tunables(), "hardware"),
                           c["call_us"])   # the per-call cost chosen without the fold, like the other constants
    idx = [i for i, r in enumerate(rows) if r.hw.accelerator == "A100"]
    single = idx[0]
    # the rows are end to end: each prediction carries the serial stages (text encoder, VAE decode) once
    from ditpar.plan.cost.end_to_end import serial_stages
    serial = {i: serial_stages(rows[i].model, rows[i].hw, rows[i].shape).total_s for i in idx}
    assert all(s > 0 for s in serial.values())
    e2e = {i: preds[i][0] + serial[i] for i in idx}
    want = [abs(math.log2((e2e[single] / e2e[i]) / (rows[single].measured / rows[i].measured))) for i in idx[1:]]
    assert a100.speedup_log2 == pytest.approx(want)
    inside = []
    for i in idx[1:]:
        b = uncertainty.band_of(preds[i][2], frozenset(), c["band_half_width"])
        scale = rows[single].measured / e2e[single]
        inside.append((b.low_s + serial[i]) * scale <= rows[i].measured <= (b.high_s + serial[i]) * scale)
    assert a100.band_inside == inside
    d = a100.as_dict()
    assert d["linear_within_25pct"] == pytest.approx(sum(x <= math.log2(1.25) for x in a100.linear_log2) / 3)



def test_speedup_range_fitted_without_the_fold_and_its_coverage_by_hand():
    """Held out by hardware class: the A100 fold's speedup range is fitted on the L20 rows alone (two rows, so the
    10 % and 90 % linear quantiles sit 0.1 of the way in from each end), and each A100 row is inside or not."""
    from ditpar.plan.cost import Tunables
    res = heldout.evaluate_heldout(frames(), Tunables(), by="hardware")
    a100, l20 = res["sources"]
    rows = heldout.collect_rows(frames())
    scorer = heldout.Scorer(rows, Tunables(), False)
    c = a100.constants
    preds = scorer.predict(c["launch_us"], c["overlap_efficiency"], heldout.derive_mfu(rows, "A100", Tunables(), "hardware"),
                           c["call_us"])   # the per-call cost chosen without the fold, like the other constants
    from ditpar.plan.cost.end_to_end import serial_stages

    def e2e(i):
        return preds[i][0] + serial_stages(rows[i].model, rows[i].hw, rows[i].shape).total_s
    l20_idx = [i for i, r in enumerate(rows) if r.hw.accelerator == "L20"]
    resid = sorted(math.log2((rows[l20_idx[0]].measured / rows[i].measured) / (e2e(l20_idx[0]) / e2e(i)))
                   for i in l20_idx[1:])
    lo, hi = resid[0] + 0.1 * (resid[1] - resid[0]), resid[1] - 0.1 * (resid[1] - resid[0])
    assert c["speedup_range_log2"] == pytest.approx([round(lo, 3), round(hi, 3)])
    a_idx = [i for i, r in enumerate(rows) if r.hw.accelerator == "A100"]
    inside = []
    for i in a_idx[1:]:
        pred = e2e(a_idx[0]) / e2e(i)
        meas = rows[a_idx[0]].measured / rows[i].measured
        inside.append(pred * 2 ** c["speedup_range_log2"][0] <= meas <= pred * 2 ** c["speedup_range_log2"][1])
    assert a100.range_inside == inside
    assert a100.as_dict()["speedup_range_coverage"] == pytest.approx(sum(inside) / 3)
    assert res["pooled"].range_inside == a100.range_inside + l20.range_inside


def test_fit_speedup_range_quantiles_by_hand():
    # ten residuals 0..9: the 10 % and 90 % linear quantiles are 0.9 and 8.1 (numpy's default: (n-1) q)
    assert uncertainty.fit_speedup_range([float(x) for x in range(10)]) == (0.9, 8.1)
    assert uncertainty.fit_speedup_range([]) == uncertainty.SPEEDUP_RANGE_LOG2
    low, high = uncertainty.speedup_range(4.0, (-1.0, 0.5))
    assert (low, high) == pytest.approx((2.0, 4.0 * math.sqrt(2.0)))

def test_evaluate_cli_hold_out_flag(tmp_path):
    from conftest import run_script
    for name, f in frames().items():
        f.to_csv(tmp_path / name, index=False)
    out = run_script("plan.py", "evaluate", "--tables", str(tmp_path), "--hold-out", "hardware").stdout
    assert "leave one hardware class out" in out and "leave one source out" not in out
    assert "ideal linear (n)" in out and "band coverage" in out
    bad = run_script("plan.py", "evaluate", "--tables", str(tmp_path), "--hold-out", "gpu", check=2)
    assert "--hold-out" in bad.stderr


def test_table_offset_removed_by_hand():
    """Each table's median of log2(pred / measured) is taken off its own rows: table a (0.9, 0.1, 0.2) has median
    0.2, table b (-0.4, 0.0) has -0.2; the centred errors are 0.7, 0.1, 0.0 and 0.2, 0.2; 4 of 5 within
    log2(1.25) = 0.32, where the raw errors have 3 of 5."""
    signed = [("a", 0.9), ("a", 0.1), ("a", 0.2), ("b", -0.4), ("b", 0.0)]
    assert heldout.table_offset_removed(signed) == pytest.approx([0.7, 0.1, 0.0, 0.2, 0.2])
    res = heldout.SourceResult("pooled", {}, speedup_log2=[abs(e) for _, e in signed], speedup_signed=signed)
    d = res.as_dict()
    assert d["speedup_within_25pct"] == pytest.approx(0.6)
    assert d["speedup_within_25pct_table_offset_removed"] == pytest.approx(0.8)
    assert d["speedup_median_abs_log2_table_offset_removed"] == pytest.approx(0.2)
    assert d["speedup_median_log2"] == pytest.approx(0.1)


def test_signed_speedup_errors_follow_their_source_table():
    """Held out by hardware class, every scored row keeps its source table and the sign of its error: the
    absolute values are the fold's speedup errors, row for row."""
    from ditpar.plan.cost import Tunables
    res = heldout.evaluate_heldout(frames(), Tunables(), by="hardware")
    for unit, table in zip(res["sources"], ("a.csv", "b.csv"), strict=True):
        assert [t for t, _ in unit.speedup_signed] == [table] * len(unit.speedup_log2)
        assert [abs(e) for _, e in unit.speedup_signed] == pytest.approx(unit.speedup_log2)
    pooled = res["pooled"]
    assert pooled.speedup_signed == res["sources"][0].speedup_signed + res["sources"][1].speedup_signed
    assert "each table's" in heldout.render(res)
