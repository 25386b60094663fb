"""Damaged-input corpus: every kind of damage, built from the shipped data, for every script.

``build(root)`` writes the inputs under ``root`` and returns the cases. A case names a script, its
arguments and what must happen: ``expect="2"`` (the input is nonsense: exit 2, one stderr line) or
``expect="any"`` (a defensible answer exists: exit 2 with one line, or exit 0/1 with a result; a
``warn`` case must then say on stderr what it noticed). Output flags point into a per-case folder
so the test can check that a failed run left no file behind.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
ASCEND = DATA / "ascend_cann83"
RANK0 = ASCEND / "node0_23101_20251127201437501_ascend_pt"
RANK2 = ASCEND / "node0_23103_20251127201437507_ascend_pt"
OUT_DIR = "ASCEND_PROFILER_OUTPUT"
TOPO = DATA / "topo" / "nvidia_h100_nv18.txt"
PUBLISHED = ROOT / "benchmarks" / "published" / "xdit_flux.csv"
HARDWARE = ROOT / "templates" / "hardware" / "a100-sxm-nvlink.toml"
PLAN = ["--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 800I A2", "--devices", "8"]
OUT = "{out}"  # replaced by the case's own output folder


@dataclass
class Case:
    """One run of one script on one damaged input."""

    id: str
    script: str
    args: list[str]
    expect: str = "2"          # "2" or "any"
    warn: str | None = None    # with expect="any": a word the stderr warning must contain
    outputs: list[str] = field(default_factory=list)  # output file names inside {out}
    reason: str | None = None  # with exit 2: a phrase the one-line message must contain


# --- byte-level damage -------------------------------------------------------------------------

def _truncate(text: str) -> str:
    """Cut a file in the middle of its last row (a writer that died)."""
    lines = text.splitlines(keepends=True)
    return "".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2]


def _csv_cell(text: str, column: str, value: str, row: int = 0) -> str:
    """Replace one cell of a simple CSV (no quoted commas before the column)."""
    lines = text.splitlines(keepends=True)
    col = lines[0].rstrip("\r\n").split(",").index(column)
    cells = lines[1 + row].rstrip("\r\n").split(",")
    cells[col] = value
    lines[1 + row] = ",".join(cells) + "\n"
    return "".join(lines)


def _csv_header(text: str, old: str, new: str | None) -> str:
    """Rename (or with new=None drop) one column."""
    lines = [ln.rstrip("\r\n").split(",") for ln in text.splitlines()]
    col = lines[0].index(old)
    if new is None:
        lines = [ln[:col] + ln[col + 1:] for ln in lines]
    else:
        lines[0][col] = new
    return "\n".join(",".join(ln) for ln in lines) + "\n"


def _dup_header(text: str, column: str) -> str:
    """Give a second column the name of the first one."""
    lines = text.splitlines(keepends=True)
    head = lines[0].rstrip("\r\n").split(",")
    other = next(i for i, h in enumerate(head) if h != column and i > head.index(column))
    head[other] = column
    lines[0] = ",".join(head) + "\n"
    return "".join(lines)


def _dup_rows(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines + lines[1:])


NON_UTF8 = b"\xff\xfe\x80 not text \x81\n"


# --- Ascend profiles ---------------------------------------------------------------------------

PROFILE_DAMAGE: dict[str, tuple[str, object]] = {
    # name: (file inside ASCEND_PROFILER_OUTPUT, damage); a damage is a str -> str function,
    # bytes (the new content), "dir" (the file becomes a folder) or "missing"
    "kd-empty": ("kernel_details.csv", lambda t: ""),
    "kd-header-only": ("kernel_details.csv", lambda t: t.splitlines(keepends=True)[0]),
    "kd-truncated": ("kernel_details.csv", _truncate),
    "kd-missing-column": ("kernel_details.csv", lambda t: _csv_header(t, "Duration(us)", None)),
    "kd-renamed-column": ("kernel_details.csv", lambda t: _csv_header(t, "Start Time(us)", "Start(us)")),
    "kd-dup-header": ("kernel_details.csv", lambda t: _dup_header(t, "Name")),
    "kd-text-in-number": ("kernel_details.csv", lambda t: _csv_cell(t, "Duration(us)", "fast")),
    "kd-nan": ("kernel_details.csv", lambda t: _csv_cell(t, "Duration(us)", "nan")),
    "kd-inf": ("kernel_details.csv", lambda t: _csv_cell(t, "Duration(us)", "inf")),
    "kd-negative": ("kernel_details.csv", lambda t: _csv_cell(t, "Duration(us)", "-5.0")),
    "kd-non-utf8": ("kernel_details.csv", lambda t: t.encode() + NON_UTF8),
    "kd-dir": ("kernel_details.csv", "dir"),
    "st-empty": ("step_trace_time.csv", lambda t: ""),
    "st-truncated": ("step_trace_time.csv", _truncate),
    "st-missing-column": ("step_trace_time.csv", lambda t: _csv_header(t, "Stage", None)),
    "st-text-in-number": ("step_trace_time.csv", lambda t: _csv_cell(t, "Computing", "lots")),
    "st-nan": ("step_trace_time.csv", lambda t: _csv_cell(t, "Stage", "nan")),
    "st-negative": ("step_trace_time.csv", lambda t: _csv_cell(t, "Computing", "-160.376")),
    "st-non-utf8": ("step_trace_time.csv", lambda t: t.encode() + NON_UTF8),
    "st-dir": ("step_trace_time.csv", "dir"),
    "comm-empty": ("communication.json", lambda t: ""),
    "comm-truncated": ("communication.json", lambda t: t[: len(t) // 2]),
    "comm-nan": ("communication.json", lambda t: t.replace('"Elapse Time(ms)": 0.05', '"Elapse Time(ms)": NaN', 1)),
    "comm-negative": ("communication.json",
                      lambda t: t.replace('"Elapse Time(ms)": 0.05', '"Elapse Time(ms)": -0.05', 1)),
    "comm-non-utf8": ("communication.json", lambda t: t.encode()[:40] + NON_UTF8),
    "comm-dir": ("communication.json", "dir"),
    "tv-empty": ("trace_view.json", lambda t: ""),
    "tv-truncated": ("trace_view.json", lambda t: t[: len(t) // 2]),
    "tv-non-utf8": ("trace_view.json", lambda t: t.encode()[:40] + NON_UTF8),
    "tv-dir": ("trace_view.json", "dir"),
}


def _damaged_profile(base: Path, name: str, file: str, damage: object) -> Path:
    target = base / name / RANK0.name
    shutil.copytree(RANK0, target)
    path = target / OUT_DIR / file
    if damage == "dir":
        path.unlink()
        path.mkdir()
        (path / "inside.txt").write_text("a folder where a file belongs\n")
    elif callable(damage):
        new = damage(path.read_text(encoding="utf-8"))
        if isinstance(new, bytes):
            path.write_bytes(new)
        else:
            path.write_text(new, encoding="utf-8")
    return target


def _profile_cases(name: str, paths: list[str], expect: str = "2", warn: str | None = None) -> list[Case]:
    """The five profile readers on one (pair of) profile(s)."""
    two = paths if len(paths) > 1 else [paths[0], str(RANK2)]
    return [
        Case(f"collectives:{name}", "collectives.py", [*paths, "--json", "--csv", f"{OUT}/c.csv"], expect, warn,
             ["c.csv"]),
        Case(f"bubbles:{name}", "bubbles.py", [*paths, "--json", "--csv", f"{OUT}/b.csv"], expect, warn, ["b.csv"]),
        Case(f"step_breakdown:{name}", "step_breakdown.py", [*paths, "--json", "--csv", f"{OUT}/s.csv"], expect,
             warn, ["s.csv"]),
        Case(f"stage_delta:{name}", "stage_delta.py", [*two[:2], "--json", "--csv", f"{OUT}/d.csv"], expect, warn,
             ["d.csv"]),
        Case(f"mask_bound-profile:{name}", "mask_bound.py",
             ["profile", *paths, "--family", "allreduce", "--consumer", "MatMul", "--chunks", "2", "--json", "--csv", f"{OUT}/m.csv"],
             expect, warn, ["m.csv"]),
    ]


def profile_cases(base: Path) -> list[Case]:
    cases: list[Case] = []
    for name, (file, damage) in PROFILE_DAMAGE.items():
        # trace_view.json and communication.json carry the collectives; kernel_details the compute:
        # damage in any of them is an input error, never a silent partial answer
        cases += _profile_cases(name, [str(_damaged_profile(base, name, file, damage))])
    # one job folder whose second rank lacks its ASCEND_PROFILER_OUTPUT: a missing rank
    job = base / "missing-rank"
    shutil.copytree(RANK0, job / RANK0.name)
    shutil.copytree(RANK2, job / RANK2.name)
    shutil.rmtree(job / RANK2.name / OUT_DIR)
    cases += _profile_cases("missing-rank", [str(job)], expect="any", warn="rank")
    # one job folder with two rank folders that claim the same rank
    job = base / "duplicate-rank"
    shutil.copytree(RANK0, job / RANK0.name)
    shutil.copytree(RANK0, job / (RANK0.name + "_copy"))
    cases += _profile_cases("duplicate-rank", [str(job)])
    for c in cases[-5:]:
        c.reason = "is also the rank of"
    # kernels whose step ids match no step_trace_time.csv row
    steps_off = _damaged_profile(base, "kd-steps-unmatched", "kernel_details.csv",
                                 lambda t: "\n".join([t.splitlines()[0]] + ["9" + ln for ln in t.splitlines()[1:]]) + "\n")
    cases += _profile_cases("kd-steps-unmatched", [str(steps_off)], expect="any")
    # a profile path that does not exist, and a file where a profile folder belongs
    cases += _profile_cases("no-such-path", [str(base / "nowhere_ascend_pt")])
    # duplicated kernel rows double-count: the tools must say so
    dup_rows = _damaged_profile(base, "kd-dup-rows", "kernel_details.csv", _dup_rows)
    cases += _profile_cases("kd-dup-rows", [str(dup_rows)], expect="any", warn="duplicate")
    # a Kineto trace: gzip damage
    kineto = base / "kineto"
    kineto.mkdir()
    (kineto / "bad.pt.trace.json.gz").write_bytes(b"not gzip at all\n")
    good = gzip.compress((RANK0 / OUT_DIR / "trace_view.json").read_bytes())
    (kineto / "cut.pt.trace.json.gz").write_bytes(good[: len(good) // 2])
    for label, file in (("gz-bad", "bad.pt.trace.json.gz"), ("gz-truncated", "cut.pt.trace.json.gz")):
        path = str(kineto / file)
        cases += [Case(f"collectives:{label}", "collectives.py", [path, "--json"]),
                  Case(f"bubbles:{label}", "bubbles.py", [path, "--json"])]
    return cases


# --- step_trace_time.csv given directly to stage_delta ----------------------------------------

def stage_delta_cases(base: Path) -> list[Case]:
    src = (RANK0 / OUT_DIR / "step_trace_time.csv").read_text(encoding="utf-8")
    folder = base / "step_trace"
    folder.mkdir()
    variants = {
        "empty": "",
        "header-only": src.splitlines(keepends=True)[0],
        "truncated": _truncate(src),
        "nan": _csv_cell(src, "Stage", "nan"),
        "inf": _csv_cell(src, "Free", "inf"),
        "negative": _csv_cell(src, "Stage", "-210.001"),
        "text": _csv_cell(src, "Bubble", "none"),
        "missing-column": _csv_header(src, "Computing", None),
        "duplicate-step": _dup_rows(src),
    }
    cases = []
    good = folder / "good.csv"
    good.write_text(src, encoding="utf-8")
    for name, text in variants.items():
        path = folder / f"{name}.csv"
        path.write_text(text, encoding="utf-8")
        cases.append(Case(f"stage_delta-csv:{name}", "stage_delta.py",
                          [str(good), str(path), "--json", "--csv", f"{OUT}/d.csv"], outputs=["d.csv"]))
    (folder / "bad.csv").write_bytes(src.encode() + NON_UTF8)
    cases.append(Case("stage_delta-csv:non-utf8", "stage_delta.py", [str(good), str(folder / "bad.csv")]))
    cases += [
        Case("stage_delta:linearity-exposed-above-stage", "stage_delta.py",
             ["--linearity", "--cards", "4", "8", "--stage-us", "100", "60", "--exposed-us", "150", "10"]),
        Case("stage_delta:linearity-negative", "stage_delta.py",
             ["--linearity", "--cards", "4", "8", "--stage-us", "-100", "60"]),
        Case("stage_delta:linearity-zero-cards", "stage_delta.py",
             ["--linearity", "--cards", "0", "8", "--stage-us", "100", "60"]),
        Case("stage_delta:tolerance-nan", "stage_delta.py", [str(good), str(good), "--tolerance-us", "nan"]),
    ]
    return cases


# --- topology matrices -------------------------------------------------------------------------

def topo_cases(base: Path) -> list[Case]:
    src = TOPO.read_text(encoding="utf-8")
    folder = base / "topo"
    folder.mkdir()
    variants: dict[str, str | bytes] = {
        "empty": "",
        "truncated": src[: len(src) // 3],
        "non-utf8": src.encode()[:100] + NON_UTF8,
        "absurd-ids": src.replace("GPU7", "GPU99999999999"),
        "text-only": "this is not a topology matrix\n",
    }
    cases = []
    for name, text in variants.items():
        path = folder / f"{name}.txt"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        cases.append(Case(f"topo:{name}", "topo.py", [str(path), "--json", "--csv", f"{OUT}/t.csv"],
                          outputs=["t.csv"]))
    cases.append(Case("topo:dir", "topo.py", [str(folder / "nothing_here")]))
    cases.append(Case("topo:csv-is-dir", "topo.py", [str(TOPO), "--csv", str(folder)]))
    return cases


# --- plan.py: flags, hardware TOML, score and evaluate tables ---------------------------------

def plan_cases(base: Path) -> list[Case]:
    folder = base / "plan"
    folder.mkdir()
    cases = [Case(f"plan:{'_'.join(flags)}", "plan.py", [*PLAN, *flags, "--json"]) for flags in (
        ["--steps", "0"], ["--frames", "0"], ["--resolution", "0x0"], ["--patches", "-1"], ["--warmup", "-1"],
        ["--warmup", "1000"], ["--launch-us", "nan"], ["--launch-us", "inf"], ["--ref-latency", "inf"],
        ["--ref-latency", "nan"], ["--top", "0"], ["--masking-chunks", "0"], ["--overlap-efficiency", "nan"],
    )]
    cases.append(Case("plan:devices-huge", "plan.py",
                      ["--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 800I A2", "--devices", "1000000000"],
                      reason="1..1024"))
    cases.append(Case("plan:csv-is-dir", "plan.py", [*PLAN, "--csv", str(folder)]))
    cases.append(Case("plan:plot-fails-after-csv", "plan.py",
                      [*PLAN, "--csv", f"{OUT}/p.csv", "--plot", f"{OUT}/no/such/folder/p.png"], outputs=["p.csv"]))
    hw = HARDWARE.read_text(encoding="utf-8")
    def key(text: str, name: str, value: str) -> str:
        new, n = re.subn(rf"(?m)^({name}\s*=\s*)\S+", rf"\g<1>{value}", text, count=1)
        assert n == 1, name
        return new

    tomls = {
        "inf-flops": key(hw, "peak_tflops_bf16", "inf"),
        "nan-hbm": key(hw, "hbm_bandwidth_GBps", "nan"),
        "inf-link": key(hw, "bandwidth_GBps", "inf"),
        "negative-flops": key(hw, "peak_tflops_bf16", "-312.0"),
        "truncated": hw[: len(hw) // 2].rsplit("=", 1)[0] + "=",
    }
    for name, text in tomls.items():
        path = folder / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        cases.append(Case(f"plan-toml:{name}", "plan.py",
                          ["--model", "FLUX.1-dev", "--hardware", str(path), "--devices", "4", "--json"]))
    bad = folder / "non-utf8.toml"
    bad.write_bytes(hw.encode()[:200] + NON_UTF8)
    cases.append(Case("plan-toml:non-utf8", "plan.py", ["--model", "FLUX.1-dev", "--hardware", str(bad),
                                                         "--devices", "4"]))
    cases.append(Case("plan-toml:dir", "plan.py", ["--model", "FLUX.1-dev", "--hardware", str(folder / "x.toml"),
                                                   "--devices", "4"]))
    (folder / "x.toml").mkdir()
    # score / evaluate tables
    table = PUBLISHED.read_text(encoding="utf-8")
    tables = {
        "nan-devices": _csv_cell(table, "n_devices", "nan"),
        "inf-devices": _csv_cell(table, "n_devices", "inf"),
        "nan-steps": _csv_cell(table, "steps", "nan"),
        "zero-steps": _csv_cell(table, "steps", "0"),
        "inf-ulysses": _csv_cell(table, "ulysses", "inf"),
        "text-latency": _csv_cell(table, "latency_s", "fast"),
        "negative-latency": _csv_cell(table, "latency_s", "-6.71"),
        "missing-column": _csv_header(table.split("\n", 1)[0] + "\n", "n_devices", None),
        "empty": "",
        "truncated-row": table.splitlines(keepends=True)[0] + table.splitlines(keepends=True)[1][:60] + "\n",
    }
    for name, text in tables.items():
        path = folder / f"score-{name}.csv"
        path.write_text(text, encoding="utf-8")
        # a latency that is not a positive number is not an input of score, and evaluate leaves
        # the row out with a warning naming it
        latency = "latency" in name
        cases.append(Case(f"plan-score:{name}", "plan.py",
                          ["score", "--candidates", str(path), "--out", f"{OUT}/o.csv", "--json"],
                          expect="any" if latency else "2", outputs=["o.csv"]))
        tdir = folder / f"tables-{name}"
        tdir.mkdir()
        shutil.copy(path, tdir / "t.csv")
        cases.append(Case(f"plan-evaluate:{name}", "plan.py", ["evaluate", "--tables", str(tdir), "--json"],
                          expect="any" if latency else "2", warn="latency" if latency else None))
    nonutf = folder / "score-non-utf8.csv"
    nonutf.write_bytes(table.encode()[:300] + NON_UTF8)
    cases.append(Case("plan-score:non-utf8", "plan.py", ["score", "--candidates", str(nonutf), "--out",
                                                         f"{OUT}/o.csv"], outputs=["o.csv"]))
    cases.append(Case("plan-score:out-is-dir", "plan.py", ["score", "--candidates", str(PUBLISHED), "--out",
                                                           str(folder)]))
    cases.append(Case("plan-evaluate:not-a-dir", "plan.py", ["evaluate", "--tables", str(PUBLISHED)]))
    return cases


# --- fewstep analyze -------------------------------------------------------------------------

def _matrix(dit: dict[tuple[str, int], list[float]]) -> str:
    """A two-config fewstep matrix (rank 0 only) in the runner's column order."""
    from ditpar.fewstep.matrix import matrix_csv

    steps = {"few": 4, "anchor": 10}
    rows = []
    for config in ("a", "b"):
        for tier in ("few", "anchor"):
            for k, value in enumerate(dit[(config, tier)], 1):
                rows.append({"config": config, "tier": tier, "steps": steps[tier], "repeat": k, "rank": 0,
                             "dit_s": value, "devices": 1, "comm_exposed_share": None, "tags": ""})
    return matrix_csv(rows)


def fewstep_cases(base: Path) -> list[Case]:
    folder = base / "fewstep"
    folder.mkdir()
    good = {("a", "few"): [1.0, 1.01, 0.99], ("a", "anchor"): [2.5, 2.51, 2.49],
            ("b", "few"): [1.2, 1.21, 1.19], ("b", "anchor"): [3.0, 3.01, 2.99]}
    src = _matrix(good)
    (folder / "good.csv").write_text(src, encoding="utf-8")
    variants = {
        "empty": "",
        "truncated": _truncate(src),
        "nan-time": _csv_cell(src, "dit_s", "nan"),
        "inf-time": _csv_cell(src, "dit_s", "inf"),
        "huge-time": _csv_cell(src, "dit_s", "1e308"),
        "negative-time": _csv_cell(src, "dit_s", "-1.0"),
        "text-time": _csv_cell(src, "dit_s", "slow"),
        "missing-column": _csv_header(src, "dit_s", None),
        "duplicate-rows": _dup_rows(src),
    }
    cases = []
    for name, text in variants.items():
        path = folder / f"{name}.csv"
        path.write_text(text, encoding="utf-8")
        cases.append(Case(f"fewstep:{name}", "fewstep.py", ["analyze", str(path), "--json", "--csv", f"{OUT}/f.csv"],
                          outputs=["f.csv"]))
    (folder / "bad.csv").write_bytes(src.encode() + NON_UTF8)
    cases.append(Case("fewstep:non-utf8", "fewstep.py", ["analyze", str(folder / "bad.csv")]))
    cases.append(Case("fewstep:dir", "fewstep.py", ["analyze", str(folder)]))
    for flag in ("--drift-pct", "--dispersion-pct", "--tie-pct", "--share-drift-pp"):
        for value in ("nan", "-1"):
            cases.append(Case(f"fewstep:{flag}={value}", "fewstep.py",
                              ["analyze", str(folder / "good.csv"), f"{flag}={value}", "--json"]))
    cases.append(Case("fewstep:min-repeats-0", "fewstep.py", ["analyze", str(folder / "good.csv"),
                                                              "--min-repeats", "0"]))
    return cases


# --- a2a_audit logs, scope_probe records ------------------------------------------------------

def _a2a_line(comm: str, rank: int, n: int, call: int, chunk: int, fps: list[int]) -> str:
    fp = ",".join(str(x) for x in fps)
    return f"A2AUD v=1 comm={comm} rank={rank} n={n} call={call} chunk={chunk} spre={fp} spost={fp} got={fp}\n"


def a2a_audit_cases(base: Path) -> list[Case]:
    folder = base / "a2a"
    folder.mkdir()
    # fingerprints: rank r sends fp(r, d) to d; rank d receives fp(s, d) from s
    def fp(s, d):
        return 1000 * s + d + 1

    def log(rank):
        return _a2a_line("world", rank, 2, 0, 0, [fp(rank, d) for d in range(2)]).replace(
            " got=" + ",".join(str(fp(rank, d)) for d in range(2)),
            " got=" + ",".join(str(fp(s, rank)) for s in range(2)))

    good = folder / "good"
    good.mkdir()
    (good / "rank0.log").write_text(log(0))
    (good / "rank1.log").write_text(log(1))
    same = folder / "same-rank"
    same.mkdir()
    (same / "rank0.log").write_text(log(0))
    (same / "rank1.log").write_text(log(0))
    (folder / "empty.log").write_text("")
    (folder / "bad.log").write_bytes(log(0).encode() + NON_UTF8)
    return [
        Case("a2a_audit:good-control", "a2a_audit.py", [str(good), "--json"], expect="any"),
        Case("a2a_audit:two-logs-same-rank", "a2a_audit.py", [str(same / "rank0.log"), str(same / "rank1.log"),
                                                              "--json", "--csv", f"{OUT}/a.csv"], outputs=["a.csv"],
             reason="two logs claim the same rank"),
        Case("a2a_audit:empty", "a2a_audit.py", [str(folder / "empty.log")]),
        # a log is any program's output: bytes that are not UTF-8 around the A2AUD lines are not an error
        Case("a2a_audit:non-utf8", "a2a_audit.py", [str(folder / "bad.log"), str(good / "rank1.log"), "--json"],
             expect="any"),
        Case("a2a_audit:world-0", "a2a_audit.py", [str(good), "--world", "0"]),
    ]


def _scope(rank: int, world: int, seq: int, heads: int = 40) -> dict:
    return {"schema": "dit-parallel-opt/scope/v1", "rank": rank, "world_size": world, "name": "attn",
            "stage": "input", "layout": "BSHD", "q": [1, seq, heads, 128], "k": [1, seq, heads, 128],
            "v": [1, seq, heads, 128], "calls": 1, "tag": ""}


def scope_cases(base: Path) -> list[Case]:
    folder = base / "scope"
    folder.mkdir()

    def write(name: str, recs: list[dict]) -> str:
        d = folder / name
        d.mkdir()
        by_rank: dict[int, list[dict]] = {}
        for r in recs:
            by_rank.setdefault(r["rank"], []).append(r)
        for i, (rank, rs) in enumerate(sorted(by_rank.items())):
            (d / f"scope-rank{rank}-{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rs))
        return str(d)

    full, n = 32768, 4
    args = ["--ulysses", str(n), "--full-seq", str(full), "--heads", "40", "--json"]
    good = [_scope(r, n, full // n) for r in range(n)]
    negative = [_scope(r, n, -(full // n)) for r in range(n)]
    huge = [_scope(r, n, 10**30) for r in range(n)]
    missing = good[:3]
    duplicated = good + [dict(good[0])]
    cases = [
        Case("scope_probe:good-control", "scope_probe.py", [write("good", good), *args], expect="any"),
        Case("scope_probe:negative", "scope_probe.py", [write("negative", negative), *args]),
        Case("scope_probe:huge", "scope_probe.py", [write("huge", huge), *args]),
        Case("scope_probe:missing-rank", "scope_probe.py", [write("missing", missing), *args], expect="any",
             warn="rank"),
        Case("scope_probe:duplicated", "scope_probe.py", [write("duplicated", duplicated), *args], expect="any",
             warn="duplicate"),
        Case("scope_probe:heads-0", "scope_probe.py", [write("good2", good), "--ulysses", "4", "--full-seq",
                                                       str(full), "--heads", "0"]),
    ]
    (folder / "bad.jsonl").write_bytes(json.dumps(good[0]).encode() + b"\n" + NON_UTF8)
    cases.append(Case("scope_probe:non-utf8", "scope_probe.py", [str(folder / "bad.jsonl"), *args]))
    return cases


# --- mask_bound calc/simulate/verify, a2a_pad, comm_bench: out-of-range flags -----------------

def flag_cases(base: Path) -> list[Case]:
    layer = ["--comm-us", "700", "--compute-us", "538"]
    return [
        Case("mask_bound:simulate-chunks-1e9", "mask_bound.py", ["simulate", *layer, "--chunks", "1000000000"],
             reason="100000"),
        Case("mask_bound:simulate-chunks-1e5-plot", "mask_bound.py",
             ["simulate", *layer, "--chunks", "100000", "--plot", f"{OUT}/g.png"], outputs=["g.png"], reason="4096"),
        Case("mask_bound:simulate-chunks-1000-plot", "mask_bound.py",
             ["simulate", *layer, "--chunks", "1000", "--plot", f"{OUT}/g.png"], outputs=["g.png"], reason="256"),
        Case("mask_bound:calc-max-chunks-1e9", "mask_bound.py", ["calc", *layer, "--max-chunks", "1000000000"]),
        Case("mask_bound:calc-max-chunks-float", "mask_bound.py", ["calc", *layer, "--max-chunks", "1e9"]),
        Case("mask_bound:calc-comm-nan", "mask_bound.py", ["calc", "--comm-us", "nan", "--compute-us", "538"]),
        Case("mask_bound:calc-compute-inf", "mask_bound.py", ["calc", "--comm-us", "700", "--compute-us", "inf"]),
        Case("mask_bound:calc-negative", "mask_bound.py", ["calc", "--comm-us", "-700", "--compute-us", "538"]),
        Case("mask_bound:verify-nothing", "mask_bound.py", ["verify"]),
        Case("mask_bound:verify-outputs-dir", "mask_bound.py", ["verify", "--outputs", str(base), str(base)]),
        Case("a2a_pad:splits-negative", "a2a_pad.py", ["--splits", "3,-1,2", "--row-bytes", "4"]),
        Case("a2a_pad:splits-text", "a2a_pad.py", ["--splits", "3,x,2"]),
        Case("a2a_pad:splits-huge", "a2a_pad.py", ["--splits", "1000000000000000,1"]),
        Case("a2a_pad:row-bytes-0", "a2a_pad.py", ["--splits", "3,1,2", "--row-bytes", "0"]),
        Case("a2a_pad:multiple-0", "a2a_pad.py", ["--splits", "3,1,2", "--multiple", "0"]),
        Case("comm_bench:iters-0", "comm_bench.py", ["--iters", "0"]),
        Case("comm_bench:timeout-nan", "comm_bench.py", ["--timeout", "nan"]),
        Case("bubbles:tolerance-nan", "bubbles.py", [str(RANK0), "--tolerance-us", "nan"]),
        Case("bubbles:tolerance-negative", "bubbles.py", [str(RANK0), "--tolerance-us", "-1"]),
        Case("collectives:layers-0", "collectives.py", [str(RANK0), "--layers", "0"]),
        Case("collectives:steps-negative", "collectives.py", [str(RANK0), "--layers", "2", "--steps", "-1"]),
        Case("step_breakdown:csv-is-dir", "step_breakdown.py", [str(RANK0), "--csv", str(base)]),
    ]


def plan_bench_cases(base: Path) -> list[Case]:
    """plan_bench.py --from-plan and plan.py --measured on damaged JSON, and plan_bench.py's flags."""
    folder = base / "plan_bench"
    folder.mkdir()
    tiny = str(DATA / "planbench" / "tiny-joint.toml")
    plan_doc = {"schema": "dit-parallel-opt/plan/v1", "model": "Tiny-Joint", "short_list": ["single"],
                "shape": {"width": 16, "height": 1, "frames": 1, "steps": 50, "cfg": True, "tokens": 16}}
    bench_doc = {"schema": "dit-parallel-opt/plan_bench/v1", "model": "Tiny-Joint", "world": 4,
                 "shape": {"tokens": 16, "cfg": True}, "plans": [{"name": "U4", "step_s": 0.01, "request_s": 0.5}]}
    good_plan, good_bench = json.dumps(plan_doc), json.dumps(bench_doc)
    damaged = {
        "empty": "", "truncated": good_plan[: len(good_plan) // 2], "text": "not json at all\n",
        "dup": good_plan.replace('"short_list": ["single"]', '"short_list": []'),
        "missing-column": good_plan.replace('"shape"', '"shapes"'),
    }
    cases = []
    for kind, text in damaged.items():
        (folder / f"plan-{kind}.json").write_text(text)
        cases.append(Case(f"plan_bench:from-plan-{kind}", "plan_bench.py",
                          ["--from-plan", str(folder / f"plan-{kind}.json"), "--model-file", tiny,
                           "--csv", f"{OUT}/b.csv"], outputs=["b.csv"]))
    (folder / "plan-non-utf8.json").write_bytes(NON_UTF8)
    cases.append(Case("plan_bench:from-plan-non-utf8", "plan_bench.py",
                      ["--from-plan", str(folder / "plan-non-utf8.json"), "--model-file", tiny]))
    cases.append(Case("plan_bench:from-plan-dir", "plan_bench.py", ["--from-plan", str(folder), "--model-file", tiny]))
    cases += [
        Case("plan_bench:repeats-2", "plan_bench.py", ["--model-file", tiny, "--plans", "single", "--repeats", "2"],
             reason="at least 3"),
        Case("plan_bench:timeout-nan", "plan_bench.py", ["--model-file", tiny, "--plans", "single", "--timeout", "nan"]),
        Case("plan_bench:iters-0", "plan_bench.py", ["--model-file", tiny, "--plans", "single", "--iters", "0"]),
        Case("plan_bench:plan-text", "plan_bench.py", ["--model-file", tiny, "--plans", "Ulysses8"]),
    ]
    plan4 = ["--model-file", tiny, "--hardware", "910B", "--devices", "4", "--measured"]
    bench_damaged = {
        "truncated": good_bench[: len(good_bench) // 2],
        "nan": good_bench.replace('"step_s": 0.01', '"step_s": NaN'),
        "negative": good_bench.replace('"step_s": 0.01', '"step_s": -0.01'),
        "renamed-column": good_bench.replace('"name"', '"plan"'),
    }
    for kind, text in bench_damaged.items():
        (folder / f"bench-{kind}.json").write_text(text)
        cases.append(Case(f"plan:measured-{kind}", "plan.py", [*plan4, str(folder / f"bench-{kind}.json"),
                                                                "--csv", f"{OUT}/p.csv"], outputs=["p.csv"]))
    return cases


def build(base: Path) -> list[Case]:
    """Write every damaged input under base; return the cases."""
    cases = (profile_cases(base) + stage_delta_cases(base) + topo_cases(base) + plan_cases(base)
             + fewstep_cases(base) + a2a_audit_cases(base) + scope_cases(base) + flag_cases(base)
             + plan_bench_cases(base))
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return cases
