"""Damaged-input corpus: every kind of damage, built from the shipped data, for every script.

``build(root)`` writes the inputs under ``root`` and returns the cases. A case names a script, its
arguments and what must happen: ``expect="2"`` (the input is nonsense: exit 2, one stderr line) or
``expect="any"`` (a defensible answer exists: exit 2 with one line, or exit 0/1 with a result; a
``warn`` case must then say on stderr what it noticed). Output flags point into a per-case folder
so the test can check that a failed run left no file behind.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import damaged_corpus_r3_hang
import damaged_corpus_r4_serving

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


def _all_cells(text: str, column: str, value: str) -> str:
    """Replace one column in every row of a simple CSV."""
    for row in range(len(text.splitlines()) - 1):
        text = _csv_cell(text, column, value, row)
    return text


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
    # --model-config: a diffusers config.json (tests/test_model_config.py has the rest)
    flux = (DATA / "model_configs" / "FLUX.1-dev" / "transformer" / "config.json").read_text(encoding="utf-8")
    configs = {"truncated": flux[: len(flux) // 2], "nan": flux.replace('"num_layers": 19', '"num_layers": NaN'),
               "huge": flux.replace('"num_layers": 19', '"num_layers": ' + "9" * 60), "empty": ""}
    for name, text in configs.items():
        path = folder / f"config-{name}" / "config.json"
        path.parent.mkdir()
        path.write_text(text, encoding="utf-8")
        cases.append(Case(f"plan-model-config:{name}", "plan.py",
                          ["--model-config", str(path), "--hardware", "H100", "--devices", "8", "--json"]))
    (folder / "config-dir").mkdir()
    cases.append(Case("plan-model-config:dir", "plan.py",
                      ["--model-config", str(folder / "config-dir"), "--hardware", "H100", "--devices", "8"]))
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
        # nothing scorable: score and evaluate refuse rather than answer with no rows (issue 23, session 27)
        "header-only": table.splitlines(keepends=True)[0],
        "no-row-scorable": _all_cells(table, "model", "NoSuchModel-9B"),
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


# --- hang_doctor: Flight Recorder dumps ----------------------------------------------------------

def _fr_entry(seq: int, op: str = "all_reduce", size: int = 4) -> dict:
    """One entry as torch 2.13 writes it in a gloo JSON dump."""
    return {"collective_seq_id": seq, "input_dtypes": ["Float"], "input_sizes": [[size]], "is_p2p": False,
            "op_id": seq, "output_dtypes": ["Float"], "output_sizes": [[size]], "p2p_seq_id": 0, "pg_id": 0,
            "process_group": ["0", "default_pg"], "profiling_name": f"gloo:{op}", "record_id": seq - 1,
            "retired": True, "state": "scheduled", "thread_id": "1", "thread_name": "python3",
            "time_created_ns": 1796393385407312229 + seq, "time_discovered_completed_ns": 0,
            "time_discovered_started_ns": 0, "timeout_ms": 600000}


def _fr_dump(entries: list[dict]) -> dict:
    return {"version": "2.10", "comm_lib_version": "", "nccl_comm_state": {},
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}, "pg_status": {},
            "entries": entries}


def hang_doctor_cases(base: Path) -> list[Case]:
    folder = base / "hang"
    folder.mkdir()

    def write(name: str, per_rank: dict[str, bytes | str]) -> str:
        d = folder / name
        d.mkdir()
        for fname, content in per_rank.items():
            if content == "dir":
                (d / fname).mkdir()
            elif isinstance(content, bytes):
                (d / fname).write_bytes(content)
            else:
                (d / fname).write_text(content)
        return str(d)

    good = json.dumps(_fr_dump([_fr_entry(1), _fr_entry(2)]))
    bad_seq = json.dumps(_fr_dump([_fr_entry(1), {**_fr_entry(2), "collective_seq_id": "two"}]))
    neg_seq = json.dumps(_fr_dump([{**_fr_entry(1), "collective_seq_id": -1}]))
    nan_time = json.dumps(_fr_dump([{**_fr_entry(1), "time_created_ns": float("nan")}]))
    huge = json.dumps(_fr_dump([_fr_entry(1), _fr_entry(10**30)]))
    no_name = json.dumps(_fr_dump([{k: v for k, v in _fr_entry(1).items() if k != "profiling_name"}]))
    glob = b"\x80\x02cos\nsystem\nq\x00."  # a pickle that would import os.system
    two = {"fr_rank_0.json": good, "fr_rank_1.json": good}
    args = ["--json", "--csv", f"{OUT}/h.csv"]
    return [
        Case("hang_doctor:good-control", "hang_doctor.py", [write("good", two), *args], expect="any",
             outputs=["h.csv"]),
        Case("hang_doctor:empty", "hang_doctor.py", [write("empty", {"fr_rank_0": "", "fr_rank_1.json": good})]),
        Case("hang_doctor:truncated", "hang_doctor.py",
             [write("truncated", {"fr_rank_0.json": good[: len(good) // 2], "fr_rank_1.json": good}), *args],
             outputs=["h.csv"], reason="JSON"),
        Case("hang_doctor:non-utf8", "hang_doctor.py",
             [write("nonutf8", {"fr_rank_0.json": good.encode()[:30] + NON_UTF8, "fr_rank_1.json": good})]),
        Case("hang_doctor:text-in-seq", "hang_doctor.py",
             [write("text", {"fr_rank_0.json": bad_seq, "fr_rank_1.json": good})], reason="sequence id"),
        Case("hang_doctor:negative-seq", "hang_doctor.py",
             [write("negative", {"fr_rank_0.json": neg_seq, "fr_rank_1.json": good})], reason="sequence id"),
        Case("hang_doctor:nan-time", "hang_doctor.py",
             [write("nan", {"fr_rank_0.json": nan_time, "fr_rank_1.json": good}), "--json"], expect="any"),
        Case("hang_doctor:huge-seq", "hang_doctor.py",
             [write("huge", {"fr_rank_0.json": huge, "fr_rank_1.json": good}), "--json"], expect="any"),
        Case("hang_doctor:missing-column", "hang_doctor.py",
             [write("noname", {"fr_rank_0.json": no_name, "fr_rank_1.json": good})], reason="profiling_name"),
        Case("hang_doctor:dir", "hang_doctor.py", [write("dir", {"fr_rank_0.json": good, "fr_rank_1": "dir"})],
             reason="no dump for ranks [1]"),
        Case("hang_doctor:missing-rank", "hang_doctor.py", [write("missing", {"fr_rank_0.json": good})],
             reason="no dump for ranks [1]"),
        Case("hang_doctor:duplicate-rank", "hang_doctor.py",
             [write("dup", {"fr_rank_0.json": good, "a_rank_0.json": good, "fr_rank_1.json": good})],
             reason="two dumps for rank 0"),
        Case("hang_doctor:pickle-global", "hang_doctor.py",
             [write("glob", {"fr_rank_0": glob, "fr_rank_1.json": good})], reason="refusing"),
        Case("hang_doctor:plan-text", "hang_doctor.py", [write("good2", two), "--plan", "U2 Q3"]),
    ]


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


# --- round 2, silent acceptance (issue 22): inputs that used to give an answer without a word ----------

def _trace_events(zero: bool = False) -> list[dict]:
    """A small Kineto rank: two steps, launches, two GEMMs and one NCCL all-reduce per step."""
    events = []
    for k, step in enumerate((1, 2)):
        t0 = 1000 + 100 * k
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": t0, "dur": 100})
        for j, (name, stream, dur, args) in enumerate((
                ("sm90_gemm", 7, 20, {}), ("sm90_gemm", 7, 15, {}),
                ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)", 20, 30,
                 {"Collective name": "allreduce", "In msg nelems": 4096, "Out msg nelems": 4096, "dtype": "BFloat16",
                  "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}))):
            corr = 10 * step + j
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": t0 + 1 + j, "dur": 1, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream,
                           "ts": t0 + 5 + 25 * j, "dur": 0 if zero else dur,
                           "args": {"stream": stream, "correlation": corr, **args}})
    return events


def _trace(path: Path, events: list[dict], rank: int = 0, world: int = 2) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": world}}),
                    encoding="utf-8")
    return str(path)


def _bench(path: Path, rows: list[tuple]) -> str:
    """comm_bench.py CSV rows: (op, bytes, ranks, busbw_GBps, group)."""
    head = ("op,bytes,ranks,time_us,algbw_GBps,busbw_GBps,correct,wrong,count,dtype,wire_bytes,bus_factor,group,"
            "concurrent,iters,time_min_us,time_max_us,spread_pct,backend,api")
    lines = [head] + [f'{op},{b},{n},100,1,{bw},True,0,1,float32,1,1,"{g}",1,20,90,110,5,nccl,x'
                      for op, b, n, bw, g in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def round2_silent_cases(base: Path) -> list[Case]:
    """One case (at least) per class of issue 22's "Silent acceptance", with the phrase the line must hold."""
    folder = base / "round2-silent"
    folder.mkdir()
    cases: list[Case] = []
    # Kineto: duplicated kernels (counted once, warned), all-zero durations, a kernel without dur, args as a list,
    # a step written twice, ranks of two jobs
    ev = _trace_events()
    dup = _trace(folder / "kineto-dup" / "rank0.json", ev + [e for e in ev if e["cat"] == "kernel"][:2])
    cases.append(Case("step_breakdown:kineto-dup-kernels", "step_breakdown.py", [dup, "--json"], expect="any",
                      warn="duplicate"))
    no_dur = [dict(e) for e in ev]
    del next(e for e in no_dur if e["cat"] == "kernel")["dur"]
    args_list = [dict(e) for e in ev]
    next(e for e in args_list if e["cat"] == "kernel")["args"] = [7, 11]
    twice = [dict(e) for e in ev]
    twice[0]["name"] = "ProfilerStep#2"  # two ProfilerStep#2 spans
    for name, events, reason in (("kineto-zero-dur", _trace_events(zero=True), "kernel durations are 0"),
                                 ("kineto-no-dur", no_dur, "no 'dur'"),
                                 ("kineto-args-list", args_list, "'args' is a list"),
                                 ("kineto-step-twice", twice, "ProfilerStep#2 appears 2 times")):
        path = _trace(folder / name / "rank0.json", events)
        cases += [Case(f"step_breakdown:{name}", "step_breakdown.py", [path, "--json", "--csv", f"{OUT}/s.csv"],
                       outputs=["s.csv"], reason=reason),
                  Case(f"bubbles:{name}", "bubbles.py", [path, "--json"], reason=reason)]
    jobs = folder / "kineto-two-jobs"
    _trace(jobs / "rank0.json", ev, rank=0, world=2)
    _trace(jobs / "rank1.json", ev, rank=1, world=8)
    cases.append(Case("collectives:kineto-two-jobs", "collectives.py", [str(jobs), "--json"],
                      reason="traces of different jobs"))
    # Ascend: communication_matrix.json that is a folder; all-zero kernel durations
    matrix = _damaged_profile(folder, "comm-matrix-dir", "communication.json", None)
    (matrix / OUT_DIR / "communication_matrix.json").mkdir()
    cases.append(Case("collectives:comm-matrix-dir", "collectives.py", [str(matrix), "--json"], reason="is a folder"))
    zero = _damaged_profile(folder, "kd-zero-dur", "kernel_details.csv", _zero_durations)
    cases.append(Case("step_breakdown:kd-zero-dur", "step_breakdown.py", [str(zero), "--json"],
                      reason="kernel durations are 0"))
    # plan.py --bench: figures outside the link's physical range, a rank twice, fractional ranks, a header-only file
    l20 = ["--model", "FLUX.1-dev", "--hardware", "L20", "--devices", "4"]
    good = _bench(folder / "bench-good.csv", [("all_to_all", 1 << 20, 4, 3.0, "world")])
    for name, rows, reason in (
            ("mbps", [("all_to_all", 1 << 20, 4, 900.0, "world")], "busbw_GBps 900 is outside"),
            ("1e300", [("all_to_all", 1 << 20, 4, 1e300, "world")], "is outside"),
            ("rank-twice", [("all_to_all", 1 << 20, 4, 3.0, "0,1,1,2")], "twice"),
            ("fractional-ranks", [("all_to_all", 1 << 20, "4.5", 3.0, "world")], "expected a whole number")):
        cases.append(Case(f"plan-bench:{name}", "plan.py",
                          [*l20, "--bench", _bench(folder / f"bench-{name}.csv", rows), "--json"], reason=reason))
    cases.append(Case("plan-bench:header-only-second", "plan.py",
                      [*l20, "--bench", good, _bench(folder / "bench-empty.csv", []), "--json"],
                      reason="no rows (a header only)"))
    # presets and model files: unknown keys named with the closest known one; params that cannot be
    custom = (ROOT / "templates" / "models" / "custom-example.toml").read_text(encoding="utf-8")
    wan = (ROOT / "templates" / "models" / "wan2.1-t2v-14b.toml").read_text(encoding="utf-8")
    hw = HARDWARE.read_text(encoding="utf-8")
    files = {
        "model-file-typo": ("custom.toml", custom.replace("cfg = true", 'cfg = true\ntext_atention = "joint"'),
                            "did you mean 'text_attention'?"),
        "model-file-params-negative": ("custom.toml", custom.replace("cfg = true", "cfg = true\nparams_b = -14.0"),
                                       "key 'params_b' must be a number in (0, 10000]"),
        "model-file-encoder-zero": ("custom.toml", custom.replace("cfg = true", "cfg = true\ntext_encoder_params_b = 0"),
                                    "key 'text_encoder_params_b'"),
        "model-toml-params-zero": ("model.toml", wan.replace("params_b = 14.0", "params_b = 0"), "key 'params_b'"),
        "model-toml-table-typo": ("model.toml", wan.replace("[blocks]", "[block]"), "did you mean 'blocks'?"),
        "hardware-toml-typo": ("hw.toml", hw.replace("hbm_bandwidth_GBps =", "hbm_bandwith_GBps =", 1),
                               "did you mean 'hbm_bandwidth_GBps'?"),
    }
    for name, (fname, text, reason) in files.items():
        path = folder / name / fname
        path.parent.mkdir()
        path.write_text(text, encoding="utf-8")
        if fname == "custom.toml":
            args = ["--model-file", str(path), "--hardware", "H100", "--devices", "8"]
        elif fname == "model.toml":
            args = ["--model", str(path), "--hardware", "H100", "--devices", "8"]
        else:
            args = ["--model", "FLUX.1-dev", "--hardware", str(path), "--devices", "4"]
        cases.append(Case(f"plan-schema:{name}", "plan.py", [*args, "--json"], reason=reason))
    # --topo against the preset: another fabric; two islands where the preset has no cross-island figure
    topo = DATA / "topo"
    cases += [
        Case("plan-topo:nvlink-on-pcie", "plan.py", ["--model", "FLUX.1-dev", "--hardware", "A100 PCIe", "--devices",
                                                      "8", "--topo", str(topo / "nvidia_h100_nv18.txt")],
             reason="the matrix shows a NVLink box"),
        Case("plan-topo:islands-without-cross-link", "plan.py",
             ["--model", "FLUX.1-dev", "--hardware", "Atlas 800T A2", "--devices", "8", "--topo",
              str(topo / "npu_910a_2x4_islands.txt")], reason="gives no links.inter_domain figure"),
    ]
    # flags that were ignored or taken at face value
    full = 32768
    scope = folder / "scope"
    scope.mkdir()
    for r in range(4):
        (scope / f"scope-rank{r}-0.jsonl").write_text(json.dumps(_scope(r, 4, full // 4)) + "\n")
    a2a = folder / "a2a"
    a2a.mkdir()
    (a2a / "r0.log").write_text(_a2a_line("world", 0, 2, 0, 0, [1, 2]))
    (a2a / "r1.log").write_text(_a2a_line("world", 1, 2, 0, 0, [1001, 1002]).rstrip("\n")[:-3])
    (a2a / "v2.log").write_text(_a2a_line("world", 0, 2, 0, 0, [1, 2]).replace("v=1", "v=2"))
    cases += [
        Case("plan:compare-twice", "plan.py", [*PLAN, "--compare", "U8", "U8"], reason="given twice"),
        Case("stage_delta:cards-without-linearity", "stage_delta.py", [str(RANK0), str(RANK2), "--cards", "4", "8"],
             reason="--cards is only used with --linearity"),
        Case("topo:group-empty", "topo.py", [str(TOPO), "--group", ""], reason="(none)"),
        Case("mask_bound:calc-heads-0", "mask_bound.py", ["calc", "--comm-us", "700", "--compute-us", "538",
                                                          "--chunks", "2", "--heads", "0"],
             reason="expected an integer >= 1"),
        Case("scope_probe:kv-heads-not-dividing", "scope_probe.py",
             [str(scope), "--ulysses", "4", "--full-seq", str(full), "--heads", "40", "--kv-heads", "7"],
             reason="--kv-heads 7 does not divide --heads 40"),
        Case("a2a_audit:cut-mid-line", "a2a_audit.py", [str(a2a / "r0.log"), str(a2a / "r1.log")],
             reason="incomplete record"),
        Case("a2a_audit:newer-format", "a2a_audit.py", [str(a2a / "v2.log")], reason="newer than this reader"),
        Case("comm_bench:groups-of-one", "comm_bench.py", ["--groups", "0", "--iters", "1"],
             reason="a group of one rank"),
        Case("comm_bench:ops-twice", "comm_bench.py", ["--ops", "all_reduce,all_reduce"], reason="named twice"),
        Case("collectives:family-empty", "collectives.py", [str(RANK0), "--family", ""], reason="(none)"),
        Case("bubbles:family-twice", "bubbles.py", [str(RANK0), "--family", "allreduce,allreduce"],
             reason="more than once"),
        Case("bubbles:consumer-empty", "bubbles.py", [str(RANK0), "--consumer", ""],
             reason="expected a kernel-name pattern"),
        Case("plan:set-out-of-range", "plan.py", [*l20, "--set", "links.intra_domain.bandwidth_GBps=1e300"],
             reason="must be a number in [0.01, 10000]"),
    ]
    pcie = (ROOT / "templates" / "hardware" / "a100-pcie.toml").read_text(encoding="utf-8")
    fast = folder / "pcie-900.toml"
    fast.write_text(pcie.replace("bandwidth_GBps = 24.0", "bandwidth_GBps = 900.0", 1), encoding="utf-8")
    cases.append(Case("plan-schema:pcie-link-above-line-rate", "plan.py",
                      ["--model", "FLUX.1-dev", "--hardware", str(fast), "--devices", "4"], reason="is above 63 GB/s"))
    return cases




# --- round 2 (issue 22): output paths, tracebacks and hangs, misleading messages ----------------

KERNEL = f"{OUT_DIR}/kernel_details.csv"
L20 = ["--model", "FLUX.1-dev", "--hardware", "L20", "--devices", "4"]
BENCH_HEAD = ("op,bytes,ranks,time_us,algbw_GBps,busbw_GBps,correct,wrong,count,dtype,wire_bytes,bus_factor,"
              "group,concurrent,iters,time_min_us,time_max_us,spread_pct,backend,api")
UTF16 = "utf-16"  # with its byte-order mark, as Windows PowerShell's Out-File writes


def _bench_text(group: str = "world", ranks: str = "4") -> str:
    rows = [f"{op},{b},{ranks},100,1,20,True,0,1,float32,1,1,{group},1,20,90,110,5,nccl,x"
            for op in ("all_to_all", "all_reduce") for b in (1 << 20, 16 << 20)]
    return "\n".join([BENCH_HEAD, *rows]) + "\n"


def _fewstep_logdir(folder: Path) -> Path:
    """A fewstep run folder as the runner leaves it: manifest, run records and logs (two configs x two tiers)."""
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({
        "few_steps": 4, "anchor_steps": 10, "dit_regex": r"took (?P<dit_s>[0-9.]+)s", "dit_unit": "s",
        "timing": "dit", "configs": {"A": {"devices": "1"}, "B": {"devices": "1"}}}))
    for config, base in (("A", 1.0), ("B", 1.2)):
        runs = folder / config / "runs"
        runs.mkdir(parents=True)
        for tier, steps in (("few", 4), ("anchor", 10)):
            for rep in (1, 2, 3):
                stem = f"{tier}-r{rep}"
                (runs / f"{stem}.log").write_text(f"took {base * steps / 4 + rep * 0.001:.3f}s\n")
                (runs / f"{stem}.json").write_text(json.dumps({
                    "kind": "measured", "mode": "launch", "config": config, "fields": {"devices": "1"},
                    "tier": tier, "steps": steps, "repeat": rep, "attempt": 1, "rc": 0, "timed_out": False,
                    "log": f"{stem}.log", "warmup_requests": 0}))
    return folder


def round2_io_cases(base: Path) -> list[Case]:
    """Outputs that name an input, a link, a FIFO, nothing, or each other; outputs of a failed run."""
    folder = base / "r2-io"
    folder.mkdir()
    prof = folder / RANK0.name
    shutil.copytree(RANK0, prof)
    topo = folder / "topo.txt"
    shutil.copy(TOPO, topo)
    os.link(topo, folder / "topo-hard.txt")
    os.symlink(topo, folder / "topo-link.txt")
    (folder / "kept.csv").write_text("a user's file\n")
    os.symlink(folder / "kept.csv", folder / "link.csv")
    os.symlink(folder / "nowhere.csv", folder / "dangling.csv")
    os.mkfifo(folder / "no-reader.fifo")
    logs = _fewstep_logdir(folder / "fs-missing")
    (logs / "B" / "runs" / "anchor-r2.log").unlink()
    utf16 = _fewstep_logdir(folder / "fs-utf16")
    log = utf16 / "B" / "runs" / "anchor-r2.log"
    log.write_bytes(log.read_text().encode(UTF16))
    good_logs = _fewstep_logdir(folder / "fs-good")
    t = [str(TOPO), "--json"]
    return [
        Case("r2-io:csv-is-the-profile", "step_breakdown.py", [str(prof), "--csv", str(prof / KERNEL)],
             reason="inside the input folder"),
        Case("r2-io:csv-hard-link-to-input", "topo.py", [str(topo), "--csv", str(folder / "topo-hard.txt")],
             reason="input of this run"),
        Case("r2-io:csv-relative-spelling-of-input", "topo.py",
             [str(topo), "--csv", str(folder / "r2x" / ".." / "topo.txt")], reason="input of this run"),
        Case("r2-io:csv-symlink-to-input", "topo.py", [str(topo), "--csv", str(folder / "topo-link.txt")],
             reason="input of this run"),
        Case("r2-io:csv-symlink", "topo.py", [*t, "--csv", str(folder / "link.csv")], reason="symbolic link"),
        Case("r2-io:csv-dangling-symlink", "topo.py", [*t, "--csv", str(folder / "dangling.csv")],
             reason="does not exist"),
        Case("r2-io:csv-empty-name", "topo.py", [*t, "--csv", ""], reason="empty name"),
        Case("r2-io:csv-fifo-without-reader", "topo.py", [*t, "--csv", str(folder / "no-reader.fifo")],
             reason="no reader"),
        Case("r2-io:csv-dev-null", "topo.py", [*t, "--csv", "/dev/null"], expect="any"),
        Case("r2-io:csv-dev-stdout", "topo.py", [str(TOPO), "--csv", "/dev/stdout"], expect="any"),
        Case("r2-io:emit-matrix-and-csv-same-file", "plan.py",
             [*L20, "--emit-matrix", f"{OUT}/m.csv", "--csv", f"{OUT}/m.csv"], outputs=["m.csv"],
             reason="name the same file"),
        Case("r2-io:emit-matrix-held-when-run-fails", "plan.py",
             [*L20, "--emit-matrix", f"{OUT}/m.csv", "--csv", str(folder / "no-reader.fifo")], outputs=["m.csv"],
             reason="no reader"),
        Case("r2-io:plot-jpg-name", "plan.py", [*L20, "--plot", f"{OUT}/p.jpg"], reason=".png, .pdf or .svg"),
        Case("r2-io:plot-pdf-name", "plan.py", [*L20, "--plot", f"{OUT}/p.pdf"], expect="any", outputs=["p.pdf"]),
        Case("r2-io:parse-only-missing-log", "fewstep.py",
             ["run", "--parse-only", str(logs), "--matrix", f"{OUT}/m.csv"], outputs=["m.csv"], reason="anchor-r2.log"),
        Case("r2-io:parse-only-utf16-log", "fewstep.py",
             ["run", "--parse-only", str(utf16), "--matrix", f"{OUT}/m.csv"], outputs=["m.csv"], reason="UTF-16"),
        Case("r2-io:parse-only-matrix-over-a-log", "fewstep.py",
             ["run", "--parse-only", str(good_logs), "--matrix", str(good_logs / "A" / "runs" / "few-r1.log")],
             reason="input of this run"),
        Case("r2-io:parse-only-good-control", "fewstep.py",
             ["run", "--parse-only", str(good_logs), "--matrix", f"{OUT}/m.csv", "--json"], expect="any",
             outputs=["m.csv"]),
    ]


def _kineto(rank: object = 0, device: bool = True) -> str:
    """A small Kineto trace: one step, a GEMM and an all-reduce on the device (or CPU ops only)."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 990, "dur": 200, "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1000, "dur": 10, "pid": 1, "tid": 1}]
    if device:
        events += [{"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "ts": 1005, "dur": 40, "pid": 0,
                    "tid": 7, "args": {"stream": 7, "device": 0}},
                   {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ts": 1050,
                    "dur": 30, "pid": 0, "tid": 13, "args": {"stream": 13, "device": 0}}]
    doc = {"schemaVersion": 1, "traceEvents": events}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    return json.dumps(doc)


def round2_traceback_cases(base: Path) -> list[Case]:
    """Inputs that used to end in a traceback or a hang: huge integers, NaN, CPU-only traces, folders
    where files belong, malformed bench groups, typed model keys, and sizes no real job has."""
    folder = base / "r2-tb"
    folder.mkdir()
    cases: list[Case] = []
    big = _damaged_profile(folder, "rank-id-huge", "kernel_details.csv", lambda t: t)
    info = big / "profiler_info_0.json"
    info.write_text(info.read_text().replace('"rank_id": 0', '"rank_id": 99999999999999999999999'))
    cases.append(Case("r2-tb:profiler-info-rank-id-huge", "step_breakdown.py", [str(big)], reason="rank_id"))
    (folder / "rank-huge.pt.trace.json").write_text(_kineto(rank=10**23))
    (folder / "cpu-only.pt.trace.json").write_text(_kineto(device=False))
    cases += [Case("r2-tb:kineto-rank-huge", "collectives.py", [str(folder / "rank-huge.pt.trace.json")],
                   reason="distributedInfo.rank"),
              Case("r2-tb:kineto-cpu-only-bubbles", "bubbles.py", [str(folder / "cpu-only.pt.trace.json")],
                   reason="CPU-only"),
              Case("r2-tb:kineto-cpu-only-stage-delta", "stage_delta.py",
                   [str(folder / "cpu-only.pt.trace.json"), str(folder / "cpu-only.pt.trace.json")], reason="CPU-only")]
    nan = _damaged_profile(folder, "matrix-nan", "kernel_details.csv", lambda t: t)
    (nan / OUT_DIR / "communication_matrix.json").write_text(
        '{"step3": {"p2p": {}, "collective": {"allreduce-total@1": {"0-1": {"Transport Type": "HCCS", '
        '"Transit Size(MB)": NaN, "Transit Time(ms)": 0.1, "Bandwidth(GB/s)": NaN}}}}}')
    cases.append(Case("r2-tb:communication-matrix-nan", "collectives.py", [str(nan)], reason="Transit Size(MB)"))
    # a folder where a record file belongs, and a world no job has
    scope = folder / "scope-dir"
    scope.mkdir()
    (scope / "scope-rank0-0.jsonl").write_text(json.dumps(_scope(0, 2, 8)) + "\n")
    (scope / "scope-rank1-1.jsonl").mkdir()
    (folder / "scope-huge.jsonl").write_text(json.dumps(_scope(0, 10**10, 8)) + "\n")
    scope_args = ["--ulysses", "2", "--full-seq", "16", "--heads", "40"]
    cases += [Case("r2-tb:scope-record-is-a-folder", "scope_probe.py", [str(scope), *scope_args], reason="is a folder"),
              Case("r2-tb:scope-world-size-1e10", "scope_probe.py", [str(folder / "scope-huge.jsonl"), *scope_args],
                   reason="world_size")]
    benches = {"group-semicolons": _bench_text(group='"0;1;2;3"'), "group-text": _bench_text(group='"0,1,x,3"'),
               "ranks-1e30": _bench_text(ranks="1e30")}
    for name, text in benches.items():
        (folder / f"bench-{name}.csv").write_text(text)
        cases.append(Case(f"r2-tb:bench-{name}", "plan.py", [*L20, "--bench", str(folder / f"bench-{name}.csv")],
                          reason="ranks" if "ranks" in name else "group"))
    model = (ROOT / "templates" / "models" / "custom-example.toml").read_text()
    (folder / "model-14B.toml").write_text(model + 'params_b = "14B"\n')
    cases.append(Case("r2-tb:model-file-params-b-text", "plan.py",
                      ["--model-file", str(folder / "model-14B.toml"), "--hardware", "H100", "--devices", "8"],
                      reason="params_b"))
    (folder / "model-layers-1e9.toml").write_text(model.replace("layers = 40", "layers = 1000000000"))
    cases.append(Case("r2-tb:model-file-layers-1e9", "plan.py",
                      ["--model-file", str(folder / "model-layers-1e9.toml"), "--hardware", "H100", "--devices", "8"],
                      reason="[1, 10000]"))
    # sizes no real job has: each bounded as its flag is
    n = 1024
    labels = [f"GPU{i}" for i in range(n)]
    rows = ["\t" + "\t".join(labels)] + [f"GPU{i}\t" + "\t".join("X" if i == j else "NV4" for j in range(n))
                                          for i in range(n)]
    (folder / "topo-1024.txt").write_text("\n".join(rows) + "\n")
    cases.append(Case("r2-tb:topo-1024-devices", "topo.py", [str(folder / "topo-1024.txt")], reason="at most 64"))
    table = PUBLISHED.read_text(encoding="utf-8")
    huge = folder / "score-devices-1e7.csv"
    huge.write_text(_csv_cell(table, "n_devices", "10000000"))
    tdir = folder / "tables-devices-1e7"
    tdir.mkdir()
    shutil.copy(huge, tdir / "t.csv")
    cases += [Case("r2-tb:score-devices-1e7", "plan.py", ["score", "--candidates", str(huge), "--out", f"{OUT}/o.csv"],
                   outputs=["o.csv"], reason="1..1024"),
              Case("r2-tb:evaluate-devices-1e7", "plan.py", ["evaluate", "--tables", str(tdir)], reason="1..1024")]
    wide = folder / "score-width-1e7.csv"
    wide.write_text(_csv_cell(table, "resolution_or_seq", "10000000x10000000"))
    cases.append(Case("r2-tb:score-width-1e7", "plan.py", ["score", "--candidates", str(wide), "--out", f"{OUT}/o.csv",
                                                           "--json"], expect="any", outputs=["o.csv"]))
    return cases


def round2_message_cases(base: Path) -> list[Case]:
    """Each exit-2 line names the real cause: links, loops, FIFOs, zero durations, encodings, BOMs, signs."""
    folder = base / "r2-msg"
    folder.mkdir()
    cases: list[Case] = []
    for name, make, reason in (("dangling", lambda p: os.symlink("nowhere.csv", p), "does not exist"),
                               ("loop", lambda p: os.symlink(p.name, p), "loop"),
                               ("fifo", os.mkfifo, "FIFO")):
        prof = _damaged_profile(folder, f"kd-{name}", "kernel_details.csv", lambda t: t)
        (prof / KERNEL).unlink()
        make(prof / KERNEL)
        cases.append(Case(f"r2-msg:kernel-details-{name}", "step_breakdown.py", [str(prof)], reason=reason))
    info = _damaged_profile(folder, "info-fifo", "kernel_details.csv", lambda t: t) / "profiler_info_0.json"
    info.unlink()
    os.mkfifo(info)
    kineto = folder / "kineto-with-fifo"
    kineto.mkdir()
    (kineto / "rank0.pt.trace.json").write_text(_kineto(rank=0))
    os.mkfifo(kineto / "rank1.pt.trace.json")
    cases += [Case("r2-msg:profiler-info-fifo", "collectives.py", [str(info.parent)], reason="FIFO"),
              Case("r2-msg:kineto-trace-fifo-in-folder", "bubbles.py", [str(kineto)], reason="FIFO")]
    zero = _damaged_profile(folder, "kd-zero", "kernel_details.csv", _zero_durations)
    cases.append(Case("r2-msg:all-durations-zero", "step_breakdown.py", [str(zero)], reason="all 13 kernel durations are 0"))
    cases.append(Case("r2-msg:all-durations-zero-bubbles", "bubbles.py", [str(zero)], reason="all 13 kernel durations are 0"))
    no_step = _damaged_profile(folder, "kd-no-step-id", "kernel_details.csv", lambda t: _csv_header(t, "Step Id", None))
    cases.append(Case("r2-msg:no-step-id-column", "step_breakdown.py", [str(no_step)], reason="no task carries a step"))
    src = TOPO.read_text(encoding="utf-8")
    (folder / "topo-bom.txt").write_bytes(b"\xef\xbb\xbf" + src.encode())
    (folder / "topo-utf16.txt").write_bytes(src.encode(UTF16))
    (folder / "topo-colour.txt").write_text("\x1b[1m" + src.replace("GPU0", "\x1b[4mGPU0\x1b[0m", 1) + "\x1b[0m")
    cases += [Case("r2-msg:topo-bom", "topo.py", [str(folder / "topo-bom.txt"), "--json"], expect="any"),
              Case("r2-msg:topo-utf16", "topo.py", [str(folder / "topo-utf16.txt")], reason="UTF-16"),
              Case("r2-msg:topo-colour-codes", "topo.py", [str(folder / "topo-colour.txt"), "--json"], expect="any")]
    (folder / "bench-bom.csv").write_text("\ufeff" + _bench_text(), encoding="utf-8")
    cases.append(Case("r2-msg:bench-header-bom", "plan.py", [*L20, "--bench", str(folder / "bench-bom.csv"), "--json"],
                      expect="any"))
    hw = HARDWARE.read_text(encoding="utf-8")
    (folder / "hw-latin1.toml").write_bytes(hw.replace("#", "# caf\xe9", 1).encode("latin-1"))
    cases.append(Case("r2-msg:non-utf8-names-the-file", "plan.py",
                      ["--model", "FLUX.1-dev", "--hardware", str(folder / "hw-latin1.toml"), "--devices", "4"],
                      reason="hw-latin1.toml"))
    cases += [Case(f"r2-msg:negative-{value}", "mask_bound.py", ["calc", "--comm-us", value, "--compute-us", "538",
                                                                   "--chunks", "4"], reason="expected a finite time > 0")
              for value in ("-5", "-5e2", "-.5")]
    return cases


def _zero_durations(text: str) -> str:
    """Every task's Duration(us) set to 0 (quoted cells kept intact)."""
    rows = list(csv.reader(io.StringIO(text)))
    col = rows[0].index("Duration(us)")
    for row in rows[1:]:
        row[col] = "0"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()




# --- torch_npu export_type db (issue 25) ---------------------------------------------------------

#: connections that hold a database locked while the corpus runs (the cases run in other processes)
_DB_LOCKS: list = []


def round2_db_cases(base: Path) -> list[Case]:
    """Damaged db exports of the shipped rank 0: truncated, not SQLite, missing table, unknown schema, locked."""
    import sqlite3

    from ascend_db_synth import write_db_rank

    def db_rank(name: str, **kw: object) -> tuple[Path, Path]:
        folder = write_db_rank(RANK0, base / "db" / name / RANK0.name, **kw)
        return folder, next((folder / OUT_DIR).glob("ascend_pytorch_profiler_*.db"))

    cases: list[Case] = []
    folder, db = db_rank("truncated")
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    cases += _with_reason(_profile_cases("db-truncated", [str(folder)]), "truncated")
    folder, db = db_rank("not-sqlite")
    db.write_bytes(b"this is not a database\n" * 10)
    cases += _with_reason(_profile_cases("db-not-sqlite", [str(folder)]), "not an SQLite database")
    folder, db = db_rank("missing-table")
    con = sqlite3.connect(db)
    con.execute("DROP TABLE COMPUTE_TASK_INFO")
    con.commit()
    con.close()
    cases += _with_reason(_profile_cases("db-missing-table", [str(folder)]), "missing table COMPUTE_TASK_INFO")
    folder, db = db_rank("schema-2", schema_major="2")
    cases += _with_reason(_profile_cases("db-schema-2", [str(folder)]), "SCHEMA_VERSION")
    folder, db = db_rank("analysis-cut")
    analysis = folder / OUT_DIR / "analysis.db"
    analysis.write_bytes(analysis.read_bytes()[:150])
    cases += _with_reason(_profile_cases("db-analysis-truncated", [str(folder)]), "analysis.db")
    folder, db = db_rank("locked")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # this process keeps the lock; the scripts run as other processes
    _DB_LOCKS.append(holder)
    cases += _with_reason(_profile_cases("db-locked", [str(folder)]), "locked")
    cases += _cluster_cases(base)
    return cases


def _cluster_cases(base: Path) -> list[Case]:
    """Damaged msprof-analyze cluster_analysis_output (text and db) for step_breakdown and collectives."""
    import sqlite3

    from msprof_cluster_synth import build_cluster

    ranks = {0: RANK0, 2: RANK2}
    cases: list[Case] = []

    def both(name: str, folder: Path, reason: str) -> None:
        for script, flag in (("step_breakdown.py", "s"), ("collectives.py", "c")):
            cases.append(Case(f"{script.split('.')[0]}:{name}", script,
                              [str(folder), "--json", "--csv", f"{OUT}/{flag}.csv"], outputs=[f"{flag}.csv"],
                              reason=reason))

    out = build_cluster(ranks, base / "cluster" / "no-index")
    path = out / "cluster_step_trace_time.csv"
    path.write_text(_csv_header(path.read_text(encoding="utf-8"), "Index", None), encoding="utf-8")
    both("cluster-csv-no-index", out, "missing column(s) ['Index']")
    out = build_cluster(ranks, base / "cluster" / "comm-cut")
    path = out / "cluster_communication.json"
    path.write_text(path.read_text(encoding="utf-8")[:40], encoding="utf-8")
    both("cluster-comm-json-truncated", out, "cluster_communication.json")
    out = build_cluster(ranks, base / "cluster" / "db-empty", db=True)
    con = sqlite3.connect(out / "cluster_analysis.db")
    con.execute("DROP TABLE ClusterStepTraceTime")
    con.execute("DROP TABLE ClusterCommAnalyzerTime")
    con.commit()
    con.close()
    both("cluster-db-no-tables", out, "missing table ClusterStepTraceTime")
    return cases


def _with_reason(cases: list[Case], reason: str) -> list[Case]:
    for case in cases:
        case.reason = reason
    return cases


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
    # the round-3 modules import Case from this module: loaded here, not at the top
    import damaged_corpus_r3_db
    import damaged_corpus_r3_plan
    import damaged_corpus_r3_planbench as r3_planbench
    import damaged_corpus_r4_evidence
    import damaged_corpus_r4_quality

    cases = (profile_cases(base) + stage_delta_cases(base) + topo_cases(base) + plan_cases(base)
             + fewstep_cases(base) + a2a_audit_cases(base) + scope_cases(base) + hang_doctor_cases(base)
             + flag_cases(base) + round2_silent_cases(base) + round2_io_cases(base) + round2_traceback_cases(base)
             + round2_message_cases(base) + round2_db_cases(base) + plan_bench_cases(base)
             + damaged_corpus_r3_db.cases(base) + r3_planbench.cases(base) + damaged_corpus_r3_hang.cases(base)
             + damaged_corpus_r3_plan.cases(base) + damaged_corpus_r4_evidence.cases(base)
             + damaged_corpus_r4_quality.cases(base) + damaged_corpus_r4_serving.cases(base))
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return cases
