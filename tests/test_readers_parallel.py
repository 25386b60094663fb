"""Ranks read in worker processes give exactly what a serial read gives, merged in rank order."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from conftest import ROOT, need_shared
from ditpar.readers import load_profiles

DATA = ROOT / "tests" / "data" / "ascend_cann83"


def assert_same(a, b):
    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    for name in ("step_trace", "comm_ops", "links"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None)
        if x is not None:
            pd.testing.assert_frame_equal(x, y)
    assert a.groups == b.groups and a.unclassified == b.unclassified and a.sources == b.sources
    assert a.bytes_from == b.bytes_from and a.skipped == b.skipped and a.fmt == b.fmt


@pytest.mark.parametrize("where", ["shipped", "level1"])
def test_parallel_equals_serial(where):
    path = DATA if where == "shipped" else need_shared("fixtures", "ascend", "msinsight-text-level1")
    serial = load_profiles([path], workers=1)
    parallel = load_profiles([path], workers=2)
    assert parallel.ranks == serial.ranks and len(serial.ranks) == 2
    assert_same(serial, parallel)


def test_parallel_keeps_rank_order_and_skips_incomplete(tmp_path):
    """Four folders given in reverse rank order, one incomplete: same as serial, ranks sorted."""
    level1 = need_shared("fixtures", "ascend", "msinsight-text-level1")
    for i, src in enumerate([DATA / "node0_23103_20251127201437507_ascend_pt",
                             level1 / "rank1_ascend_pt", DATA / "node0_23101_20251127201437501_ascend_pt"]):
        shutil.copytree(src, tmp_path / f"{i}_{src.name}")
    # rank 1 from level1 and ranks 0, 2 from the shipped data; plus a broken rank 5
    broken = tmp_path / "9_rank5_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    broken.mkdir(parents=True)
    serial = load_profiles([tmp_path], workers=1)
    parallel = load_profiles([tmp_path], workers=3)
    assert serial.ranks == [0, 1, 2] and [s["rank"] for s in serial.skipped] == [5]
    assert_same(serial, parallel)
    assert parallel.events["rank"].is_monotonic_increasing


def test_kineto_parallel_equals_serial(tmp_path):
    import gzip
    import json

    for rank, name in enumerate(["hta-nccl_data.json.gz", "hta-timeline-sampled_rank-0.json.gz"]):
        doc = json.loads(gzip.decompress(need_shared("fixtures", "kineto", name).read_bytes()))
        doc["distributedInfo"].update(rank=rank, world_size=2)  # traces of two jobs (2 and 128), made one job
        (tmp_path / f"trace{1 - rank}.json").write_text(json.dumps(doc))  # found in reverse rank order
    serial = load_profiles([tmp_path], workers=1)
    parallel = load_profiles([tmp_path], workers=2)
    assert serial.ranks == [0, 1]
    assert_same(serial, parallel)


@pytest.mark.parametrize("workers", [1, 3])
def test_per_rank_breakdown_equals_whole_set(tmp_path, workers):
    """load_profiles(per_rank=rank_rows): each rank's rows made where it is read, merged in rank
    order, equal the breakdown of the whole event table; the events stay behind."""
    from ditpar.analysis.breakdown import rank_rows, step_breakdown

    level1 = need_shared("fixtures", "ascend", "msinsight-text-level1")
    for i, src in enumerate([DATA / "node0_23103_20251127201437507_ascend_pt",
                             level1 / "rank1_ascend_pt", DATA / "node0_23101_20251127201437501_ascend_pt"]):
        shutil.copytree(src, tmp_path / f"{i}_{src.name}")
    (tmp_path / "9_rank5_ascend_pt" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)  # incomplete: skipped
    whole = load_profiles([tmp_path], workers=1)
    split = load_profiles([tmp_path], workers=workers, per_rank=rank_rows)
    assert split.events.empty and split.ranks == whole.ranks == [0, 1, 2]
    assert sorted(split.rank_results) == [0, 1, 2] and split.skipped == whole.skipped
    a, b = step_breakdown(whole), step_breakdown(split)
    assert a.rows == b.rows and a.compared == b.compared > 0
    assert a.mismatches == b.mismatches and a.unmatched_reference == b.unmatched_reference
    assert [r["rank"] for r in b.rows] == sorted(r["rank"] for r in b.rows)


class _SeenColumns:
    """A per-rank maker that asks for three columns and returns what it was handed (picklable)."""

    columns = frozenset({"rank", "start_ns", "kind"})

    def __init__(self):
        self.__qualname__ = type(self).__qualname__  # ProfileSet.rank_results_from names the maker

    def __call__(self, one):
        return (sorted(one.events.columns), len(one.events), int(one.events["start_ns"].min()))


@pytest.mark.parametrize("workers", [1, 2])
def test_per_rank_maker_with_columns_is_handed_only_those(workers):
    """A maker's ``columns``: the reader lets every other event column go before the analysis runs;
    the rows and their values are those of the whole read."""
    whole = load_profiles([DATA], workers=1)
    split = load_profiles([DATA], workers=workers, per_rank=_SeenColumns())
    for rank, (cols, rows, first) in split.rank_results.items():
        mine = whole.events[whole.events["rank"] == rank]
        assert cols == ["kind", "rank", "start_ns"]
        assert rows == len(mine) > 0 and first == int(mine["start_ns"].min())
    assert sorted(split.rank_results) == whole.ranks


def test_workers_flag_reaches_the_reader(monkeypatch):
    """--workers N of the profile tools: N processes (1 = serial), the same JSON; 0 is a usage error."""
    import subprocess
    import sys

    import ditpar.readers.load as load_module

    seen = []
    real = load_module._read_each
    monkeypatch.setattr(load_module, "_read_each", lambda fmt, locs, workers, per_rank=None, tasks=True,
                        progress=None: seen.append(workers) or real(fmt, locs, workers, per_rank, tasks, progress))
    for script in ("step_breakdown.py", "collectives.py", "bubbles.py"):
        outs = []
        for n in ("1", "2"):
            proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), str(DATA), "--json", "--workers", n],
                                  capture_output=True, text=True)
            assert proc.returncode in (0, 1), proc.stderr
            outs.append(proc.stdout)
        assert outs[0] == outs[1] and outs[0].startswith("{")
        bad = subprocess.run([sys.executable, str(ROOT / "scripts" / script), str(DATA), "--workers", "0"],
                             capture_output=True, text=True)
        assert bad.returncode == 2 and "--workers: expected an integer >= 1, got '0'" in bad.stderr
    load_profiles([DATA], workers=2)
    assert seen == [2]


@pytest.mark.parametrize("workers", [2, 3])
def test_parallel_raises_the_first_bad_rank_in_order(tmp_path, workers):
    """Two damaged ranks of four: the error is the one a serial read meets first, whatever process
    (this one or a worker) read which rank."""
    from ditpar.errors import InputError

    for i in range(4):
        src = DATA / ("node0_23101_20251127201437501_ascend_pt", "node0_23103_20251127201437507_ascend_pt")[i % 2]
        dst = tmp_path / f"{i}_rank{i}_ascend_pt"
        shutil.copytree(src, dst)
        for info in dst.glob("profiler_info*.json"):
            info.unlink()
        (dst / f"profiler_info_{i}.json").write_text(f'{{"rank_id": {i}}}')
    for bad in (1, 3):
        csv = tmp_path / f"{bad}_rank{bad}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
        lines = csv.read_text(encoding="utf-8").splitlines(keepends=True)
        cells = lines[5].split(",")
        header = lines[0].split(",")
        cells[header.index("Duration(us)")] = "not-a-number"
        lines[5] = ",".join(cells)
        csv.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(InputError) as serial:
        load_profiles([tmp_path], workers=1)
    with pytest.raises(InputError) as parallel:
        load_profiles([tmp_path], workers=workers)
    assert "1_rank1_ascend_pt" in str(serial.value) and "line 6" in str(serial.value)
    assert str(parallel.value) == str(serial.value)
