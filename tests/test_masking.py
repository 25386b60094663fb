"""Closed-form masking ceiling: hand-worked cases (the MindIE-SD skill's three regimes), what-if solvers, CLI."""

from __future__ import annotations

import json

import pytest
from conftest import run_script
from ditpar.errors import InputError
from ditpar.masking import bound


def layer(C, F, n, D=None, r=None):
    return bound.make_layer(C, F, n, D, r)


# --- hand-worked: C = 700 us, n = 7 (c = 100 us), reverse o = 1/4 of q,k,v,o (a = 75, b = 25) ---

def test_seed_usp4_c_over_f_046_reaches_ideal():
    lay = layer(700, 700 / 0.46, 7, r=0.25)  # f = 217.39 > c = 100
    assert bound.regime(lay) == "compute-bound"
    assert bound.c_over_f(lay) == pytest.approx(0.46)
    # E_min = c = 100 (fill 75 + drain 25); ceiling = 1 - 100/700 = 6/7
    assert bound.exposure_min(lay) == pytest.approx(100)
    assert bound.ceiling(lay) == pytest.approx(6 / 7)
    assert bound.ceiling(lay) == pytest.approx(bound.ideal(7))
    # the MindIE-SD skill measured 0.43 here: half of the ceiling
    assert 0.43 / bound.ceiling(lay) == pytest.approx(0.5017, abs=1e-4)


def test_seed_usp8_c_over_f_13():
    lay = layer(700, 700 / 1.3, 7, r=0.25)  # f = 76.923
    assert bound.regime(lay) == "comm-bound"
    terms = bound.exposure_terms(lay)
    # by hand: c = 100; C - F = 700 - 538.4615 = 161.5385; 7*75 + 25 - 6*76.923 = 88.4615;
    # 75 + 7*25 - 6*76.923 = -211.5385
    assert terms["fill+drain"] == pytest.approx(100)
    assert terms["comm-minus-compute"] == pytest.approx(161.53846, abs=1e-4)
    assert terms["forward-backlog"] == pytest.approx(88.46154, abs=1e-4)
    assert terms["reverse-backlog"] == pytest.approx(-211.53846, abs=1e-4)
    assert bound.binding_term(lay) == "comm-minus-compute"
    # ceiling = F/C = 1/1.3 exactly (fill and drain are hidden by the backlog)
    assert bound.ceiling(lay) == pytest.approx(1 / 1.3)
    assert 0.54 / bound.ceiling(lay) == pytest.approx(0.702, abs=1e-3)  # MindIE-SD skill: "~0.7"


def test_seed_cp2usp4_c_over_f_2():
    lay = layer(700, 350, 7, r=0.25)  # f = 50, a = 75 > f
    terms = bound.exposure_terms(lay)
    assert terms["comm-minus-compute"] == pytest.approx(350)
    assert terms["forward-backlog"] == pytest.approx(7 * 75 + 25 - 6 * 50)  # 250
    assert bound.ceiling(lay) == pytest.approx(0.5)


def test_forward_only_matches_the_seed_formula():
    # D = 0 (all of a chunk's comm before its compute, e.g. all-gather of K/V): E = c + (n-1)(c-f)
    for C, F, n in [(700, 350, 7), (700, 700 / 1.3, 7), (100, 40, 3), (10, 9.99, 12)]:
        lay = layer(C, F, n)
        c, f = C / n, F / n
        assert bound.exposure_min(lay) == pytest.approx(c + (n - 1) * max(0, c - f))
    # c/f = 2: 1 - (100 + 6*50)/700 = 3/7, well below the large-n limit 1/2
    assert bound.ceiling(layer(700, 350, 7)) == pytest.approx(3 / 7)
    assert bound.large_n_limit(layer(700, 350, 7)) == pytest.approx(0.5)


def test_one_chunk_hides_nothing():
    for F in (1, 100, 1e6):
        assert bound.ceiling(layer(50, F, 1, r=0.3)) == pytest.approx(0.0)


def test_ceiling_never_above_ideal_or_large_n_limit_plus_fill():
    for n in range(1, 12):
        for k in (0.2, 0.5, 0.99, 1.0, 1.5, 4.0):
            for r in (0, 0.25, 0.5, 1):
                lay = layer(100, 100 * k, n, r=r)
                assert bound.ceiling(lay) <= bound.ideal(n) + 1e-12
                assert bound.ceiling(lay) <= bound.large_n_limit(lay) + 1e-12


def test_large_n_limit_approached():
    lay_big = layer(700, 350, 7000, r=0.25)
    assert bound.ceiling(lay_big) == pytest.approx(0.5, abs=1e-3)
    lay_big = layer(700, 350, 7000)  # D = 0: 1 - (c + (n-1)(c-f))/C -> 1/2
    assert bound.ceiling(lay_big) == pytest.approx(0.5, abs=1e-3)


@pytest.mark.parametrize("C,F,n,r,target", [
    (700, 538.4615, 7, 0.25, 0.8), (700, 350, 7, 0.0, 0.6), (100, 20, 4, 0.5, 0.7),
    (700, 300, 8, 0.25, 0.85),
])
def test_compute_and_comm_needed_hit_the_target(C, F, n, r, target):
    lay = layer(C, F, n, r=r)
    f_need = bound.compute_needed(lay, target)
    assert bound.ceiling(layer(C, f_need, n, r=r)) == pytest.approx(target, abs=1e-9)
    assert bound.ceiling(layer(C, f_need * 0.999, n, r=r)) < target
    c_need = bound.comm_needed(lay, target)
    assert bound.ceiling(layer(c_need, F, n, r=r)) == pytest.approx(target, abs=1e-9)
    assert bound.ceiling(layer(c_need * 1.001, F, n, r=r)) < target


def test_target_above_ideal_is_unreachable():
    lay = layer(700, 5000, 7, r=0.25)
    assert bound.compute_needed(lay, 0.9) is None  # 1 - 1/7 = 0.857 < 0.9
    assert bound.comm_needed(lay, 0.9) is None
    res = bound.analyse(lay, target=0.9)
    assert res["target"]["chunks_needed_at_least"] == 10


def test_best_chunks_with_overhead_by_hand():
    # C0 = 630 us overhead-free, o = 10 us, F = 538.46 us, r = 0.25; comm-bound for n >= 2:
    # E(n) = max(c, C0 + n*o - F, ...) with c = 630/n + 10. n = 4: max(167.5, 131.5) = 167.5;
    # n = 5: max(136, 141.54) = 141.54; n = 6: 151.54. Best n = 5.
    lay = layer(700, 538.4615384615385, 7, r=0.25)
    best = bound.best_chunks(lay, 10, list(range(1, 15)))
    assert best["base_comm_us"] == pytest.approx(630)
    assert best["best_chunks"] == 5
    by_n = {row["chunks"]: row["exposed_us"] for row in best["table"]}
    assert by_n[4] == pytest.approx(167.5)
    assert by_n[5] == pytest.approx(680 - 538.4615384615385)
    assert by_n[6] == pytest.approx(690 - 538.4615384615385)


def test_chunk_count_rule():
    assert bound.chunk_count(7, 14) == 7
    assert bound.chunk_count(8, 7) == 7
    assert bound.chunk_count(4, 7) == 1
    assert bound.chunk_count(6, 24) == 6


@pytest.mark.parametrize("kw", [
    dict(comm_us=0, compute_us=1, chunks=2), dict(comm_us=-1, compute_us=1, chunks=2),
    dict(comm_us=1, compute_us=0, chunks=2), dict(comm_us=1, compute_us=1, chunks=0),
    dict(comm_us=1, compute_us=1, chunks=2, drain_us=0.6), dict(comm_us=1, compute_us=1, chunks=2, drain_us=-0.1),
    dict(comm_us=1, compute_us=1, chunks=2, reverse_share=1.5), dict(comm_us=float("nan"), compute_us=1, chunks=2),
])
def test_bad_layers_raise(kw):
    with pytest.raises(InputError):
        bound.make_layer(**kw)


def test_calc_cli_json_contract():
    proc = run_script("mask_bound.py", "calc", "--comm-us", "700", "--compute-us", "350", "--chunks", "7",
                      "--drain-us", "25", "--json", check=0)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "dit-parallel-opt/mask_bound/v1"
    assert doc["regime"] == "comm-bound"
    assert doc["c_over_f"] == pytest.approx(2.0)
    assert doc["ideal"] == pytest.approx(6 / 7)
    assert doc["ceiling"] == pytest.approx(0.5)
    assert doc["large_n_limit"] == pytest.approx(0.5)


def test_calc_cli_text_and_csv(tmp_path):
    out = tmp_path / "best.csv"
    proc = run_script("mask_bound.py", "calc", "--comm-us", "700", "--compute-us", "1521.74", "--chunks", "7",
                      "--reverse-share", "0.25", "--overhead-us", "5", "--heads", "14", "--csv", str(out), check=0)
    assert "compute-bound" in proc.stdout and "0.8571" in proc.stdout
    lines = out.read_text().splitlines()
    assert lines[0].startswith("chunks,") and len(lines) == 1 + 4  # divisors of 14: 1, 2, 7, 14


@pytest.mark.parametrize("args", [  # the library-level cases above cover the rest of the validation
    ["--comm-us", "0", "--compute-us", "1", "--chunks", "2"],
    ["--comm-us", "3", "--compute-us", "-1", "--chunks", "2"],
    ["--comm-us", "3", "--compute-us", "1", "--chunks", "0"],
    ["--comm-us", "x", "--compute-us", "1", "--chunks", "2"],
    ["--comm-us", "3", "--compute-us", "1", "--chunks", "2", "--overhead-us", "2"],
])
def test_calc_cli_bad_input_exits_2(args):
    proc = run_script("mask_bound.py", "calc", *args, check=2)
    assert proc.stderr.count("\n") == 1 and "error" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_comm_allowed_by_hand():
    # n = 4, F = 1000, target 0.1: comm-bound, E = C - F, so 1 - (C - 1000)/C = 0.1 -> C = 10000/9 * 9 = 10000
    lay = layer(10, 1000, 4, r=0.25)
    assert bound.comm_needed(lay, 0.1) == pytest.approx(10000)


def test_reference_examples_are_real_output(tmp_path):
    """Every `$ python scripts/mask_bound.py ...` block in references/comm-masking.md reproduces exactly."""
    import re
    import shlex

    from conftest import ROOT, SHARED

    text = (ROOT / "references" / "comm-masking.md").read_text()
    blocks = re.findall(r"```\n(\$ python scripts/mask_bound.py.*?)```", text, re.S)
    assert len(blocks) >= 6
    checked = skipped = 0
    for block in blocks:
        for part in re.split(r"(?m)^\$ ", block):
            if not part.strip():
                continue
            cmd, _, expected = part.partition("\n")
            lines = expected.strip().splitlines()
            code = 0
            if lines and lines[-1].startswith("(exit "):
                code = int(lines.pop()[6:-1])
            args = shlex.split(cmd)[2:]
            if any("../shared" in a for a in args):
                if not SHARED.exists():
                    skipped += 1      # needs ../shared: the other examples still run
                    continue
                args = [a.replace("../shared", str(SHARED)) for a in args]
            png = str(tmp_path / "gantt.png")   # the reference writes under out/; the test keeps it here
            args = [png if a == "out/gantt.png" else a for a in args]
            proc = run_script("mask_bound.py", *args, check=code)
            got = (proc.stdout + proc.stderr).replace(png, "out/gantt.png").strip()
            assert got == "\n".join(lines).strip(), cmd
            checked += 1
    assert checked + skipped >= 6 and checked >= 5


# --- issue 14 item 8: the ideal 1 - 1/n holds up to c/f = min(n/(n-1), 1/max(r, 1-r)), not only c/f <= 1 ---

def test_ideal_holds_above_c_over_f_one():
    # C = 700, F = 650, n = 7, r = 0.25: c = 100, f = 92.857, a = 75, b = 25. By hand: C - F = 50 <= c,
    # 7*75 + 25 - 6*92.857 = -7.14, 75 + 175 - 557.14 < 0, so E_min = c = 100 and the ceiling is 6/7.
    lay = layer(700, 650, 7, r=0.25)
    assert bound.c_over_f(lay) > 1
    assert bound.ceiling(lay) == pytest.approx(6 / 7)
    assert bound.regime(lay) == "compute-bound"
    assert bound.ideal_limit(lay) == pytest.approx(7 / 6)


def test_regime_agrees_with_the_ceiling_on_a_grid():
    # the regime's one rule must say "ideal" exactly when the closed-form ceiling equals 1 - 1/n
    for n in (1, 2, 3, 7, 16):
        for r in (0.0, 0.25, 0.5, 0.9):
            for cf in (0.3, 0.9, 1.0, 1.05, 1.2, 1.3, 1.5, 2.0, 3.0):
                lay = layer(700, 700 / cf, n, r=r)
                at_ideal = abs(bound.ceiling(lay) - bound.ideal(n)) < 1e-9
                assert (bound.regime(lay) == "compute-bound") == at_ideal, (n, r, cf)


def test_calc_text_never_calls_the_reached_ideal_out_of_reach():
    proc = run_script("mask_bound.py", "calc", "--comm-us", "700", "--compute-us", "650", "--chunks", "7",
                      "--reverse-share", "0.25", check=0)
    assert "out of reach" not in proc.stdout
    assert "compute-bound" in proc.stdout and "c/f <= 1.1667" in proc.stdout and "ceiling = ideal" in proc.stdout
    doc = json.loads(run_script("mask_bound.py", "calc", "--comm-us", "700", "--compute-us", "650", "--chunks", "7",
                                "--reverse-share", "0.25", "--json", check=0).stdout)
    assert doc["ceiling"] == pytest.approx(doc["ideal"]) and doc["ideal_up_to_c_over_f"] == pytest.approx(7 / 6)


def test_overhead_with_c_measured_at_another_chunk_count():
    # C = 700 us measured unchunked (M = 1), o = 10 us: C0 = 690. At n = 4 by hand: c = 690/4 + 10 = 182.5,
    # C(4) = 730, a = 136.875, b = 45.625, f = 134.5: terms 182.5, 192, 547.5 + 45.625 - 403.5 = 189.625, < 0
    # so E = 192; n = 5: c = 148, C = 740, E = max(148, 202, 5*111 + 37 - 4*107.6 = 161.6) = 202.
    lay = layer(700, 538, 7, r=0.25)
    best = bound.best_chunks(lay, 10, list(range(1, 9)), measured_at=1)
    assert best["base_comm_us"] == pytest.approx(690) and best["measured_at_chunks"] == 1
    by_n = {row["chunks"]: row["exposed_us"] for row in best["table"]}
    assert by_n[4] == pytest.approx(192) and by_n[5] == pytest.approx(202)
    assert best["best_chunks"] == 4
    proc = run_script("mask_bound.py", "calc", "--comm-us", "700", "--compute-us", "538", "--chunks", "7",
                      "--reverse-share", "0.25", "--overhead-us", "10", "--measured-at-chunks", "1",
                      "--max-chunks", "8", "--json", check=0)
    doc = json.loads(proc.stdout)
    assert doc["best"]["measured_at_chunks"] == 1 and doc["best"]["base_comm_us"] == pytest.approx(690)
    # without the flag C is taken at --chunks 7: C0 = 700 - 70 = 630
    doc = json.loads(run_script("mask_bound.py", "calc", "--comm-us", "700", "--compute-us", "538", "--chunks", "7",
                                "--reverse-share", "0.25", "--overhead-us", "10", "--json", check=0).stdout)
    assert doc["best"]["base_comm_us"] == pytest.approx(630)
    run_script("mask_bound.py", "calc", "--comm-us", "700", "--compute-us", "538", "--chunks", "7",
               "--measured-at-chunks", "1", check=2)
