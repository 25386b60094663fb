#!/usr/bin/env python3
"""Reader speed and memory beside the file format's floor, msprof-analyze and HTA, measured in one run.

Builds its inputs from the shipped two-rank profile (tests/data/ascend_cann83): each shipped rank's
kernel_details.csv tiled in time to --rows rows, with its step_trace_time.csv and communication.json
tiled the same way (benchmarks/synth_ascend.py), then --ranks rank folders that take the shipped ranks
in turn (hard links: no extra disk). Each job runs as a whole process --repeat times, the median kept; its row is
printed on stderr as it finishes and one table on stdout at the end:

  ascend floor       a process that reads the needed columns with pyarrow (times as strings)
  one rank           step_breakdown.py, collectives.py, bubbles.py on kernel_details.csv alone (what the
                     floor reads); ratio to the floor (wall / CPU)
  N ranks            the same scripts on --ranks such ranks, each rank analysed where it is read; ratio
                     to one rank (wall / CPU); peak of the whole process tree
  msprof-analyze     (when installed: pip install .[msprof]) text `-m all` vs step_breakdown.py and
                     `-m communication_time` vs collectives.py on the same folders (kernel, step and
                     communication files), 1 and N ranks; the db
                     form (task rows and analysis.db) where the real db rank of ../shared is present
  kineto / HTA       collectives.py vs HTA load + overlap, where ../shared's Kineto trace is present

The project's modules are byte-compiled first (as an installed package's are), so no job pays for
compiling them. Peak memory is the whole process tree's (psutil: the sum of the resident sets of the process and its
workers, sampled every 20 ms; without psutil the largest single process). The machine may be shared:
compare ratios measured in the same run, not absolute times.

    python3 benchmarks/bench_readers.py --rows 1000000 --ranks 8 --repeat 3
    python3 benchmarks/bench_readers.py --rows 100000 --ranks 64 --repeat 1
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
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "fixtures"
#: the shipped ranks the Ascend part tiles (rank 0 and rank 2 of a hand-built CANN 8.3 text export)
SHIPPED = ROOT / "tests" / "data" / "ascend_cann83"
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


def shipped_ranks() -> list[Path]:
    """The shipped rank folders, in folder-name order (rank 0, then rank 2)."""
    return sorted(p for p in SHIPPED.iterdir() if p.is_dir() and p.name.endswith("_ascend_pt"))


def tile_shipped(dst: Path, rows: int) -> list[Path]:
    """Each shipped rank tiled to ``rows`` kernel rows, with its step and communication files tiled alike
    (synth_ascend.tile_text_rank); the tiled rank folders, in shipped order."""
    from synth_ascend import tile_text_rank

    out = []
    for k, src in enumerate(shipped_ranks()):
        tiled = dst / f"shipped{k}"
        if not (tiled / "rank0_ascend_pt").is_dir():
            period_us, tiles = tile_kernel_details(src, tiled, rows)
            tile_text_rank(src, tiled / "rank0_ascend_pt", tiles, period_us, 0)
        out.append(tiled / "rank0_ascend_pt")
    return out


def make_ranks(tiled: list[Path], dst: Path, ranks: int, kernels_only: bool = False) -> Path:
    """``ranks`` rank folders under ``dst``: rank r holds the files of tiled rank r % len(tiled) (hard links;
    ``kernels_only``: kernel_details.csv alone) and says its rank in profiler_info_<r>.json (no
    profiler_metadata.json: the shipped one names a world of 4 ranks and its groups)."""
    for r in range(ranks):
        out = dst / f"rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        out.mkdir(parents=True)
        (dst / f"rank{r}_ascend_pt" / f"profiler_info_{r}.json").write_text(json.dumps({"rank_id": r}))
        for f in sorted((tiled[r % len(tiled)] / "ASCEND_PROFILER_OUTPUT").iterdir()):
            if f.name == "kernel_details.csv" or not kernels_only:
                _link(f, out / f.name)
    return dst


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


def compile_scripts() -> None:
    """Byte-compile the project's modules once, as an installed package has them: with
    PYTHONDONTWRITEBYTECODE set (or a read-only checkout) every job would otherwise compile them anew,
    about 0.15 s of CPU that neither the floor nor msprof-analyze (compiled when installed) pays."""
    import compileall

    compileall.compile_dir(ROOT / "scripts", quiet=2)


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
    """Median wall time and median CPU time (user + system, workers included) of ``repeat`` runs, and the
    largest peak (on a shared machine the median is what another run would likely see; the best is luck)."""
    runs = [run_once(kind, target, args, work) for _ in range(repeat)]
    return {"s": median(r[0] for r in runs), "peak_MB": max(r[1] for r in runs), "cpu_s": median(r[2] for r in runs)}


def snippet(work: Path, name: str, code: str) -> str:
    path = work / f"bench_job_{name}.py"  # never the name of a package the job imports
    path.write_text(code)
    return str(path)


class Table:
    """The benchmark's rows: each printed on stderr as it finishes, all on stdout at the end."""

    HEAD = f"{'job':<46} {'wall_s':>7} {'cpu_s':>7} {'peak_MB':>8}  {'ratio (wall / cpu)':<40} target"

    def __init__(self) -> None:
        self.rows: list[str] = []
        print(self.HEAD, file=sys.stderr, flush=True)

    def add(self, job: str, res: dict | None, ratio: str = "", note: str = "") -> None:
        if res is None:  # a peer that is not installed, or a part that cannot run here
            line = f"{job:<46} {'-':>7} {'-':>7} {'-':>8}  {ratio:<40} {note}"
        else:
            line = f"{job:<46} {res['s']:>7.2f} {res['cpu_s']:>7.2f} {res['peak_MB']:>8.0f}  {ratio:<40} {note}"
        self.rows.append(line.rstrip())
        print(line.rstrip(), file=sys.stderr, flush=True)

    def print(self, head: str) -> None:
        print(head)
        print(self.HEAD)
        for line in self.rows:
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="example:\n  python3 benchmarks/bench_readers.py --rows 100000 --ranks 64 "
                                            "--repeat 1")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows / events per rank (default 1000000)")
    parser.add_argument("--ranks", type=int, default=8, help="ranks of the multi-rank jobs, e.g. 8, 64 or 384 "
                        "(default 8; 0 or 1 skips them)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per job; the median is kept (default 3)")
    parser.add_argument("--no-hta", action="store_true", help="skip HTA even when it is installed")
    parser.add_argument("--no-kineto", action="store_true", help="skip the Kineto part")
    parser.add_argument("--no-msprof", action="store_true", help="skip msprof-analyze even when it is installed")
    parser.add_argument("--no-db", action="store_true", help="skip msprof-analyze's db jobs (on ../shared's db rank)")
    parser.add_argument("--no-text", action="store_true", help="skip msprof-analyze's text jobs (at 64 text ranks "
                        "they take msprof-analyze about 15 minutes)")
    parser.add_argument("--msprof-rows", type=int, help="rows per rank of the msprof-analyze db comparison "
                        "(default: --rows)")
    parser.add_argument("--only-msprof", action="store_true", help="the msprof-analyze comparison and the jobs "
                        "of ours it needs only")
    parser.add_argument("--keep", metavar="DIR", help="write the tiled inputs here instead of a temp folder")
    args = parser.parse_args()
    if args.rows < 1 or args.ranks < 0 or args.repeat < 1:
        parser.error("--rows and --repeat must be >= 1, --ranks >= 0")
    kineto_src = next((p for p in KINETO_SRC if p.is_file()), None)
    compile_scripts()
    table = Table()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        ascend_part(work, args, table)
        text_msprof_rows(work, args, table)
        if args.only_msprof:
            pass
        elif kineto_src is not None and not args.no_kineto:
            kineto_part(work, kineto_src, args, table)
        else:
            table.add("kineto: collectives.py, HTA", None, "skipped", "--no-kineto" if args.no_kineto else
                      "no Kineto trace ships with the project (../shared/fixtures/kineto absent)")
        db_msprof_rows(work, args, table)
    print()
    table.print(f"median of {args.repeat} whole processes, {args.rows} rows per rank, {args.ranks} ranks, "
                f"{_cores()} usable cores (python3 benchmarks/bench_readers.py {' '.join(sys.argv[1:])})")
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}; ratios are measured in "
          "this run. On a shared machine wall times vary with the load; CPU times (user + system, workers "
          "included) vary less")


def ascend_part(work: Path, args: argparse.Namespace, table: Table) -> None:
    """Floor, one rank and N ranks of the shipped profile tiled (kernel_details.csv alone, as the floor)."""
    if args.only_msprof:
        return
    scripts = ROOT / "scripts"
    tiled = tile_shipped(work / "tiles", args.rows)
    kd = tiled[0] / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    floor = best_of(args.repeat, "code", snippet(work, "floor_arrow", FLOOR_ARROW),
                    [str(kd), "|".join(ASCEND_COLUMNS)], work)
    table.add("ascend: pyarrow columns read (floor)", floor, "", "times as strings")
    one: dict[str, dict] = {}
    for n in sorted({1, args.ranks} - {0}):
        folder = work / f"ascend{n}"
        if not folder.is_dir():
            make_ranks(tiled, folder, n, kernels_only=True)
        for name in ("step_breakdown.py", "collectives.py", "bubbles.py"):
            res = best_of(args.repeat, "script", str(scripts / name), [str(folder), "--json"], work)
            if n == 1:
                one[name] = res
                target = {"step_breakdown.py": "<= 1.5x floor (CPU)", "collectives.py": "<= 2x floor (CPU)"}
                table.add(f"ascend 1 rank: {name}", res, _ratio(res, floor, "floor"), target.get(name, ""))
            else:
                target = f"<= 4.5x one rank (CPU) on {_cores()} cores" if n == 8 else "peak < 1000 MB"
                table.add(f"ascend {n} ranks: {name}", res, _ratio(res, one[name], "one rank"), target)


def kineto_part(work: Path, kineto_src: Path, args: argparse.Namespace, table: Table) -> None:
    """collectives.py on one tiled Kineto trace beside the JSON floors and HTA."""
    kdir = work / "kineto"
    trace = kdir / "rank0.json"
    if not trace.is_file():
        kdir.mkdir(parents=True, exist_ok=True)
        tile_kineto(kineto_src, kdir, args.rows)
    fj = best_of(args.repeat, "code", snippet(work, "floor_json", FLOOR_JSON), [str(trace)], work)
    table.add("kineto: json full parse (floor)", fj, "", "floats as floats")
    kc = best_of(args.repeat, "script", str(ROOT / "scripts" / "collectives.py"), [str(trace), "--json"], work)
    table.add("kineto: collectives.py", kc, _ratio(kc, fj, "json"), "< 400 MB")
    if args.no_hta:
        table.add("kineto: HTA load + overlap", None, "skipped", "--no-hta")
    elif importlib.util.find_spec("hta") is None:
        table.add("kineto: HTA load + overlap", None, "not installed", "pip install .[hta]")
    else:
        ht = best_of(args.repeat, "code", snippet(work, "hta", HTA), [str(kdir)], work)
        table.add("kineto: HTA load + overlap", ht, _ratio(ht, kc, "ours"), "ours faster: ratio > 1")


#: msprof-analyze text jobs on the tiled shipped folders, and our job read against each (same files)
TEXT_JOBS = [(["-m", "all", "--export_type", "text"], "step_breakdown.py"),
             (["-m", "communication_time", "--export_type", "text"], "collectives.py")]


def text_msprof_rows(work: Path, args: argparse.Namespace, table: Table) -> None:
    """msprof-analyze text `cluster` jobs and ours on the same folders (kernel_details.csv, step_trace_time.csv
    and communication.json of every rank), at 1 and N ranks; ratio = theirs / ours."""
    why = msprof_missing(args.no_msprof) or ("skipped (--no-text)" if args.no_text else None)
    if why:
        table.add("text: msprof-analyze cluster", None, why, "")
        return
    code = snippet(work, "msprof", MSPROF)
    tiled = tile_shipped(work / "tiles", args.rows)
    for n in sorted({1, args.ranks} - {0}):
        folder = work / f"text{n}"
        if not folder.is_dir():
            make_ranks(tiled, folder, n)
        for margs, script in TEXT_JOBS:
            ours = best_of(args.repeat, "script", str(ROOT / "scripts" / script), [str(folder), "--json"], work)
            table.add(f"text {n}r: {script}", ours, "", f"{args.rows} rows/rank + step and comm files")
            theirs = _msprof_best(work, code, folder, margs, args.repeat)
            table.add(f"text {n}r: msprof {margs[1]}", theirs, _ratio(theirs, ours, script[:-3]),
                      "ours faster: ratio > 1")


def msprof_missing(disabled: bool) -> str | None:
    """Why msprof-analyze cannot run here, or None."""
    if disabled:
        return "skipped (--no-msprof)"
    if importlib.util.find_spec("msprof_analyze") is None:
        return "not installed (pip install .[msprof])"
    return None


def _msprof_best(work: Path, code: str, folder: Path, margs: list[str], repeat: int) -> dict:
    target = work / "msprof_out"
    runs = []
    for _ in range(repeat):
        shutil.rmtree(target, ignore_errors=True)  # each run writes its cluster_analysis_output anew
        runs.append(best_of(1, "code", code, ["cluster", "-d", str(folder), *margs, "-o", str(target), "--force"],
                            work))
    return {"s": median(r["s"] for r in runs), "peak_MB": max(r["peak_MB"] for r in runs),
            "cpu_s": median(r["cpu_s"] for r in runs)}


#: the real db rank the db comparison tiles (no db export ships with the project)
MSPROF_DB_SRC = SHARED / "ascend" / "msinsight-db-level1" / "rank0_ascend_pt"


def db_msprof_rows(work: Path, args: argparse.Namespace, table: Table) -> None:
    """msprof-analyze's db jobs and ours on the real db rank tiled, where ../shared has it."""
    why = msprof_missing(args.no_msprof) or ("skipped (--no-db)" if args.no_db else None) or (
        None if MSPROF_DB_SRC.is_dir() else "skipped: no db export ships with the project (../shared absent)")
    if why:
        table.add("db: msprof-analyze cluster", None, why, "")
        return
    msprof_rows(work, args.msprof_rows or args.rows, args.ranks, args.repeat, table.add)


def make_msprof_inputs(work: Path, rows: int, ranks: int) -> dict[int, Path]:
    """Db cluster folders of 1 and ``ranks`` ranks (ranks beyond 0 share rank 0's files by hard link)."""
    from synth_ascend import tile_db_rank

    db1 = work / "msprof_db1"
    if not db1.is_dir():
        tile_db_rank(MSPROF_DB_SRC, db1 / "rank0_ascend_pt", rows, 0)
    out = {1: db1}
    if ranks > 1:
        many = work / f"msprof_db{ranks}"
        if not many.is_dir():
            _link_ranks(db1 / "rank0_ascend_pt", many, ranks)
        out[ranks] = many
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


#: (msprof-analyze arguments, the job(s) of ours it is set against: (script, extra arguments)), db form.
#: Each pair reads the same evidence: msprof-analyze's db `-m all` reads analysis.db StepTraceTime and
#: CommAnalyzerTime/Bandwidth/Matrix (cluster step trace, communication time sum, matrix sum), so ours is
#: step_breakdown.py + collectives.py with --profiler-tables (step rows, per-communicator times, links; the
#: two processes' times summed); `communication_time_sum` reads CommAnalyzerTime/Bandwidth -> collectives.py
#: --profiler-tables; `cluster_time_summary` reads TASK x COMPUTE_TASK_INFO x CANN_API, COMMUNICATION_OP and
#: memcpy tasks per step -> step_breakdown.py from the task rows (computing, communication, overlap, free
#: per step, checked against StepTraceTime).
MSPROF_JOBS = [
    (["-m", "all"], [("step_breakdown.py", ("--profiler-tables",)), ("collectives.py", ("--profiler-tables",))]),
    (["-m", "cluster_time_summary"], [("step_breakdown.py", ())]),
    (["-m", "communication_time_sum"], [("collectives.py", ("--profiler-tables",))]),
]


def msprof_rows(work: Path, rows: int, ranks: int, repeat: int, add: Callable[..., None] | None = None
                ) -> list[tuple[str, dict, str, str]]:
    """msprof-analyze's db jobs and ours on the same folders, at 1 and ``ranks`` ranks; ratio = theirs / ours.
    Each row is also handed to ``add`` (Table.add) as its job ends."""
    inputs = make_msprof_inputs(work, rows, ranks)
    code = snippet(work, "msprof", MSPROF)
    out: list[tuple[str, dict, str, str]] = []
    ours: dict[tuple[int, str, tuple], dict] = {}

    def run_ours(n: int, script: str, extra: tuple) -> dict:
        """One job of ours, run once per (ranks, script, arguments) and listed."""
        if (n, script, extra) not in ours:
            ours[n, script, extra] = best_of(repeat, "script", str(ROOT / "scripts" / script),
                                             [str(inputs[n]), "--json", *extra], work)
            out.append((f"db {n}r: {' '.join([script, *extra])}", ours[n, script, extra], "", f"{rows} rows/rank"))
            if add is not None:
                add(*out[-1])
        return ours[n, script, extra]

    for n in sorted(inputs):
        run_ours(n, "collectives.py", ())
        for margs, jobs in MSPROF_JOBS:
            mine = [run_ours(n, script, extra) for script, extra in jobs]
            both = {"s": sum(m["s"] for m in mine), "cpu_s": sum(m["cpu_s"] for m in mine),
                    "peak_MB": max(m["peak_MB"] for m in mine)}
            theirs = _msprof_best(work, code, inputs[n], margs, repeat)
            label = " + ".join(script[:-3] + ("*" if extra else "") for script, extra in jobs)
            out.append((f"db {n}r: msprof {margs[1]}", theirs, _ratio(theirs, both, label), "ours faster: ratio > 1"))
            if add is not None:
                add(*out[-1])
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
