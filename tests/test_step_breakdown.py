"""step_breakdown reproduces the profiler's step_trace_time.csv, and hand computations on Kineto."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from decimal import Decimal

import pytest
from conftest import ROOT, need_shared, run_script
from ditpar.analysis.breakdown import step_breakdown
from ditpar.readers import load_profiles

CANN83 = ROOT / "tests" / "data" / "ascend_cann83"
HEADER = {
    "Computing": "computing_us",
    "Communication(Not Overlapped)": "communication_not_overlapped_us",
    "Overlapped": "overlapped_us",
    "Communication": "communication_us",
    "Free": "free_us",
    "Stage": "stage_us",
    "Bubble": "bubble_us",
}


def profiler_rows(rank_dir):
    """step_trace_time.csv read with the csv module (independent of the reader under test)."""
    path = rank_dir / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def rank_of(rank_dir):
    return int(next(rank_dir.glob("profiler_info_*.json")).stem.split("_")[-1])


@pytest.mark.parametrize("level", ["msinsight-text-level0", "msinsight-text-level1"])
def test_every_fixture_rank_matches_step_trace_time(level):
    folder = need_shared("fixtures", "ascend", level)
    result = step_breakdown(load_profiles([folder]))
    ours = {(r["rank"], r["step"]): r for r in result.rows}
    checked = 0
    for rank_dir in sorted(folder.glob("*_ascend_pt")):
        for ref in profiler_rows(rank_dir):
            row = ours[(rank_of(rank_dir), int(ref["Step"]))]
            for col, key in HEADER.items():
                tol = 0.25 if key == "stage_us" else 0.05
                assert abs(row[key] - float(ref[col])) <= tol, (rank_dir.name, col, row[key], ref[col])
                checked += 1
    assert checked == 2 * len(HEADER)
    assert result.ok and result.compared == 2


# hand-derived in tests/data/ascend_cann83/README.md
CANN83_EXPECTED = {
    (0, 3): (160.376, 84.5, 49.0, 35.5, 0.625, 210.001, 0.0),
    (0, 4): (147.595, 89.5, 54.5, 35.0, 10.25, 212.345, 0.0),
    (2, 3): (94.5, 155.0, 144.5, 10.5, 1.0, 115.0, 125.0),
    (2, 4): (94.0, 179.125, 169.125, 10.0, 0.875, 113.875, 150.125),
}
KEYS = ("computing_us", "communication_us", "communication_not_overlapped_us", "overlapped_us", "free_us",
        "stage_us", "bubble_us")


def test_cann83_set_matches_hand_answers_exactly():
    result = step_breakdown(load_profiles([CANN83]))
    got = {(r["rank"], r["step"]): tuple(r[k] for k in KEYS) for r in result.rows}
    assert got == CANN83_EXPECTED
    assert result.ok and result.compared == 4
    assert all(r["max_abs_diff_us"] == 0 for r in result.rows)


def test_cann83_matches_its_own_step_trace_file():
    for rank_dir in sorted(CANN83.glob("*_ascend_pt")):
        for ref in profiler_rows(rank_dir):
            want = CANN83_EXPECTED[(rank_of(rank_dir), int(ref["Step"]))]
            assert tuple(float(ref[c]) for c in HEADER) == (want[0], want[2], want[3], want[1], want[4], want[5],
                                                            want[6])


def merge(spans):
    """Merged intervals by the textbook sweep (independent of ditpar.core.intervals)."""
    out = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(merged):
    return sum(e - s for s, e in merged)


def overlap(a, b):
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def kineto_by_hand(path):
    """Totals over the whole capture from the raw JSON, with Decimal microseconds."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    comm, comp, every = [], [], []
    for ev in doc["traceEvents"]:
        if ev.get("ph") != "X" or ev.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        s = Decimal(ev["ts"]) * 1000
        e = s + Decimal(ev["dur"]) * 1000
        every.append((s, e))
        if ev["cat"] != "kernel":
            continue  # memory copies are in neither set
        (comm if "nccl" in ev["name"].lower() else comp).append((s, e))
    mc, mp = merge(comm), merge(comp)
    span = max(e for _, e in every) - min(s for s, _ in every)
    busy = merge(comm + comp)
    return {"communication_us": length(mc) / 1000, "computing_us": length(mp) / 1000,
            "overlapped_us": overlap(mc, mp) / 1000,
            "communication_not_overlapped_us": (length(mc) - overlap(mc, mp)) / 1000,
            "free_us": (span - length(busy)) / 1000, "stage_us": span / 1000}


def strip_steps(src, dst):
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


@pytest.mark.parametrize("name", ["hta-nccl_data.json.gz", "hta-timeline-sampled_rank-0.json.gz"])
def test_kineto_whole_capture_matches_hand_computation(tmp_path, name):
    src = need_shared("fixtures", "kineto", name)
    want = kineto_by_hand(src)
    result = step_breakdown(load_profiles([strip_steps(src, tmp_path / name)]))
    assert len(result.rows) == 1 and result.rows[0]["step"] is None
    row = result.rows[0]
    for key, value in want.items():
        assert row[key] == pytest.approx(float(value), abs=0.0005), key
    assert want["overlapped_us"] > 0 and want["communication_us"] > 0  # the check compares something


def test_kineto_steps_cover_their_windows():
    ps = load_profiles([need_shared("fixtures", "kineto", "hta-nccl_data.json.gz")])
    rows = step_breakdown(ps).rows
    assert [r["step"] for r in rows] == [4, 5, 6]
    for r in rows:
        # inside a window every nanosecond is computing, exposed communication or free
        total = r["computing_us"] + r["communication_not_overlapped_us"] + r["free_us"]
        assert total == pytest.approx(r["stage_us"], abs=1e-6)
        assert r["reference"] is None


# --- command line -------------------------------------------------------------------------


def test_cli_table_json_csv(tmp_path):
    proc = run_script("step_breakdown.py", str(CANN83), check=0)
    assert "all columns agree" in proc.stdout and "210.001" in proc.stdout
    doc = json.loads(run_script("step_breakdown.py", str(CANN83), "--json", check=0).stdout)
    assert doc["schema"] == "dit-parallel-opt/step_breakdown/v1" and doc["status"] == "match"
    row = doc["rows"][0]
    for key in ("rank", "step", "computing_us", "communication_us", "communication_not_overlapped_us",
                "overlapped_us", "free_us", "stage_us", "reference", "max_abs_diff_us"):
        assert key in row
    assert set(row["reference"]) >= set(KEYS)
    out = tmp_path / "b.csv"
    run_script("step_breakdown.py", str(CANN83), "--csv", str(out), check=0)
    assert out.read_text().splitlines()[0].startswith("rank,step,computing_us")


def edited_copy(tmp_path, column, delta):
    dst = tmp_path / "set"
    shutil.copytree(CANN83, dst)
    path = next(dst.glob("node0_23101*")) / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    rows = list(csv.reader(path.read_text().splitlines()))
    i = rows[0].index(column)
    rows[1][i] = f"{float(rows[1][i]) + delta:.3f}"
    path.write_text("\r\n".join(",".join(r) for r in rows) + "\r\n")
    return dst


# rank 0 step 3 of the shipped set: 4 compute segments, 2 free segments, 1 ns resolution, so the
# tolerance is 2 x 4 x 1 ns = 0.008 us for Computing, 2 x 2 x 1 ns = 0.004 us for Free, and
# 2 x 1 x 1 ns + 0.25 us for Stage (the float64 spacing of torch_npu's own Stage)
@pytest.mark.parametrize(("column", "delta", "code"),
                         [("Computing", 0.007, 0), ("Computing", 0.009, 1), ("Stage", 0.251, 0), ("Stage", 0.253, 1),
                          ("Free", -0.1, 1)])
def test_cli_exit_code_follows_tolerance(tmp_path, column, delta, code):
    proc = run_script("step_breakdown.py", str(edited_copy(tmp_path, column, delta)), check=code)
    if code:
        assert "MISMATCH" in proc.stdout and column.lower() in proc.stderr


def test_no_reference_for_kineto_is_not_a_pass_or_fail():
    doc = json.loads(run_script("step_breakdown.py", str(need_shared("fixtures", "kineto", "hta-nccl_data.json.gz")),
                                "--json", check=0).stdout)
    assert doc["status"] == "no-reference" and doc["compared"] == 0


# --- bad input: exit 2, one line on stderr naming the file and what was expected -----------


def bad_copy(tmp_path, edit):
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(next(CANN83.glob("node0_23101*")), dst)
    kd = dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    kd.write_bytes(edit(kd.read_bytes().decode()).encode())
    return dst, kd


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("step_breakdown.py: error: ")
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])


def test_cli_empty_folder(tmp_path):
    assert_one_line_error(run_script("step_breakdown.py", str(tmp_path)), f"{tmp_path}: no profile found",
                          "expected *_ascend_pt folders", "found an empty folder")


def test_cli_folder_without_profile(tmp_path):
    (tmp_path / "readme.txt").write_text("not a profile")
    assert_one_line_error(run_script("step_breakdown.py", str(tmp_path)), f"{tmp_path}: no profile found",
                          "found ['readme.txt']")


def test_cli_missing_path(tmp_path):
    assert_one_line_error(run_script("step_breakdown.py", str(tmp_path / "nope")),
                          f"{tmp_path / 'nope'}: no such file or folder")


def test_cli_csv_missing_column(tmp_path):
    _, kd = bad_copy(tmp_path, lambda t: t.replace("Duration(us)", "Dur"))
    assert_one_line_error(run_script("step_breakdown.py", str(tmp_path)),
                          f"{kd}: missing column(s) ['Duration(us)']; have [")


def test_cli_non_numeric_time(tmp_path):
    _, kd = bad_copy(tmp_path, lambda t: t.replace("1764246877073670.140\t", "N/A", 1))
    assert_one_line_error(run_script("step_breakdown.py", str(tmp_path)),
                          f"{kd}: column 'Start Time(us)': line 3: expected a decimal time in microseconds, got 'N/A'")


def test_cli_truncated_trace(tmp_path):
    src = need_shared("fixtures", "kineto", "hta-nccl_data.json.gz")
    path = tmp_path / "rank0.json"
    path.write_bytes(gzip.decompress(src.read_bytes())[:200000])
    assert_one_line_error(run_script("step_breakdown.py", str(path)), f"{path}: file ends early", "truncated")


def test_cli_truncated_gzip(tmp_path):
    src = need_shared("fixtures", "kineto", "hta-nccl_data.json.gz")
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(src.read_bytes()[:100000])
    assert_one_line_error(run_script("step_breakdown.py", str(path)), f"{path}: cannot read",
                          "expected a JSON trace")


def test_cli_non_json_trace(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text("this is not json\n")
    assert_one_line_error(run_script("step_breakdown.py", str(path)), f"{path}: expected '[' or '{{'",
                          "expected a Chrome-trace JSON document")
