"""Ranks read in the bounded process pool: the same answers as a serial read on the shipped ranks tiled
into many, each rank reported as it arrives, and the benchmark's tiling of the shipped ranks."""

from __future__ import annotations

import csv
import subprocess
import sys

import pandas as pd
import pytest
from conftest import ROOT, SCRIPTS

sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_readers  # noqa: E402
from ditpar.readers import load_profiles  # noqa: E402

ROWS = 40     # kernel rows per tiled rank
RANKS = 6     # ranks built from the two shipped ones


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """Six rank folders from the two shipped ranks, each tiled to 40 kernel rows (the benchmark's tiling)."""
    work = tmp_path_factory.mktemp("tiles")
    tiled = bench_readers.tile_shipped(work / "tiles", ROWS)
    return bench_readers.make_ranks(tiled, work / "ranks", RANKS)


def _kernel_rows(folder):
    with open(folder / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_tiling_builds_n_ranks_from_the_shipped_ones(many):
    """Rank r holds shipped rank r % 2 tiled: 40 rows, its first kernel and its start, steps from 1."""
    shipped = bench_readers.shipped_ranks()
    assert [p.name.split("_")[1] for p in shipped] == ["23101", "23103"]   # shipped rank 0, then rank 2
    folders = sorted(many.iterdir(), key=lambda p: int(p.name[4:-10]))
    assert [p.name for p in folders] == [f"rank{r}_ascend_pt" for r in range(RANKS)]
    for r, folder in enumerate(folders):
        rows = _kernel_rows(folder)
        src = _kernel_rows(shipped[r % 2])
        assert len(rows) == ROWS
        # the first tile is the shipped rank's rows unchanged but for the step (1 + tile // 100)
        assert [x["Name"] for x in rows[:len(src)]] == [x["Name"] for x in src]
        assert rows[0]["Start Time(us)"].strip() == src[0]["Start Time(us)"].strip()
        assert {x["Step Id"] for x in rows} == {"1"}
        assert (folder / f"profiler_info_{r}.json").read_text() == f'{{"rank_id": {r}}}'
        assert (folder / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").is_file()
    ps = load_profiles([many], workers=1)
    assert ps.ranks == list(range(RANKS)) and len(ps.events) == RANKS * ROWS


@pytest.mark.parametrize("maker", ["none", "breakdown", "collectives", "bubbles"])
def test_pool_equals_serial_on_the_tiled_shipped_ranks(many, maker):
    """Three readers (this process and two workers) give exactly what one gives, for the whole event table
    and for each per-rank analysis the scripts run where a rank is read."""
    from ditpar.analysis.breakdown import rank_rows, step_breakdown
    from ditpar.analysis.bubbles_ranks import RankGaps
    from ditpar.analysis.bubbles_ranks import analyse_ranks as bubbles_of
    from ditpar.analysis.collectives_ranks import RankCollectives
    from ditpar.analysis.collectives_ranks import analyse_ranks as collectives_of

    per_rank = {"none": None, "breakdown": rank_rows, "collectives": RankCollectives(),
                "bubbles": RankGaps(keep_gaps=False)}[maker]
    serial = load_profiles([many], workers=1, per_rank=per_rank)
    pooled = load_profiles([many], workers=3, per_rank=per_rank)
    assert pooled.ranks == serial.ranks == list(range(RANKS))
    pd.testing.assert_frame_equal(pooled.events, serial.events)
    pd.testing.assert_frame_equal(pooled.steps, serial.steps)
    pd.testing.assert_frame_equal(pooled.step_trace, serial.step_trace)
    assert pooled.groups == serial.groups and pooled.sources == serial.sources
    if maker == "breakdown":
        a, b = step_breakdown(serial), step_breakdown(pooled)
        assert a.rows == b.rows and a.compared == b.compared == RANKS  # one step a rank, each compared
    elif maker == "collectives":
        a, b = collectives_of(serial, per_rank), collectives_of(pooled, per_rank)
        pd.testing.assert_frame_equal(a.table, b.table)
        pd.testing.assert_frame_equal(a.ranks, b.ranks)
        assert len(a.ranks) == RANKS
    elif maker == "bubbles":
        a, b = bubbles_of(serial, per_rank), bubbles_of(pooled, per_rank)
        assert a.tolerance_ns == b.tolerance_ns and a.families == b.families
        assert [r.rank for r in a.ranks] == [r.rank for r in b.ranks] == list(range(RANKS))
        for x, y in zip(a.ranks, b.ranks, strict=True):
            assert x.totals == y.totals and x.totals["gaps_total_ns"] > 0
            pd.testing.assert_frame_equal(x.by_family, y.by_family)


@pytest.mark.parametrize("workers", [1, 3])
def test_each_rank_is_reported_as_it_arrives(many, workers):
    """progress(done, total, rows): once per rank, done counting 1..6, rows adding 40 a rank."""
    seen = []
    load_profiles([many], workers=workers, progress=lambda *a: seen.append(a))
    assert [s[0] for s in seen] == list(range(1, RANKS + 1))
    assert {s[1] for s in seen} == {RANKS}
    assert [s[2] for s in seen] == [ROWS * k for k in range(1, RANKS + 1)]


def test_read_progress_line_timing(capsys):
    """Nothing before 3 s; then at most one line per 2 s; the last rank's line always once past 3 s."""
    from ditpar.cli import ReadProgress

    now = [0.0]
    show = ReadProgress("x.py", clock=lambda: now[0])
    for t, done in [(1.0, 1), (3.5, 2), (4.0, 3), (5.6, 4), (5.7, 6)]:
        now[0] = t
        show(done, 6, done * 1000)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["x.py: read 2/6 ranks, 2,000 rows, 571 rows/s, 4 s",
                     "x.py: read 4/6 ranks, 4,000 rows, 714 rows/s, 6 s",
                     "x.py: read 6/6 ranks, 6,000 rows, 1,053 rows/s, 6 s"]


RUN_NOW = ("import runpy, sys; from ditpar import cli; cli.PROGRESS_AFTER_S = 0.0; script = sys.argv[1]; "
           "sys.argv = sys.argv[1:]; runpy.run_path(script, run_name='__main__')")


@pytest.mark.parametrize("script", ["step_breakdown.py", "collectives.py", "bubbles.py"])
def test_progress_line_on_stderr_under_progress_never_in_json(many, script):
    """--progress --json: the progress lines on stderr (every rank, 6/6 last), stdout one JSON document;
    without --progress (stderr a pipe, not a terminal) no progress line at all."""
    import json

    env = {"PYTHONPATH": str(SCRIPTS)}
    runs = {}
    for flags in (["--progress"], []):
        proc = subprocess.run([sys.executable, "-c", RUN_NOW, str(SCRIPTS / script), str(many), "--json",
                               "--workers", "2", *flags], capture_output=True, text=True, timeout=300,
                              env={**__import__("os").environ, **env})
        assert proc.returncode in (0, 1), proc.stderr
        runs[bool(flags)] = proc
    shown = [ln for ln in runs[True].stderr.splitlines() if " ranks, " in ln and "rows/s" in ln]
    assert shown and shown[-1].startswith(f"{script}: read {RANKS}/{RANKS} ranks, {RANKS * ROWS} rows, ")
    assert "rows/s" not in runs[True].stdout and json.loads(runs[True].stdout)["schema"].endswith("/v1")
    assert runs[True].stdout == runs[False].stdout
    assert "rows/s" not in runs[False].stderr


def test_per_rank_reads_keep_no_rank_ops_in_this_process(many):
    """With a per-rank analysis the ranks' communication.json ops stay where they were read: comm_ops is
    empty here, comm_ops_used_ranks names all six, the evidence and the collectives report are the whole
    read's (its wait / transit split comes from those ops)."""
    from ditpar.analysis.collectives import analyse
    from ditpar.analysis.collectives_ranks import RankCollectives, analyse_ranks

    whole = load_profiles([many], workers=1)
    maker = RankCollectives()
    split = load_profiles([many], workers=3, per_rank=maker)
    assert len(whole.comm_ops) > 0 and sorted(set(whole.comm_ops["rank"])) == list(range(RANKS))
    assert split.comm_ops is None and split.comm_ops_used_ranks == list(range(RANKS))
    assert split.evidence() == whole.evidence() == {r: ["tasks", "step_trace", "communication"]
                                                     for r in range(RANKS)}
    a, b = analyse(whole), analyse_ranks(split, maker)
    pd.testing.assert_frame_equal(a.table.reset_index(drop=True), b.table.reset_index(drop=True))
    assert a.table["transit_us"].notna().any()
