#!/usr/bin/env python3
"""Reader speed and memory beside the file format's floors, all measured in one run (issue 16).

Tiles real fixture rows (../shared/fixtures; the shipped tests/data set when those are absent) into
a 1,000,000-row kernel_details.csv (and 8 ranks of it) and a 1,000,000-event Kineto trace, then runs
each job as a whole process, best of 3, and reports wall time and peak resident memory:

  ascend floor      a process that reads the needed columns with pyarrow (times as strings)
  step_breakdown.py read + classify + step breakdown of one rank; ratio to the floor (target <= 3x)
  collectives.py    the same rank (target <= 4x); peak of each < 700 MB
  8 ranks           step_breakdown.py, collectives.py and bubbles.py on 8 x 1M rows, each rank
                    analysed where it is read; ratio to one rank (target <= 5x on 2 cores, < 700 MB)
  kineto floors     orjson.loads and json.load of the whole trace
  collectives.py    on the trace (read + overlap); target >= 10x faster than HTA, < 400 MB
  HTA               TraceAnalysis(...) + get_comm_comp_overlap(), when holistictraceanalysis is installed
  msprof-analyze    (pip install .[msprof]) on full synthetic ranks (benchmarks/synth_ascend.py: the real
                    level1 rank tiled, text and db form, 1 and --ranks ranks of --msprof-rows): text
                    `-m all` vs step_breakdown.py and `-m communication_time` vs collectives.py; db
                    cluster_time_summary (reads task rows) vs step_breakdown.py; db `-m all` and
                    communication_time_sum (read analysis.db's summary tables) vs our scripts with
                    --profiler-tables (marked *), which read the same tables and no task row; collectives.py
                    from the db task rows is shown beside them (see MSPROF_JOBS for what each side computes)

Peak memory is the whole process tree's (psutil: the sum of the resident sets of the process and its
workers, sampled every 20 ms; without psutil the largest single process). The machine may be shared:
compare ratios measured in the same run, not absolute times.

    python benchmarks/bench_readers.py [--rows 1000000] [--repeat 3] [--ranks 8] [--no-hta] [--no-kineto]
                                       [--no-msprof] [--msprof-rows N] [--only-msprof] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "fixtures"
ASCEND_SRC = [SHARED / "ascend" / "msinsight-text-level1" / "rank0_ascend_pt",
              ROOT / "tests" / "data" / "ascend_cann83" / "node0_23101_20251127201437501_ascend_pt"]
KINETO_SRC = [SHARED / "kineto" / "hta-nccl_data.json.gz"]
#: the kernel_details.csv columns the reader reads (those present in the file)
ASCEND_COLUMNS = ["Name", "Accelerator Core", "Start Time(us)", "Duration(us)", "Step Id", "Device_id",
                  "Stream ID", "Type"]


def tile_kernel_details(src: Path, dst: Path, rows: int) -> tuple[Decimal, int]:
    """Copy the rank folder's kernel_details.csv rows again and again, shifted in time; (period us, tiles)."""
    with open(src / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        body = list(reader)
    i_start, i_dur, i_step = header.index("Start Time(us)"), header.index("Duration(us)"), header.index("Step Id")
    starts = [Decimal(r[i_start].strip()) for r in body]
    ends = [s + Decimal(r[i_dur].strip()) for s, r in zip(starts, body, strict=True)]
    period = max(ends) - min(starts) + Decimal("1000.000")
    out_dir = dst / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out_dir.mkdir(parents=True)
    (dst / "rank0_ascend_pt" / "profiler_info_0.json").write_text('{"rank_id": 0}')
    with open(out_dir / "kernel_details.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        written, tile = 0, 0
        while written < rows:
            shift = period * tile
            for r, s in zip(body, starts, strict=True):
                if written == rows:
                    break
                row = list(r)
                row[i_start] = f"{s + shift:.3f}\t"
                row[i_step] = str(1 + tile // 100)
                writer.writerow(row)
                written += 1
            tile += 1
    return period, tile


_NUM = re.compile(r'"(ts|dur)": "(-?\d+(?:\.\d+)?)"')


def tile_kineto(src: Path, dst: Path, events: int) -> None:
    """Repeat the trace's events, shifted by its span; step numbers and correlation ids stay unique."""
    doc = json.loads(gzip.decompress(src.read_bytes()), parse_float=str)
    evs = doc.pop("traceEvents")
    stamps = [Decimal(str(e["ts"])) for e in evs if "ts" in e]
    span = max(stamps) - min(stamps) + Decimal(1000)
    steps = [int(m.group(1)) for e in evs if (m := re.match(r"ProfilerStep#(\d+)$", str(e.get("name", ""))))]
    n_steps = max(steps) - min(steps) + 1 if steps else 0
    path = dst / "rank0.json"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('{"schemaVersion": 1, "distributedInfo": ' + json.dumps(doc.get("distributedInfo", {}))
                 + ', "traceEvents": [\n')
        written, tile = 0, 0
        while written < events:
            for e in evs:
                if written == events:
                    break
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = str(Decimal(str(e2["ts"])) + span * tile)
                if "dur" in e2:
                    e2["dur"] = str(e2["dur"])
                name = str(e2.get("name", ""))
                if name.startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(name.split('#')[1]) + n_steps * tile}"
                if isinstance(e2.get("args"), dict) and "correlation" in e2["args"]:
                    e2["args"] = {**e2["args"], "correlation": e2["args"]["correlation"] + 10_000_000 * tile}
                fh.write(("" if written == 0 else ",\n") + _NUM.sub(r'"\1": \2', json.dumps(e2)))
                written += 1
            tile += 1
        base = doc.get("baseTimeNanoseconds")
        fh.write("\n]" + (f', "baseTimeNanoseconds": {base}' if base is not None else "") + "}\n")


def make_ranks(single: Path, dst: Path, ranks: int) -> None:
    """``ranks`` rank folders sharing one kernel_details.csv (hard links: no extra disk)."""
    src = single / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    for r in range(ranks):
        out = dst / f"rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        out.mkdir(parents=True)
        (dst / f"rank{r}_ascend_pt" / f"profiler_info_{r}.json").write_text(json.dumps({"rank_id": r}))
        try:
            os.link(src, out / "kernel_details.csv")
        except OSError:
            shutil.copy(src, out / "kernel_details.csv")


#: runs a script or a snippet as __main__ and reports its peak RSS (and its workers') on exit
WRAPPER = r"""
import atexit, os, resource, runpy, sys
def _peak():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    os.write(2, f"@@peak_kb {own.ru_maxrss} {kids.ru_maxrss} {cpu}\n".encode())
atexit.register(_peak)
kind, target, *rest = sys.argv[1:]
sys.argv = [target, *rest]
if kind == "script":
    runpy.run_path(target, run_name="__main__")
else:
    exec(compile(open(target).read(), target, "exec"), {"__name__": "__main__"})
"""

FLOOR_ARROW = r"""
import sys
import pyarrow as pa
from pyarrow import csv
path, cols = sys.argv[1], sys.argv[2].split("|")
header = open(path, encoding="utf-8").readline().rstrip("\r\n").split(",")
cols = [c for c in cols if c in header]
t = csv.read_csv(path, convert_options=csv.ConvertOptions(include_columns=cols,
                 column_types={c: pa.string() for c in cols}))
print(t.num_rows)
"""

FLOOR_ORJSON = r"""
import sys, orjson
with open(sys.argv[1], "rb") as fh:
    print(len(orjson.loads(fh.read())["traceEvents"]))
"""

FLOOR_JSON = r"""
import sys, json
with open(sys.argv[1], encoding="utf-8") as fh:
    print(len(json.load(fh)["traceEvents"]))
"""

HTA = r"""
import logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
print(ta.get_comm_comp_overlap(visualize=False).to_dict("records"))
"""


MSPROF = r"""
import sys
from msprof_analyze.cli.entrance import msprof_analyze_cli
sys.argv = ["msprof-analyze", *sys.argv[1:]]
msprof_analyze_cli()
"""


def run_once(kind: str, target: str, args: list[str], work: Path) -> tuple[float, float, float]:
    """Wall seconds, peak MB (the process tree's, see tree_peak_mb) and CPU seconds of one whole process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "scripts"), "MPLBACKEND": "Agg"}
    t0 = time.perf_counter()
    with tempfile.TemporaryFile(mode="w+") as err:  # a file, not a pipe: a chatty job never blocks on it
        proc = subprocess.Popen([sys.executable, "-c", WRAPPER, kind, target, *args], stdout=subprocess.DEVNULL,
                                stderr=err, text=True, env=env, cwd=work)
        tree_mb = tree_peak_mb(proc)
        proc.wait()
        err.seek(0)
        stderr = err.read()
    wall = time.perf_counter() - t0
    m = re.search(r"@@peak_kb (\d+) (\d+) ([0-9.]+)", stderr)
    allowed = (0, 1) if kind == "script" else (0,)  # a script exits 1 when one of its checks fails
    if proc.returncode not in allowed or not m:
        raise SystemExit(f"benchmark job failed ({kind} {target} {' '.join(args)}): exit {proc.returncode}\n"
                         f"{stderr[-2000:]}")
    return wall, tree_mb or max(int(m.group(1)), int(m.group(2))) / 1024, float(m.group(3))


def tree_peak_mb(proc: subprocess.Popen) -> float | None:
    """Largest sum of resident memory of ``proc`` and all its descendants, sampled until it ends (psutil;
    None without it). Shared library pages count once per process: an upper bound of what the run holds."""
    try:
        import psutil
    except ImportError:
        return None
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        total = 0
        try:
            for p in [root, *root.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        peak = max(peak, total)
        time.sleep(0.02)
    return peak / 2**20


def best_of(repeat: int, kind: str, target: str, args: list[str], work: Path) -> dict:
    """Best wall time and best CPU time (user + system, workers included) of ``repeat`` runs."""
    runs = [run_once(kind, target, args, work) for _ in range(repeat)]
    return {"s": min(r[0] for r in runs), "peak_MB": max(r[1] for r in runs), "cpu_s": min(r[2] for r in runs)}


def snippet(work: Path, name: str, code: str) -> str:
    path = work / f"bench_job_{name}.py"  # never the name of a package the job imports
    path.write_text(code)
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows / events per rank (default 1000000)")
    parser.add_argument("--ranks", type=int, default=8, help="ranks of the multi-rank job (default 8; 0 skips)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per job; the best is kept (default 3)")
    parser.add_argument("--no-hta", action="store_true", help="skip HTA even when it is installed")
    parser.add_argument("--no-kineto", action="store_true", help="skip the Kineto part")
    parser.add_argument("--no-msprof", action="store_true", help="skip msprof-analyze even when it is installed")
    parser.add_argument("--msprof-rows", type=int, help="rows per rank of the msprof-analyze comparison "
                        "(default: --rows)")
    parser.add_argument("--only-msprof", action="store_true", help="run the msprof-analyze comparison only")
    parser.add_argument("--keep", metavar="DIR", help="write the tiled inputs here instead of a temp folder")
    args = parser.parse_args()
    ascend_src = next((p for p in ASCEND_SRC if p.is_dir()), None)
    kineto_src = next((p for p in KINETO_SRC if p.is_file()), None)
    scripts = ROOT / "scripts"
    rows: list[tuple[str, dict, str, float | None, str]] = []  # job, result, ratio label, target, note
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.only_msprof:
            pass
        elif ascend_src is not None:
            one = work / "ascend"
            if not (one / "rank0_ascend_pt").is_dir():
                tile_kernel_details(ascend_src, one, args.rows)
            kd = one / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
            floor = best_of(args.repeat, "code", snippet(work, "floor_arrow", FLOOR_ARROW),
                            [str(kd), "|".join(ASCEND_COLUMNS)], work)
            rows.append(("ascend: pyarrow columns read (floor)", floor, "", None, "times as strings"))
            sb = best_of(args.repeat, "script", str(scripts / "step_breakdown.py"), [str(one), "--json"], work)
            rows.append(("ascend: step_breakdown.py", sb, _ratio(sb, floor, "floor"), 3.0, "<= 3x, < 700 MB"))
            co = best_of(args.repeat, "script", str(scripts / "collectives.py"), [str(one), "--json"], work)
            rows.append(("ascend: collectives.py", co, _ratio(co, floor, "floor"), 4.0, "<= 4x, < 700 MB"))
            bu = best_of(args.repeat, "script", str(scripts / "bubbles.py"), [str(one), "--json"], work)
            rows.append(("ascend: bubbles.py", bu, _ratio(bu, floor, "floor"), None, "< 700 MB"))
            if args.ranks > 1:
                many = work / f"ascend{args.ranks}"
                if not many.is_dir():
                    make_ranks(one, many, args.ranks)
                mr = best_of(args.repeat, "script", str(scripts / "step_breakdown.py"), [str(many), "--json"], work)
                rows.append((f"ascend: {args.ranks} ranks step_breakdown.py", mr,
                             f"{mr['s'] / sb['s']:.2f}x one rank (wall)", 5.0, f"<= 5x on {_cores()} cores"))
                for name, single in (("collectives.py", co), ("bubbles.py", bu)):
                    res = best_of(args.repeat, "script", str(scripts / name), [str(many), "--json"], work)
                    rows.append((f"ascend: {args.ranks} ranks {name}", res, f"{res['s'] / single['s']:.2f}x one rank (wall)",
                                 5.0, f"<= 5x on {_cores()} cores, < 700 MB"))
        else:
            print("# Ascend fixture absent; Ascend part skipped", file=sys.stderr)
        if args.only_msprof:
            pass
        elif kineto_src is not None and not args.no_kineto:
            kdir = work / "kineto"
            trace = kdir / "rank0.json"
            if not trace.is_file():
                kdir.mkdir(parents=True, exist_ok=True)
                tile_kineto(kineto_src, kdir, args.rows)
            if importlib.util.find_spec("orjson"):
                fo = best_of(args.repeat, "code", snippet(work, "floor_orjson", FLOOR_ORJSON), [str(trace)], work)
                rows.append(("kineto: orjson full parse (floor)", fo, "", None, "floats as floats"))
            fj = best_of(args.repeat, "code", snippet(work, "floor_json", FLOOR_JSON), [str(trace)], work)
            rows.append(("kineto: json full parse (floor)", fj, "", None, "floats as floats"))
            kc = best_of(args.repeat, "script", str(scripts / "collectives.py"), [str(trace), "--json"], work)
            rows.append(("kineto: collectives.py", kc, _ratio(kc, fj, "json"), None, "< 400 MB"))
            if not args.no_hta and importlib.util.find_spec("hta"):
                ht = best_of(args.repeat, "code", snippet(work, "hta", HTA), [str(kdir)], work)
                rows.append(("kineto: HTA load + overlap", ht, _ratio(ht, kc, "ours"), 10.0,
                             "ours >= 10x faster"))
            else:
                print("# HTA not installed (or --no-hta): HTA comparison skipped", file=sys.stderr)
        else:
            print("# Kineto part skipped (--no-kineto, or ../shared/fixtures/kineto absent)", file=sys.stderr)
        why = msprof_skip_reason(args.no_msprof)
        if why:
            print(f"# msprof-analyze comparison skipped: {why}", file=sys.stderr)
        else:
            rows += msprof_rows(work, args.msprof_rows or args.rows, args.ranks, args.repeat)
    print(f"best of {args.repeat} whole processes, {args.rows} rows/events per rank, {_cores()} usable cores")
    print(f"{'job':<44} {'wall_s':>7} {'cpu_s':>7} {'peak_MB':>8}  {'ratio (wall / cpu)':<46} target")
    for job, res, ratio, _, note in rows:
        print(f"{job:<44} {res['s']:>7.2f} {res['cpu_s']:>7.2f} {res['peak_MB']:>8.0f}  {ratio:<46} {note}")
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}; ratios are measured in "
          "this run. On a shared machine wall times vary with the load; CPU times (user + system, workers "
          "included) vary less")


#: the real ranks the msprof-analyze comparison tiles (text and db form of the same job family)
MSPROF_TEXT_SRC = SHARED / "ascend" / "msinsight-text-level1" / "rank0_ascend_pt"
MSPROF_DB_SRC = SHARED / "ascend" / "msinsight-db-level1" / "rank0_ascend_pt"


def msprof_skip_reason(disabled: bool) -> str | None:
    """Why the msprof-analyze comparison cannot run here, or None."""
    if disabled:
        return "--no-msprof"
    if importlib.util.find_spec("msprof_analyze") is None:
        return "msprof-analyze is not installed (pip install -e .[msprof])"
    missing = [str(p) for p in (MSPROF_TEXT_SRC, MSPROF_DB_SRC) if not p.is_dir()]
    if missing:
        return f"the real ranks it tiles are absent: {', '.join(missing)} (../shared/fixtures)"
    return None


def make_msprof_inputs(work: Path, rows: int, ranks: int) -> dict[tuple[str, int], Path]:
    """Text and db cluster folders of 1 and ``ranks`` ranks (ranks beyond 0 share rank 0's files by hard link)."""
    from synth_ascend import tile_db_rank, tile_text_rank

    out: dict[tuple[str, int], Path] = {}
    text1, db1 = work / "msprof_text1", work / "msprof_db1"
    if not text1.is_dir():
        period_us, tiles = tile_kernel_details(MSPROF_TEXT_SRC, text1, rows)
        tile_text_rank(MSPROF_TEXT_SRC, text1 / "rank0_ascend_pt", tiles, period_us, 0)
    if not db1.is_dir():
        tile_db_rank(MSPROF_DB_SRC, db1 / "rank0_ascend_pt", rows, 0)
    out["text", 1], out["db", 1] = text1, db1
    if ranks > 1:
        for form, one in (("text", text1), ("db", db1)):
            many = work / f"msprof_{form}{ranks}"
            if not many.is_dir():
                _link_ranks(one / "rank0_ascend_pt", many, ranks)
            out[form, ranks] = many
    return out


def _link_ranks(rank0: Path, dst: Path, ranks: int) -> None:
    """``ranks`` rank folders holding rank 0's files (hard links; the profiler db named for each rank)."""
    for r in range(ranks):
        rank_dir = dst / f"rank{r}_ascend_pt"
        (rank_dir / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        (rank_dir / f"profiler_info_{r}.json").write_text(json.dumps({"rank_id": r}))
        if (rank0 / "profiler_metadata.json").is_file():
            _link(rank0 / "profiler_metadata.json", rank_dir / "profiler_metadata.json")
        for f in (rank0 / "ASCEND_PROFILER_OUTPUT").iterdir():
            name = f"ascend_pytorch_profiler_{r}.db" if f.name.startswith("ascend_pytorch_profiler") else f.name
            _link(f, rank_dir / "ASCEND_PROFILER_OUTPUT" / name)


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy(src, dst)


#: (form, msprof-analyze arguments, the job(s) of ours it is set against: (script, extra arguments)).
#: Each pair reads the same evidence: msprof-analyze's db `-m all` reads analysis.db StepTraceTime and
#: CommAnalyzerTime/Bandwidth/Matrix (cluster step trace, communication time sum, matrix sum), so ours is
#: step_breakdown.py + collectives.py with --profiler-tables (step rows, per-communicator times, links; the
#: two processes' times summed); `communication_time_sum` reads CommAnalyzerTime/Bandwidth -> collectives.py
#: --profiler-tables; `cluster_time_summary` reads TASK x COMPUTE_TASK_INFO x CANN_API, COMMUNICATION_OP and
#: memcpy tasks per step -> step_breakdown.py from the task rows (computing, communication, overlap, free
#: per step, checked against StepTraceTime). Text `-m all` / `communication_time` -> our task-level scripts.
MSPROF_JOBS = [
    ("text", ["-m", "all", "--export_type", "text"], [("step_breakdown.py", ())]),
    ("text", ["-m", "communication_time", "--export_type", "text"], [("collectives.py", ())]),
    ("db", ["-m", "all"], [("step_breakdown.py", ("--profiler-tables",)), ("collectives.py", ("--profiler-tables",))]),
    ("db", ["-m", "cluster_time_summary"], [("step_breakdown.py", ())]),
    ("db", ["-m", "communication_time_sum"], [("collectives.py", ("--profiler-tables",))]),
]
#: our task-level jobs on the db form shown beside them (no msprof-analyze job reads as much)
MSPROF_INFO_JOBS = [("db", ("collectives.py", ()))]


def msprof_rows(work: Path, rows: int, ranks: int, repeat: int) -> list[tuple[str, dict, str, float | None, str]]:
    """msprof-analyze's jobs and ours on the same folders, at 1 and ``ranks`` ranks; ratio = theirs / ours."""
    inputs = make_msprof_inputs(work, rows, ranks)
    code = snippet(work, "msprof", MSPROF)
    out: list[tuple[str, dict, str, float | None, str]] = []
    ours: dict[tuple[str, int, str, tuple], dict] = {}

    def run_ours(form: str, n: int, script: str, extra: tuple) -> dict:
        """One job of ours, run once per (form, ranks, script, arguments) and listed."""
        key = (form, n, script, extra)
        if key not in ours:
            ours[key] = best_of(repeat, "script", str(ROOT / "scripts" / script),
                                [str(inputs[form, n]), "--json", *extra], work)
            out.append((f"{form} {n}r: {' '.join([script, *extra])}", ours[key], "", None, f"{rows} rows/rank"))
        return ours[key]

    for n in sorted({1, max(ranks, 1)}):
        for form, (script, extra) in MSPROF_INFO_JOBS:
            run_ours(form, n, script, extra)
        for form, margs, jobs in MSPROF_JOBS:
            mine = [run_ours(form, n, script, extra) for script, extra in jobs]
            both = {"s": sum(m["s"] for m in mine), "cpu_s": sum(m["cpu_s"] for m in mine),
                    "peak_MB": max(m["peak_MB"] for m in mine)}
            target = work / "msprof_out"
            runs = []
            for _ in range(repeat):
                shutil.rmtree(target, ignore_errors=True)  # each run writes its cluster_analysis_output anew
                runs.append(best_of(1, "code", code, ["cluster", "-d", str(inputs[form, n]), *margs, "-o",
                                                      str(target), "--force"], work))
            theirs = {"s": min(r["s"] for r in runs), "peak_MB": max(r["peak_MB"] for r in runs),
                      "cpu_s": min(r["cpu_s"] for r in runs)}
            label = " + ".join(script[:-3] + ("*" if extra else "") for script, extra in jobs)
            out.append((f"{form} {n}r: msprof {margs[1]}", theirs, _ratio(theirs, both, label), 1.0,
                        "ours faster: ratio > 1"))
    return out


def _ratio(a: dict, b: dict, what: str) -> str:
    return f"{a['s'] / b['s']:.2f}x / {a['cpu_s'] / b['cpu_s']:.2f}x {what}"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


if __name__ == "__main__":
    main()
