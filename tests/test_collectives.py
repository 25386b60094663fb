"""Collective attribution: hand-computed synthetic profiles, a brute-force property test, real fixtures."""

from __future__ import annotations

import csv
import functools
import json

import pandas as pd
import pytest
from attribution_synth import events, mask
from conftest import ROOT, need_shared, run_script
from ditpar.analysis import collectives
from ditpar.core.events import make_events
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError
from hypothesis import given, settings
from hypothesis import strategies as st

# compute on stream 7: [0,100) [150,200) [300,400); a2a on 20: [90,140) [210,290); allgather on 21: [250,260)
HAND = [
    ("7", "compute", "mm", "", "", 0, 100),
    ("7", "compute", "mm", "", "", 150, 50),
    ("7", "compute", "attn", "", "", 300, 100),
    ("20", "comm", "a2a", "alltoall", "g1", 90, 50),
    ("20", "comm", "a2a", "alltoall", "g1", 210, 80),
    ("21", "comm", "ag", "allgather", "g2", 250, 10),
    ("22", "other", "Memcpy DtoD", "", "", 200, 5),
]


def row(table: pd.DataFrame, family: str) -> dict:
    return table[table["family"] == family].iloc[0].to_dict()


def test_hand_example_exact_ns():
    rep = collectives.analyse(ProfileSet(events=events(HAND)))
    a2a, ag = row(rep.table, "alltoall"), row(rep.table, "allgather")
    assert (a2a["count"], a2a["sum_ns"], a2a["union_ns"], a2a["exposed_ns"]) == (2, 130, 130, 120)
    assert (ag["count"], ag["sum_ns"], ag["union_ns"], ag["exposed_ns"]) == (1, 10, 10, 10)
    assert a2a["median_us"] == pytest.approx(0.065) and a2a["p90_us"] == pytest.approx(0.077)
    r = rep.ranks.iloc[0]
    # U(comm) = [90,140) + [210,290) = 130 ns; only [90,100) meets compute
    assert (r["comm_union_ns"], r["overlap_ns"], r["comm_exposed_ns"]) == (130, 10, 120)
    assert r["overlap_pct"] == pytest.approx(100 * 10 / 130)
    assert [c["status"] for c in rep.checks] == ["PASS", "PASS"]


def test_concurrent_collectives_union_below_sum_and_overlap_matrix():
    ev = events([
        ("7", "compute", "mm", "", "", 0, 1000),
        ("20", "comm", "a", "alltoall", "g1", 100, 100),
        ("21", "comm", "a", "alltoall", "g1", 150, 100),  # concurrent with the first: union 150 of sum 200
        ("22", "comm", "b", "allgather", "g2", 180, 100),
    ])
    rep = collectives.analyse(ProfileSet(events=ev))
    a2a = row(rep.table, "alltoall")
    assert (a2a["sum_ns"], a2a["union_ns"]) == (200, 150)
    assert a2a["union_over_sum"] == pytest.approx(0.75)
    m = rep.overlap.iloc[0]
    # U(a2a) = [100,250), U(ag) = [180,280): 70 ns in both, smaller union 100 -> 0.70 (never above 1)
    assert m["overlap_us"] == pytest.approx(0.070) and m["overlap_of_smaller"] == pytest.approx(0.70)


def test_memcpy_is_neither_compute_nor_comm():
    ev = events([
        ("7", "compute", "mm", "", "", 0, 50),
        ("20", "comm", "a", "allreduce", "g", 100, 100),
        ("9", "other", "Memcpy HtoD", "", "", 100, 100),
    ])
    r = collectives.analyse(ProfileSet(events=ev)).ranks.iloc[0]
    assert r["overlap_ns"] == 0 and r["comm_exposed_ns"] == 100 and r["overlap_pct"] == 0.0


def test_bytes_and_bandwidth():
    ev = events([
        ("7", "compute", "mm", "", "", 0, 10),
        ("20", "comm", "a", "allgather", "g", 100, 100_000, 1_000_000),  # 1 MB in 100 us = 10 GB/s
        ("20", "comm", "a", "allgather", "g", 200_000, 100_000, 3_000_000),  # 3 MB in 100 us
    ])
    ag = row(collectives.analyse(ProfileSet(events=ev)).table, "allgather")
    assert ag["bytes"] == 4_000_000 and ag["bandwidth_GBps"] == pytest.approx(20.0)


def test_wait_transit_split_from_comm_ops():
    ev = events([("7", "compute", "mm", "", "", 0, 10), ("comm:g", "comm", "hcom_allReduce__1_0_1", "allreduce", "g", 20, 100)])
    ops = pd.DataFrame({"rank": [0, 0], "family": ["allreduce"] * 2, "group": ["g", "g"],
                        "transit_us": [1.5, 2.5], "wait_us": [3.0, 1.0], "idle_us": [0.5, 0.5]})
    ar = row(collectives.analyse(ProfileSet(events=ev, comm_ops=ops)).table, "allreduce")
    assert ar["transit_us"] == pytest.approx(4.0) and ar["wait_us"] == pytest.approx(4.0)
    assert ar["wait_share"] == pytest.approx(0.5) and ar["idle_us"] == pytest.approx(1.0)


def test_compute_on_comm_stream_fails_and_synthetic_stream_is_no_evidence():
    bad = events([("20", "compute", "add_kernel", "", "", 0, 10), ("20", "comm", "nccl", "allreduce", "0", 20, 10)])
    chk = collectives.check_comm_streams(bad)
    assert chk["status"] == "FAIL" and "add_kernel x1" in chk["detail"]
    synthetic = events([("7", "compute", "mm", "", "", 0, 10), ("comm:5", "comm", "hcom", "allreduce", "5", 20, 10)])
    assert collectives.check_comm_streams(synthetic)["status"] == "NO EVIDENCE"


def test_unknown_family_and_rank_list_what_is_there():
    ps = ProfileSet(events=events(HAND))
    with pytest.raises(InputError, match=r"families present: \['allgather', 'alltoall'\]"):
        collectives.analyse(ps, families=["reducescatter"])
    with pytest.raises(InputError, match=r"ranks present: \[0\]"):
        collectives.analyse(ps, ranks=[3])


def test_calls_per_layer_counts_inside_step_windows():
    # 2 layers x 2 steps: 4 a2a per step window -> 2 per layer; one more a2a outside the windows (warm-up)
    rows = [("7", "compute", "mm", "", "", 0, 10)]
    rows += [("20", "comm", "a", "alltoall", "g", 1000 + 100 * i, 50) for i in range(4)]
    rows += [("20", "comm", "a", "alltoall", "g", 3000 + 100 * i, 50) for i in range(4)]
    rows += [("20", "comm", "a", "alltoall", "g", 50, 20)]
    rows += [("20", "comm", "b", "allgather", "h", 1500, 20), ("20", "comm", "b", "allgather", "h", 3500, 20),
             ("20", "comm", "b", "allgather", "h", 3600, 20)]
    steps = pd.DataFrame({"rank": [0, 0], "step": [1, 2], "start_ns": [900, 2900], "end_ns": [2000, 4000]})
    rep = collectives.analyse(ProfileSet(events=events(rows), steps=steps), layers=2)
    lt = rep.layers.set_index("family")
    assert lt.loc["alltoall", "count"] == 8 and lt.loc["alltoall", "calls_per_layer"] == 2.0
    assert bool(lt.loc["alltoall", "whole"])
    assert lt.loc["allgather", "calls_per_layer"] == pytest.approx(0.75)
    chk = rep.checks[-1]
    assert chk["status"] == "FAIL" and "allgather@h: 3/(2x2)" in chk["detail"] and "offload" in chk["detail"]
    # without windows the user's --steps applies to the whole capture: 9 a2a / (2 x 2) = 2.25
    plain = collectives.analyse(ProfileSet(events=events(rows)), layers=2, steps=2).layers.set_index("family")
    assert plain.loc["alltoall", "calls_per_layer"] == pytest.approx(2.25)
    with pytest.raises(InputError, match="--steps"):
        collectives.analyse(ProfileSet(events=events(rows)), layers=2)


def test_multi_rank_skew_and_slowest_rank():
    r0 = events([("7", "compute", "mm", "", "", 0, 1000), ("20", "comm", "a", "allreduce", "g", 100, 300)], rank=0)
    r1 = events([("7", "compute", "mm", "", "", 0, 1500), ("20", "comm", "a", "allreduce", "g", 100, 50)], rank=1)
    rep = collectives.analyse(ProfileSet(events=pd.concat([r0, r1], ignore_index=True)))
    sk = rep.skew.iloc[0]
    assert (sk["min_rank"], sk["max_rank"]) == (1, 0)
    assert sk["skew_us"] == pytest.approx(0.25) and sk["max_over_min"] == pytest.approx(6.0)
    assert rep.slowest_rank == 1 and rep.slowest_by == "device span of the capture"


spans = st.lists(st.tuples(st.integers(0, 400), st.integers(1, 80)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(compute=spans, comm=spans, other=spans, fam=st.lists(st.sampled_from(["alltoall", "allgather"]), min_size=12, max_size=12))
def test_matches_one_boolean_per_ns(compute, comm, other, fam):
    rows = [("7", "compute", "k", "", "", s, d) for s, d in compute]
    rows += [(str(20 + i % 2), "comm", "c", fam[i], "g", s, d) for i, (s, d) in enumerate(comm)]
    rows += [("9", "other", "Memcpy", "", "", s, d) for s, d in other]
    ev = events(rows)
    rep = collectives.analyse(ProfileSet(events=ev))
    comp_m = mask(ev[ev["kind"] == "compute"], 500)
    for r in rep.table.itertuples():
        sub = ev[(ev["kind"] == "comm") & (ev["family"] == r.family)]
        m = mask(sub, 500)
        assert r.union_ns == int(m.sum()) and r.exposed_ns == int((m & ~comp_m).sum())
        assert r.sum_ns == int(sub["dur_ns"].sum())
        assert r.exposed_ns <= r.union_ns <= r.sum_ns
    comm_m = mask(ev[ev["kind"] == "comm"], 500)
    rk = rep.ranks.iloc[0]
    assert rk["comm_union_ns"] == int(comm_m.sum()) and rk["overlap_ns"] == int((comm_m & comp_m).sum())
    assert rk["overlap_ns"] + rk["comm_exposed_ns"] == rk["comm_union_ns"]


def test_no_collectives_is_an_error():
    ev = make_events({"rank": [0], "kind": ["compute"], "start_ns": [0], "dur_ns": [5]})
    with pytest.raises(InputError, match="no communication events"):
        collectives.analyse(ProfileSet(events=ev))


def test_cli_bad_path_exits_2_with_one_line():
    proc = run_script("collectives.py", "/nonexistent/profile", check=2)
    assert proc.stderr.count("\n") == 1 and "collectives.py: error:" in proc.stderr




# ---------------------------------------------------------------- real fixtures
ASCEND = {"level0": ("fixtures", "ascend", "msinsight-text-level0"), "level1": ("fixtures", "ascend", "msinsight-text-level1")}
KINETO = {"sampled": ("fixtures", "kineto", "hta-timeline-sampled_rank-0.json.gz"),
          "nccl": ("fixtures", "kineto", "hta-nccl_data.json.gz")}
ALL = {**ASCEND, **KINETO}
DOC_KEYS = {"rank", "family", "group", "count", "sum_us", "union_us", "union_over_sum", "exposed_us",
            "mean_us", "median_us", "p90_us", "bytes", "bandwidth_GBps", "group_name", "group_role"}


@functools.cache
def loaded(name: str):
    from ditpar.readers import load_profiles

    return load_profiles([need_shared(*ALL[name])])


def step_trace_csv(level: str, rank: int) -> pd.DataFrame:
    path = need_shared(*ASCEND[level], f"rank{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT", "step_trace_time.csv")
    return pd.read_csv(path).iloc[0]


@pytest.mark.parametrize("fixture", sorted(ALL))
def test_cli_json_on_every_fixture_and_rank(fixture):
    proc = run_script("collectives.py", str(need_shared(*ALL[fixture])), "--json", check=0)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "dit-parallel-opt/collectives/v1"
    assert doc["collectives"] and DOC_KEYS <= set(doc["collectives"][0])
    assert {"rank", "comm_union_us", "comm_exposed_us", "overlap_pct"} <= set(doc["ranks"][0])
    assert all(set(c) == {"name", "status", "detail"} and c["status"] in ("PASS", "FAIL", "NO EVIDENCE")
               for c in doc["checks"])
    expect_ranks = [0, 1] if fixture in ASCEND else [0]
    assert [r["rank"] for r in doc["ranks"]] == expect_ranks
    assert sorted({c["rank"] for c in doc["collectives"]}) == expect_ranks
    for c in doc["collectives"]:
        assert c["exposed_us"] <= c["union_us"] <= c["sum_us"] + 1e-9


@pytest.mark.parametrize("level", sorted(ASCEND))
@pytest.mark.parametrize("rank", [0, 1])
def test_ascend_union_and_exposed_match_the_profilers_step_trace(level, rank):
    """The profiler's own Communication and Communication(Not Overlapped) for the one step."""
    r = collectives.analyse(loaded(level), ranks=[rank]).ranks.iloc[0]
    ref = step_trace_csv(level, rank)
    assert r["comm_union_us"] == pytest.approx(ref["Communication"], abs=0.05)
    assert r["comm_exposed_us"] == pytest.approx(ref["Communication(Not Overlapped)"], abs=0.05)
    assert r["overlap_pct"] == pytest.approx(100 * ref["Overlapped"] / ref["Communication"], abs=0.001)


def kineto_overlap_by_hand(path) -> float:
    """Independent whole-capture figure straight from the JSON: Decimal us, a plain sort-and-merge."""
    import gzip
    from decimal import Decimal

    with gzip.open(path, "rt") as fh:
        trace = json.load(fh, parse_float=Decimal)
    comm, comp = [], []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") != "kernel":
            continue  # gpu_memcpy / gpu_memset are in neither set
        span = (Decimal(e["ts"]), Decimal(e["ts"]) + Decimal(e["dur"]))
        (comm if "nccl" in e["name"].lower() else comp).append(span)

    def merge(spans):
        out = []
        for s, t in sorted(spans):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], t)
            else:
                out.append([s, t])
        return out

    a, b = merge(comm), merge(comp)
    both = Decimal(0)
    for s, t in a:
        for u, v in b:
            lo, hi = max(s, u), min(t, v)
            if hi > lo:
                both += hi - lo
    return float(100 * both / sum(t - s for s, t in a))


@pytest.mark.parametrize("fixture", sorted(KINETO))
def test_kineto_whole_capture_overlap_by_independent_parse(fixture):
    ours = collectives.analyse(loaded(fixture)).ranks.iloc[0]["overlap_pct"]
    assert ours == pytest.approx(kineto_overlap_by_hand(need_shared(*KINETO[fixture])), abs=1e-6)


def test_sampled_rank0_whole_capture_is_about_15_percent():
    path = need_shared(*KINETO["sampled"])
    doc = json.loads(run_script("collectives.py", str(path), "--json", check=0).stdout)
    assert doc["ranks"][0]["overlap_pct"] == pytest.approx(14.95, abs=0.05)
    chk = {c["name"]: c for c in doc["checks"]}
    assert chk["no_compute_on_comm_streams"]["status"] == "PASS"  # NCCL on streams 84 and 203 only


def test_ascend_wait_split_and_calls_per_layer():
    path = str(need_shared(*ASCEND["level1"]))
    doc = json.loads(run_script("collectives.py", path, "--json", "--layers", "4", check=0).stdout)
    r0 = next(c for c in doc["collectives"] if c["rank"] == 0)
    # communication.json, rank 0, step 50: the four allreduce ops' transit and wait times (ms -> us)
    comm = json.loads((need_shared(*ASCEND["level1"], "rank0_ascend_pt", "ASCEND_PROFILER_OUTPUT",
                                   "communication.json")).read_text())
    ops = [v["Communication Time Info"] for k, v in comm["step50"]["collective"].items() if k != "Total Op Info"]
    assert r0["transit_us"] == pytest.approx(1000 * sum(o["Transit Time(ms)"] for o in ops), abs=0.01)
    assert r0["wait_us"] == pytest.approx(1000 * sum(o["Wait Time(ms)"] for o in ops), abs=0.01)
    layer = {c["name"]: c for c in doc["checks"]}["calls_per_layer"]
    assert layer["status"] == "PASS" and doc["calls_per_layer"][0]["calls_per_layer"] == 1.0
    # 4 allreduce per step do not split over 3 layers: exit 1; this is a training profile (backward
    # kernels), so the DiT hints on extra calls are left out and that is said once (issue 14 item 11)
    proc = run_script("collectives.py", path, "--layers", "3", check=1)
    assert "1.333" in proc.stdout and "TP row-parallel" not in proc.stdout
    assert proc.stderr.count("not a DiT inference profile") == 1


def test_unknown_family_on_real_profile_lists_families():
    proc = run_script("collectives.py", str(need_shared(*KINETO["nccl"])), "--family", "alltoall", check=2)
    assert "families present: ['allreduce', 'broadcast']" in proc.stderr


# --- issue 14 item 11: no DiT hints on a training profile -------------------------------------------------

def test_training_profile_gets_one_note_instead_of_dit_hints():
    path = str(need_shared(*KINETO["nccl"]))
    proc = run_script("collectives.py", path, "--layers", "40", check=1)
    assert proc.stderr.count("not a DiT inference profile") == 1
    assert "likely extra" not in proc.stdout and "text encoder, VAE, norm" not in proc.stdout
    doc = json.loads(run_script("collectives.py", path, "--layers", "40", "--json", check=1).stdout)
    assert doc["not_dit_inference"].startswith("282 of 2679 compute kernels")
    assert all(row["likely_extra"] == "" for row in doc["calls_per_layer"])
    # without --layers the training step is flagged too (issue 24: it was silent then)
    plain = run_script("collectives.py", path, check=0)
    assert "collectives.py: not a DiT inference profile: 282 of 2679 compute kernels" in plain.stderr
    doc = json.loads(run_script("collectives.py", path, "--json", check=0).stdout)
    assert doc["not_dit_inference"].startswith("282 of 2679 compute kernels")


def test_inference_profile_keeps_the_dit_hints():
    # attention and matmul only (no backward, no optimizer): 3 allgathers over 2 layers x 1 step
    rows = [("7", "compute", "flash_attn_fwd", "", "", 0, 10), ("7", "compute", "gemm", "", "", 20, 10)] * 5
    rows += [("20", "comm", "b", "allgather", "h", 100 + 50 * i, 20) for i in range(3)]
    rep = collectives.analyse(ProfileSet(events=events(rows)), layers=2, steps=1)
    assert rep.not_dit is None and "offload" in rep.layers.iloc[0]["likely_extra"]
    # the same with backward kernels is a training step
    train = rows + [("7", "compute", "softmax_warp_backward", "", "", 500 + i, 1) for i in range(5)]
    rep = collectives.analyse(ProfileSet(events=events(train)), layers=2, steps=1)
    assert rep.not_dit.startswith("5 of 15 compute kernels") and rep.layers.iloc[0]["likely_extra"] == ""


def test_headline_shares_and_blank_cell_notes():
    # rank 0 of the level-2 CANN set (by hand from the table below the headline): allreduce exposed
    # 60.0 us, send 49.5 us, union 103.5 us over a span of 512.345 us -> 11.71 %, 9.66 %, 20.20 %
    from ditpar.analysis.headline import blank_cell_notes, headline

    doc = json.loads(run_script("collectives.py", "tests/data/ascend_cann83", "--json", check=0).stdout)
    r0 = {row["family"]: row for row in doc["headline"] if row["rank"] == 0}
    assert r0["allreduce"]["calls"] == 2 and r0["allreduce"]["exposed_us"] == pytest.approx(60.0)
    assert r0["allreduce"]["exposed_pct_of_span"] == pytest.approx(100 * 60.0 / 512.345)
    assert r0["all (union)"]["exposed_pct_of_span"] == pytest.approx(100 * 103.5 / 512.345)
    rows = [("7", "compute", "gemm", "", "", 0, 10), ("20", "comm", "b", "allgather", "", 100, 20)]
    rep = collectives.analyse(ProfileSet(events=events(rows)))
    head = headline(rep.table, rep.ranks)
    # span 0..120 ns, the all-gather (20 ns) overlaps no compute: 100 * 20 / 120 %
    assert head.iloc[0]["exposed_pct_of_span"] == pytest.approx(100 * 20 / 120)
    notes = blank_cell_notes(rep.table)
    assert any(n.startswith("bytes blank in 1 of 1 rows") for n in notes)
    assert any(n.startswith("transit_us blank") and "never 0" in n for n in notes)


def test_a_long_training_kernel_name_is_cut_around_what_matched():
    from ditpar.analysis.collectives import evidence_excerpt

    name = ("void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid_kernel_cuda("
            "at::TensorIteratorBase&)::{lambda()#1}, at::detail::Array<char*, 2> > sigmoid_backward_out")
    cut = evidence_excerpt(name)
    assert "sigmoid_backward_out" in cut and cut.startswith("...") and len(cut) == 90 + 3
    assert evidence_excerpt("adamw_step") == "adamw_step"
    assert evidence_excerpt("backward_" + "x" * 200).endswith("...")


# --- issue 42 item 9: every profile tool says a training step once ----------------------------------------

def _training_counts_by_hand(folder, rank: str = "*") -> tuple[int, int]:
    """(compute rows, backward/gradient/optimizer rows) of kernel_details.csv, counted with the csv module."""
    total = hits = 0
    for path in sorted(folder.glob(f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")):
        with path.open(newline="") as fh:
            for row in csv.DictReader(fh):
                if row["Name"].startswith("hcom_"):
                    continue
                total += 1
                name = row["Name"].lower()
                hits += "backward" in name or "grad" in name or "adam" in name
    return total, hits


@pytest.mark.parametrize("tool", ["collectives.py", "step_breakdown.py", "bubbles.py"])
@pytest.mark.parametrize("one_rank", [False, True])
def test_every_profile_tool_flags_a_training_step_once(tool, one_rank):
    folder = need_shared("fixtures", "ascend", "msinsight-text-level1")
    total, hits = _training_counts_by_hand(folder)
    assert (total, hits) == (374, 50)
    args = [str(folder)]
    if one_rank and tool != "step_breakdown.py":  # --rank: the whole-table path, the rank's own kernels
        args += ["--rank", "0"]
        total, hits = _training_counts_by_hand(folder, "0")
    for as_json in (False, True):
        proc = run_script(tool, *args, *(["--json"] if as_json else []), check=None)
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr
        assert proc.stderr.count("not a DiT inference profile") == 1
        assert f"{tool}: not a DiT inference profile: {hits} of {total} compute kernels" in proc.stderr
        assert "not a DiT inference profile" not in proc.stdout.lower()
        if as_json:
            assert json.loads(proc.stdout)["not_dit_inference"].startswith(f"{hits} of {total} compute kernels")


@pytest.mark.parametrize("tool", ["collectives.py", "step_breakdown.py", "bubbles.py"])
def test_an_inference_profile_gets_no_training_note(tool):
    proc = run_script(tool, str(ROOT / "tests" / "data" / "ascend_cann83"), "--json", check=None)
    assert "not a DiT inference profile" not in proc.stderr
    assert json.loads(proc.stdout)["not_dit_inference"] is None
