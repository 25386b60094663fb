"""msprof-analyze cluster reader on hostile input (round 3): the rank_set literal, links and rank ids
bounded, the cluster CSV read through files.read_input_text (BOM, FIFO), exact values where accepted."""

from __future__ import annotations

import os
import sqlite3
import threading

import pytest
from conftest import ROOT
from ditpar.errors import InputError
from ditpar.readers import load_profiles
from ditpar.readers.ascend import cluster as msprof_cluster
from msprof_cluster_synth import build_cluster

SHIPPED = sorted((ROOT / "tests" / "data" / "ascend_cann83").glob("*_ascend_pt"))
WHERE = "cg: row 1: rank_set"


def _groups(rank_set: object) -> dict:
    return msprof_cluster._group_rows([{"group_name": "17522688603477080586", "rank_set": rank_set,
                                        "group_id": "g1", "pg_name": "tp"}], "cg")


def test_rank_set_text_is_a_literal_read_without_evaluation():
    got = _groups("[2, 0]")["586"]
    assert (got.ranks, got.full_hash, got.name, got.role) == ((0, 2), "17522688603477080586", "g1", "tp")
    assert _groups("(4,)")["586"].ranks == (4,)


@pytest.mark.parametrize(("rank_set", "message"), [
    ("__import__('os').system('true')", f"{WHERE}: not a Python literal"),
    ("[" * 5000, f"{WHERE}: nests more than 64 levels; not a value the tools read"),
    ("[0, 0, 1]", f"{WHERE}: rank 0 more than once; expected each rank once"),
    ("[0, 1048576]", f"{WHERE}: 1048576 is out of range; expected an integer 0..1048575"),
    ("[0, -1]", f"{WHERE}: -1 is out of range; expected an integer 0..1048575"),
    ("[True, 1]", f"{WHERE} [True, 1]: expected a list of ranks"),
    (str(list(range(1025))), f"{WHERE}: 1025 ranks; a group has at most 1024"),
])
def test_hostile_rank_sets_are_one_error(rank_set, message):
    with pytest.raises(InputError) as err:
        _groups(rank_set)
    assert str(err.value).startswith(message), str(err.value)


def test_link_row_exact_values_and_bounds():
    row = msprof_cluster._link_row(3, "586", "0-2", "HCCS", "1.5", "0.25", "12.5", "w")
    assert row == {"rank": 0, "step": 3, "op": "all", "group_hash": "586", "link": "0-2", "transport": "HCCS",
                   "bytes": 1_500_000, "transit_us": 250.0, "profiler_bandwidth_GBps": 12.5}
    for args, message in (
        (("0-1048576", "1", "1", "1"), "w: destination rank: '1048576' is out of range"),
        (("0-2", "1", "1", "1e308"), "w: Bandwidth(GB/s): '1e308' is out of range"),
        (("0-2", "1", "1e306", "1"), "w: Transit Time(ms): '1e306' is out of range"),
        (("0-2", "5e12", "1", "1"), "w: Transit Size(MB): '5e12' is out of range"),
        (("0-2", "nan", "1", "1"), "w: Transit Size(MB): expected a finite number"),
    ):
        link, size, time_ms, bw = args
        with pytest.raises(InputError) as err:
            msprof_cluster._link_row(None, "", link, "HCCS", size, time_ms, bw, "w")
        assert str(err.value).startswith(message), str(err.value)


def test_cluster_csv_with_a_bom_and_through_a_fifo(tmp_path):
    """The step CSV is read through files.read_input_text: a UTF-8 BOM is dropped, a FIFO is read once."""
    ranks = {0: SHIPPED[0], 2: SHIPPED[1]}
    out = build_cluster(ranks, tmp_path / "plain")
    plain = load_profiles(out, workers=1).step_trace
    csv_path = out / "cluster_step_trace_time.csv"
    text = csv_path.read_bytes()
    csv_path.write_bytes(b"\xef\xbb\xbf" + text)
    assert load_profiles(out, workers=1).step_trace.equals(plain)
    csv_path.unlink()
    os.mkfifo(csv_path)
    writer = threading.Thread(target=lambda: csv_path.write_bytes(text))
    writer.start()
    try:
        got = load_profiles(out, workers=1).step_trace
    finally:
        writer.join(timeout=30)
    assert got.equals(plain)
    assert plain[["rank", "step", "computing_us"]].values.tolist() == [[0, 3, 160.376], [0, 4, 147.595],
                                                                       [2, 3, 94.5], [2, 4, 94.0]]


def test_a_rank_and_step_given_twice_names_both_lines(tmp_path):
    out = build_cluster({0: SHIPPED[0], 2: SHIPPED[1]}, tmp_path / "c")
    path = out / "cluster_step_trace_time.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, lines[1]]) + "\n")
    with pytest.raises(InputError) as err:
        load_profiles(out, workers=1)
    assert str(err.value) == (f"{path}: lines 2 and {len(lines) + 1}: rank 0 step 3 twice; expected one row per "
                              "rank and step")


def test_db_table_checked_before_use_names_the_column(tmp_path):
    out = build_cluster({0: SHIPPED[0], 2: SHIPPED[1]}, tmp_path / "d", db=True)
    con = sqlite3.connect(out / "cluster_analysis.db")
    con.execute("UPDATE ClusterCommAnalyzerBandwidth SET transit_size = 'lots' WHERE rowid = 3")
    con.commit()
    con.close()
    with pytest.raises(InputError) as err:
        load_profiles(out, workers=1)
    assert str(err.value) == (f"{out / 'cluster_analysis.db'}: table ClusterCommAnalyzerBandwidth row 3 column "
                              "transit_size: 'lots': expected a size in MB in 0..4.61169e+12 or empty")
