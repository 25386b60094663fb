"""Links and communicators in global ranks, with the group-local rank beside (issue 25)."""

from __future__ import annotations

import json
import shutil

from conftest import ROOT, need_shared, run_script
from ditpar.readers.ascend.text import double_hash

DATA = ROOT / "tests" / "data" / "ascend_cann83"
RANKS = {0: "node0_23101_20251127201437501_ascend_pt", 2: "node0_23103_20251127201437507_ascend_pt"}


def _matrix(local: int, peer: int, group_hash: str) -> dict:
    links = {f"{local}-{local}": {"Transport Type": "LOCAL", "Transit Size(MB)": 1.0, "Transit Time(ms)": 0.01,
                                  "Bandwidth(GB/s)": 100.0},
             f"{local}-{peer}": {"Transport Type": "HCCS", "Transit Size(MB)": 2.0, "Transit Time(ms)": 0.1,
                                 "Bandwidth(GB/s)": 20.0}}
    return {"step3": {"p2p": {f"send-total@{group_hash}": links}, "collective": {}}}


def test_links_map_through_parallel_group_info(tmp_path):
    """pp group group_name_5 holds global ranks [0, 2]: local 1 is global 2."""
    run = tmp_path / "run"
    full = str(double_hash("group_name_5"))
    for rank, name in RANKS.items():
        shutil.copytree(DATA / name, run / name)
        local = [0, 2].index(rank)
        (run / name / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json").write_text(
            json.dumps(_matrix(local, 1 - local, full)))
    doc = json.loads(run_script("collectives.py", str(run), "--json", check=0).stdout)
    got = {(r["rank"], r["link"]): (r["src_rank"], r["dst_rank"], r["mapped_by"]) for r in doc["links"]}
    assert got[(0, "0-1")] == (0, 2, "parallel_group_info")
    assert got[(2, "1-0")] == (2, 0, "parallel_group_info")
    assert got[(2, "1-1")] == (2, 2, "parallel_group_info")
    # the communicator's rows carry the rank's place in it
    pp = {r["rank"]: r["group_rank"] for r in doc["collectives"] if r["group_role"] == "pp"}
    assert pp == {0: 0, 2: 1}


def test_links_map_through_self_links_without_metadata():
    """msinsight level-1 db capture: no parallel_group_info; each rank's own 'k-k' link names it."""
    base = need_shared("fixtures", "ascend", "msinsight-db-level1")
    doc = json.loads(run_script("collectives.py", str(base), "--json", check=0).stdout)
    got = {(r["rank"], r["link"]): (r["src_rank"], r["dst_rank"], r["mapped_by"]) for r in doc["links"]}
    assert got[(0, "0-1")] == (0, 1, "self link") and got[(1, "1-0")] == (1, 0, "self link")
    # local rank 7 of the 8-rank communicator is on no captured rank: left unmapped, not guessed
    assert got[(0, "0-7")] == (0, None, "")
    assert {r["group_rank"] for r in doc["collectives"]} == {0, 1}
