"""The held-out choice of the host cost per op, ring overlap and per-call cost (judge/host_costs.py): the sequential
rule plan.py evaluate uses, and the joint rule judged beside it (benchmarks/VALIDATION.md section 7.25)."""

from __future__ import annotations

import math

import pytest
from ditpar.plan.judge import host_costs

# (measured, predicted) speedups on the training rows at each grid point (launch_us, overlap, call_us); the
# pairwise accuracy of the training pairs beside them. Hand figures: |log2 1.1| = 0.1375, |log2 1.05| = 0.0704,
# |log2 1.2| = 0.2630, |log2 1.3| = 0.3785.
R = {1.05: (2.0, 2.1), 1.1: (2.0, 2.2), 1.2: (2.0, 2.4), 1.3: (2.0, 2.6)}
LANDSCAPE = {   # point: (the three rows' predicted / measured ratios, pairwise accuracy)
    (10.0, 0.5, 0.0): ((1.3, 1.3, 1.2), 0.80), (10.0, 0.5, 10.0): ((1.2, 1.2, 1.1), 0.80),
    (10.0, 0.5, 20.0): ((1.1, 1.1, 1.1), 0.80),
    (25.0, 0.5, 0.0): ((1.1, 1.1, 1.2), 0.79), (25.0, 0.5, 10.0): ((1.05, 1.05, 1.1), 0.79),
    (25.0, 0.5, 20.0): ((1.1, 1.2, 1.2), 0.79),
}


def figures(point):
    ratios, acc = LANDSCAPE[point]
    return host_costs.median_abs_log2(R[x] for x in ratios), acc


def test_median_abs_log2_by_hand():
    assert host_costs.median_abs_log2([R[1.1], R[1.05], R[1.3]]) == pytest.approx(math.log2(1.1))
    assert host_costs.median_abs_log2([R[1.05], R[1.3]]) == pytest.approx(0.5 * (math.log2(1.05) + math.log2(1.3)))
    assert host_costs.median_abs_log2([(2.0, 2.0 / 1.1)]) == pytest.approx(math.log2(1.1))   # under as over
    assert host_costs.median_abs_log2([]) is None


def test_sequential_choice_lands_on_a_worse_speedup_error_than_the_joint_one():
    """Sequential: launch 10 wins pairwise order at call 10 (0.80 against 0.79), then the call cost at launch 10:
    medians 0.2630 / 0.2630 / 0.1375 at 0 / 10 / 20 us -> 20 us, median error 0.1375. Joint: (25 us, 10 us) has
    rows at 1.05, 1.05, 1.1 -> median 0.0704, the smallest of the six points."""
    grid = ((10.0, 25.0), (0.5,), (0.0, 10.0, 20.0))
    seq = host_costs.choose_sequential(*grid, figures, call0=10.0)
    joint = host_costs.choose_joint(*grid, figures)
    assert seq == (10.0, 0.5, 20.0)
    assert joint == (25.0, 0.5, 10.0)
    assert figures(seq)[0] == pytest.approx(math.log2(1.1))
    assert figures(joint)[0] == pytest.approx(math.log2(1.05))
    assert host_costs.choose("joint", *grid, figures) == joint and host_costs.choose("sequential", *grid, figures) == seq
    with pytest.raises(ValueError, match="expected one of sequential, joint"):
        host_costs.choose("pairwise", *grid, figures)


def test_ties_go_to_pairwise_then_the_defaults():
    flat = {p: ((1.1, 1.1, 1.1), 0.5) for p in LANDSCAPE}
    flat[(10.0, 0.5, 0.0)] = ((1.1, 1.1, 1.1), 0.6)
    assert host_costs.choose_joint((10.0, 25.0), (0.5,), (0.0, 10.0, 20.0),
                                   lambda p: (host_costs.median_abs_log2(R[x] for x in flat[p][0]), flat[p][1])) \
        == (10.0, 0.5, 0.0)                                  # equal error: the larger pairwise accuracy
    flat[(10.0, 0.5, 0.0)] = ((1.1, 1.1, 1.1), 0.5)
    assert host_costs.choose_joint((10.0, 25.0), (0.5,), (0.0, 10.0, 20.0),
                                   lambda p: (host_costs.median_abs_log2(R[x] for x in flat[p][0]), flat[p][1])) \
        == (25.0, 0.5, 10.0)                                 # all equal: the defaults


def test_sequential_call_cost_by_the_smallest_median_error():
    """The call step of the sequential rule (was small_work.fit_call_us): |log2 1.1| < |log2 0.75| < |log2 1.5|
    picks 20 us; a tie goes to the shipped default; no speedup row at all leaves the first grid value."""
    rows = {0.0: [(2.0, 3.0)] * 3, 10.0: [(2.0, 1.5)] * 3, 20.0: [(2.0, 2.2)] * 3}
    pick = host_costs.choose_sequential((25.0,), (0.0,), (0.0, 10.0, 20.0),
                                        lambda p: (host_costs.median_abs_log2(rows[p[2]]), 1.0))
    assert pick == (25.0, 0.0, 20.0)
    tie = host_costs.choose_sequential((25.0,), (0.0,), (0.0, 10.0, 20.0),
                                       lambda p: (host_costs.median_abs_log2([(2.0, 2.2)]), 1.0))
    assert tie == (25.0, 0.0, 10.0)
    assert host_costs.choose_sequential((25.0,), (0.0,), (0.0, 10.0, 20.0), lambda p: (None, 1.0)) == (25.0, 0.0, 0.0)


def test_joint_rule_in_a_fold_minimises_the_training_speedup_error():
    """On the small two-framework frame set, every fold's joint choice has the smallest median training speedup
    error over the 27 grid points, recomputed here from the fold's own predictions."""
    from ditpar.plan.cost import Tunables
    from ditpar.plan.cost.small_work import CALL_GRID
    from ditpar.plan.judge import heldout
    from test_heldout_groups import frames

    res = heldout.evaluate_heldout(frames(), Tunables(), by="hardware", rule="joint")
    seq = {f.source: f.constants for f in heldout.evaluate_heldout(frames(), Tunables(), by="hardware")["sources"]}
    rows = heldout.collect_rows(frames())
    scorer = heldout.Scorer(rows, Tunables(), False)
    worse = 0
    for fold in res["sources"]:
        train = [i for i, r in enumerate(rows) if r.hw.accelerator != fold.source]
        mfu = heldout.derive_mfu(rows, fold.source, Tunables(), "hardware")

        def err(la, ov, ca, mfu=mfu, train=train):
            preds = scorer.predict(la, ov, mfu, ca)
            return sorted(abs(math.log2(p / m)) for _, _, m, p in heldout.speedup_rows(rows, preds, train))
        errs = {(la, ov, ca): err(la, ov, ca) for la in heldout.LAUNCH_GRID for ov in heldout.OVERLAP_GRID
                for ca in CALL_GRID}
        med = {k: (v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])) for k, v in errs.items()}
        c, o = fold.constants, seq[fold.source]
        assert med[(c["launch_us"], c["overlap_efficiency"], c["call_us"])] == pytest.approx(min(med.values()), abs=1e-6)
        worse += med[(o["launch_us"], o["overlap_efficiency"], o["call_us"])] > min(med.values()) + 1e-6
    assert worse >= 1   # the sequential rule (pairwise order first) lands above the smallest error in some fold


def test_evaluate_host_fit_flag(tmp_path):
    """`plan.py evaluate --host-fit joint` scores each fold with the joint rule's constants; an unknown rule is a
    usage error (exit 2)."""
    import json

    from conftest import run_script
    from ditpar.plan.cost import Tunables
    from ditpar.plan.judge import heldout
    from test_heldout_groups import frames

    for name, frame in frames().items():
        frame.to_csv(tmp_path / name, index=False)
    doc = json.loads(run_script("plan.py", "evaluate", "--tables", str(tmp_path), "--hold-out", "hardware",
                                "--host-fit", "joint", "--json").stdout)
    want = heldout.evaluate_heldout(frames(), Tunables(), by="hardware", rule="joint")
    got = {s["source"]: s["constants"] for s in doc["heldout_by"]["hardware"]["sources"]}
    for fold in want["sources"]:
        assert {k: got[fold.source][k] for k in ("launch_us", "overlap_efficiency", "call_us")} == \
            {k: fold.constants[k] for k in ("launch_us", "overlap_efficiency", "call_us")}
    bad = run_script("plan.py", "evaluate", "--tables", str(tmp_path), "--host-fit", "pairwise", check=2)
    assert "--host-fit" in bad.stderr
