"""Ascend transfer/wait split, bytes and per-link figures, checked against the profiler's own totals."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from attribution_synth import events
from conftest import ROOT, need_shared, run_script
from ditpar.analysis import collectives
from ditpar.core.profile import ProfileSet

LEVEL1 = ("fixtures", "ascend", "msinsight-text-level1")


def out_dir(rank: int):
    return need_shared(*LEVEL1, f"rank{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT")


def total_op_info(rank: int) -> dict:
    """communication.json's own per-step total of every collective op of the rank."""
    doc = json.loads((out_dir(rank) / "communication.json").read_text())
    return doc["step50"]["collective"]["Total Op Info"]


@pytest.mark.parametrize("rank", [0, 1])
def test_split_equals_the_profilers_total_op_info(rank):
    doc = json.loads(run_script("collectives.py", str(need_shared(*LEVEL1)), "--json", check=0).stdout)
    row = next(c for c in doc["collectives"] if c["rank"] == rank)
    info = total_op_info(rank)["Communication Time Info"]
    assert row["split_ops"] == 4
    assert row["sum_us"] == pytest.approx(1000 * info["Elapse Time(ms)"], abs=0.01)
    assert row["transit_us"] == pytest.approx(1000 * info["Transit Time(ms)"], abs=0.01)
    assert row["wait_us"] == pytest.approx(1000 * info["Wait Time(ms)"], abs=0.01)
    assert row["idle_us"] == pytest.approx(1000 * info["Idle Time(ms)"], abs=0.01)
    assert row["wait_share"] == pytest.approx(info["Wait Time Ratio"], abs=5e-5)  # printed to 4 decimals
    assert row["bytes_from"] == "message"  # trace_view.json present: count x dtype


def test_bytes_from_communication_json_without_trace_view(tmp_path):
    for rank in (0, 1):
        src = need_shared(*LEVEL1, f"rank{rank}_ascend_pt")
        shutil.copytree(src, tmp_path / src.name)
        (tmp_path / src.name / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink()
    doc = json.loads(run_script("collectives.py", str(tmp_path), "--json", check=0).stdout)
    for rank in (0, 1):
        row = next(c for c in doc["collectives"] if c["rank"] == rank)
        hccs = total_op_info(rank)["Communication Bandwidth Info"]["HCCS"]["Transit Size(MB)"]
        assert row["bytes"] == round(hccs * 1e6) and row["bytes_from"] == "transit"
    text = run_script("collectives.py", str(tmp_path), check=0).stdout
    assert "not the message size" in text


@pytest.mark.parametrize("rank", [0, 1])
def test_links_bandwidth_equals_the_profilers(rank):
    doc = json.loads(run_script("collectives.py", str(need_shared(*LEVEL1)), "--json", check=0).stdout)
    links = [lk for lk in doc["links"] if lk["rank"] == rank]
    matrix = json.loads((out_dir(rank) / "communication_matrix.json").read_text())
    total = next(v for k, v in matrix["step50"]["collective"].items() if k.startswith("allreduce-total@"))
    assert sorted(lk["link"] for lk in links) == sorted(total)
    for lk in links:
        ref = total[lk["link"]]
        assert lk["transport"] == ref["Transport Type"]
        assert lk["bytes"] == round(ref["Transit Size(MB)"] * 1e6)
        assert lk["transit_us"] == pytest.approx(1000 * ref["Transit Time(ms)"], abs=1e-6)
        assert lk["bandwidth_GBps"] == pytest.approx(ref["Bandwidth(GB/s)"], abs=6e-4)  # printed to 4 decimals


def test_split_placed_by_op_name_not_by_a_second_classification():
    """An op whose communication.json row classifies differently still lands on its event's row."""
    ev = events([("7", "compute", "mm", "", "", 0, 10),
                 ("comm:586", "comm", "hcom_allReduce__586_0_1", "allreduce", "586", 20, 100)])
    ops = pd.DataFrame({"rank": [0], "name": ["hcom_allReduce__586_0_1"], "family": ["other_comm"],
                        "group": [""], "transit_us": [70.0], "wait_us": [30.0], "idle_us": [0.0]})
    ar = collectives.analyse(ProfileSet(events=ev, comm_ops=ops)).table.iloc[0]
    assert (ar["family"], ar["transit_us"], ar["wait_us"], ar["split_ops"]) == ("allreduce", 70.0, 30.0, 1)
    assert ar["wait_share"] == pytest.approx(0.3)


def test_no_split_is_nan_with_zero_ops_not_zero_time():
    ev = events([("comm:586", "comm", "hcom_allReduce__586_0_1", "allreduce", "586", 20, 100)])
    ar = collectives.analyse(ProfileSet(events=ev)).table.iloc[0]
    assert ar["split_ops"] == 0 and pd.isna(ar["transit_us"]) and pd.isna(ar["wait_share"])


@pytest.mark.parametrize("rank", [0, 1])
def test_link_transit_equals_the_profilers_bandwidth_info_and_the_links(rank):
    """link_transit_us = communication.json's per-transport Transit Time (Total Op Info, HCCS + PCIE + SIO +
    RDMA), the same sum as the links table; transit_us stays the master stream's Time Info figure."""
    doc = json.loads(run_script("collectives.py", str(need_shared(*LEVEL1)), "--json", check=0).stdout)
    row = next(c for c in doc["collectives"] if c["rank"] == rank)
    total = total_op_info(rank)
    bw = total["Communication Bandwidth Info"]
    by_hand = 1000 * sum(bw[t]["Transit Time(ms)"] for t in ("HCCS", "PCIE", "SIO", "RDMA"))
    assert row["link_transit_us"] == pytest.approx(by_hand, abs=0.01)
    assert row["transit_us"] == pytest.approx(1000 * total["Communication Time Info"]["Transit Time(ms)"], abs=0.01)
    off_chip = sum(lk["transit_us"] for lk in doc["links"] if lk["rank"] == rank and lk["transport"] != "LOCAL")
    assert row["link_transit_us"] == pytest.approx(off_chip, abs=0.01)
    assert "master stream only" in doc["transit_note"] and f"rank {rank} allreduce@586" in doc["transit_note"]
    text = run_script("collectives.py", str(need_shared(*LEVEL1)), check=0).stdout
    assert "transit_us < link_transit_us on 2 row(s)" in text


def test_master_stream_without_transit_leaves_wait_share_empty(tmp_path):
    """A mesh-style op: the master stream moves nothing (Time Info Transit 0, its time in Wait) while the
    links carry data: wait_share is not 1.0 ('all waiting') but empty, and the note says why."""
    for rank in (0, 1):
        src = need_shared(*LEVEL1, f"rank{rank}_ascend_pt")
        shutil.copytree(src, tmp_path / src.name)
    path = tmp_path / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    doc = json.loads(path.read_text())
    for name, op in doc["step50"]["collective"].items():
        if name != "Total Op Info":
            info = op["Communication Time Info"]
            info["Wait Time(ms)"] += info["Transit Time(ms)"]
            info["Transit Time(ms)"] = 0
    path.write_text(json.dumps(doc))
    out = json.loads(run_script("collectives.py", str(tmp_path), "--json", check=0).stdout)
    row0 = next(c for c in out["collectives"] if c["rank"] == 0)
    row1 = next(c for c in out["collectives"] if c["rank"] == 1)
    assert row0["transit_us"] == 0 and row0["link_transit_us"] > 27000
    assert row0["wait_share"] is None
    assert row1["wait_share"] == pytest.approx(total_op_info(1)["Communication Time Info"]["Wait Time Ratio"], abs=5e-5)
    assert "on 1 row(s) the master stream moved nothing" in out["transit_note"]
    # the chosen-ranks path (one table) says the same
    one = json.loads(run_script("collectives.py", str(tmp_path), "--rank", "0", "--json", check=0).stdout)
    assert one["collectives"][0]["wait_share"] is None
    assert "on 1 row(s) the master stream moved nothing" in one["transit_note"]


def _header(text: str, title: str) -> str:
    lines = text.splitlines()
    return next(lines[i + 1] for i, ln in enumerate(lines) if ln.startswith(title))


def test_bytes_columns_are_named_by_what_they_hold(tmp_path):
    """issue 42 item 10a: message bytes (trace_view count x dtype) read msg_bytes, what the op moved over its
    links reads transit_bytes; the links' bytes are transit bytes; a mix of ranks says which is which."""
    text = run_script("collectives.py", str(need_shared(*LEVEL1)), check=0).stdout
    assert " msg_bytes " in _header(text, "Collectives per rank")
    assert " transit_bytes " in _header(text, "link = group-local")
    doc = json.loads(run_script("collectives.py", str(need_shared(*LEVEL1)), "--json", check=0).stdout)
    assert set(doc["bytes_meaning"]["collectives[].bytes"]) == {"bytes_from=message", "bytes_from=transit"}
    assert doc["bytes_meaning"]["links[].bytes"].startswith("transit bytes")
    # rank 1 without trace_view.json: its bytes are transit bytes, rank 0's message bytes
    for rank in (0, 1):
        src = need_shared(*LEVEL1, f"rank{rank}_ascend_pt")
        shutil.copytree(src, tmp_path / src.name)
    (tmp_path / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink()
    text = run_script("collectives.py", str(tmp_path), check=0).stdout
    header = _header(text, "Collectives per rank")
    assert " bytes " in header and "msg_bytes" not in header and "transit_bytes" not in header
    assert "bytes differ by rank (bytes_from per row): ranks [0]: message bytes" in text
    assert "ranks [1]: transit bytes" in text
    doc = json.loads(run_script("collectives.py", str(tmp_path), "--json", check=0).stdout)
    by_rank = {c["rank"]: c for c in doc["collectives"]}
    hccs = total_op_info(1)["Communication Bandwidth Info"]["HCCS"]["Transit Size(MB)"]
    assert by_rank[1]["bytes"] == round(hccs * 1e6) and by_rank[1]["bytes_from"] == "transit"
    assert by_rank[0]["bytes_from"] == "message"


def test_links_say_which_peers_were_not_captured():
    """issue 42 item 10b: the level1 capture holds ranks 0 and 1 of an 8-rank communicator without
    parallel_group_info; the links to local ranks 2-7 have no global rank, and the note names them."""
    peers, blank, rows = set(), 0, 0
    for rank in (0, 1):
        matrix = json.loads((out_dir(rank) / "communication_matrix.json").read_text())
        for ops in matrix["step50"].values():
            for key, links in ops.items():
                if "-total@" not in key:
                    continue
                for link in links:
                    src, dst = (int(x) for x in link.split("-"))
                    peers |= {src, dst}
                    rows += 1
                    blank += dst not in (0, 1)  # ranks 0 and 1 map by their own self links
    assert sorted(peers) == list(range(8))
    text = run_script("collectives.py", str(need_shared(*LEVEL1)), check=0).stdout
    assert (f"links: src_rank/dst_rank blank in {blank} of {rows} rows: communicator 586: 8 ranks in its links, "
            f"local rank(s) [2, 3, 4, 5, 6, 7] not captured") in text
    assert "mapped: local 0 = rank 0, local 1 = rank 1" in text
    doc = json.loads(run_script("collectives.py", str(need_shared(*LEVEL1)), "--json", check=0).stdout)
    assert doc["links_note"].startswith(f"links: src_rank/dst_rank blank in {blank} of {rows} rows")
    # the shipped CANN 8.3 profile has no links: no note
    shipped = json.loads(run_script("collectives.py", str(ROOT / "tests" / "data" / "ascend_cann83"), "--json",
                                    check=0).stdout)
    assert shipped["links_note"] is None


def test_shipped_profile_link_transit_from_its_communication_json():
    """The shipped CANN 8.3 profile: per (rank, family, group), link_transit_us is the sum of its ops'
    per-transport Transit Time in communication.json; master-stream transit equals it, so no note."""
    base = ROOT / "tests" / "data" / "ascend_cann83"
    expected: dict[tuple[str, str], float] = {}
    for path in sorted(base.glob("*_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json")):
        rank = 0 if "23101" in str(path) else 2  # profiler_info_0.json / profiler_info_2.json
        for kinds in json.loads(path.read_text()).values():
            for ops in kinds.values():
                for name, op in ops.items():
                    if name == "Total Op Info":
                        continue
                    bw = op["Communication Bandwidth Info"]
                    ms = sum(bw[t]["Transit Time(ms)"] for t in ("HCCS", "PCIE", "SIO", "RDMA") if t in bw)
                    fam = name.split("__")[0].removeprefix("hcom_").lower().replace("receive", "recv")
                    key = (rank, fam)
                    expected[key] = expected.get(key, 0.0) + 1000 * ms
    doc = json.loads(run_script("collectives.py", str(base), "--json", check=0).stdout)
    got = {(c["rank"], c["family"]): c["link_transit_us"] for c in doc["collectives"]}
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key
    assert doc["transit_note"] is None
