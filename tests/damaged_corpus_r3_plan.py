"""Damaged and hostile input, round 3: plan.py's own inputs (--measured, --model-file, --hardware FILE.toml,
--set, --ref-latency / --ref-step-s / --launch-us, score --candidates, evaluate --tables).

Each case failed before the fix that added it: a traceback (RecursionError, ValueError on a 5,000-digit
integer, OverflowError or ZeroDivisionError in the cost model, KeyError on a missing key), a hang (a FIFO
with no writer, /dev/zero read to the end) or a silent pass (a boolean, negative or repeated measurement,
a figure of 1e-300, a --set given twice). Every one must now exit 2 with one stderr line that says `reason`.
Hooked into damaged_corpus.build(); run by tests/test_damaged_corpus.py.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from damaged_corpus import DATA, HARDWARE, OUT, PUBLISHED, ROOT, Case, _bench_text, _csv_cell

TINY = str(DATA / "planbench" / "tiny-joint.toml")
PLAN4 = ["--model-file", TINY, "--hardware", "910B", "--devices", "4"]
FLUX4 = ["--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "4"]
BENCH = {"schema": "dit-parallel-opt/plan_bench/v1", "model": "Tiny-Joint", "world": 4,
         "shape": {"tokens": 16, "cfg": True}, "plans": [{"name": "U4", "step_s": 0.01, "request_s": 0.5}]}


def _key(text: str, name: str, value: str) -> str:
    """Replace the first `name = ...` of a TOML file (only above [sources])."""
    head, sources = text.split("[sources]", 1)
    new, n = re.subn(rf"(?m)^({name}\s*=\s*)\S+", rf"\g<1>{value}", head, count=1)
    assert n == 1, name
    return new + "[sources]" + sources


def _fifo(folder: Path, name: str) -> str:
    path = folder / name
    os.mkfifo(path)
    return str(path)


def _measured_cases(folder: Path) -> list[Case]:
    good = json.dumps(BENCH)
    row = BENCH["plans"][0]

    def doc(**changes) -> str:
        return json.dumps({**BENCH, **changes})

    def plan(**changes) -> str:
        return doc(plans=[{**row, **changes}])

    texts = {
        # (document, the phrase of its one-line error)
        "deep": ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
        "int-5000-digits": (good.replace('"world": 4', '"world": ' + "4" * 5000), "5000 digits"),
        "step-bool": (plan(step_s=True), "key 'step_s' must be seconds"),
        "step-huge": (plan(step_s=1e308), "key 'step_s' must be seconds in (0, 1e+07]"),
        "request-text": (plan(request_s="fast"), "key 'request_s' must be seconds"),
        "request-negative": (plan(request_s=-0.5), "key 'request_s' must be seconds"),
        "request-missing": (json.dumps({**BENCH, "plans": [{"name": "U4", "step_s": 0.01}]}), "no request_s"),
        "dispersion-text": (plan(dispersion_pct="small"), "key 'dispersion_pct' must be a percentage"),
        "verdict-unknown": (plan(verdict="great"), "key 'verdict' must be one of"),
        "plan-twice": (doc(plans=[row, {**row, "name": "u4", "step_s": 0.02, "request_s": 1.0}]),
                       "plans[1] (u4): the same plan as plans[0] (U4)"),
        "world-float": (doc(world=4.0), "key 'world' must be an integer 1..1024, got 4.0"),
        "tokens-text": (doc(shape={"tokens": "16", "cfg": True}), "shape: key 'tokens' must be an integer"),
        "plans-not-a-list": (doc(plans={"U4": 0.01}), "key 'plans' must be a non-empty list"),
        # a step below the prediction's host-bound part fitted a negative scale: negative latencies printed
        "step-below-host-time": (plan(step_s=1e-6, request_s=5e-5), "plan U4: step_s 1e-06 s is below the part"),
    }
    cases = []
    for name, (text, reason) in texts.items():
        path = folder / f"measured-{name}.json"
        path.write_text(text, encoding="utf-8")
        cases.append(Case(f"plan-r3:measured-{name}", "plan.py", [*PLAN4, "--measured", str(path), "--csv",
                                                                   f"{OUT}/p.csv"], outputs=["p.csv"], reason=reason))
    cases.append(Case("plan-r3:measured-fifo-no-writer", "plan.py",
                      [*PLAN4, "--measured", _fifo(folder, "measured.fifo")], reason="no writer opened this FIFO"))
    cases.append(Case("plan-r3:measured-dev-zero", "plan.py", [*PLAN4, "--measured", "/dev/zero"],
                      reason="is a device"))
    return cases


def _toml_cases(folder: Path) -> list[Case]:
    tiny = Path(TINY).read_text(encoding="utf-8")
    hw = HARDWARE.read_text(encoding="utf-8")
    deep_array = "\nx = " + "[" * 50_000 + "]" * 50_000 + "\n"
    model_files = {
        "deep-array": (tiny + deep_array, "nests too deeply"),
        "deep-dotted-key": (tiny + ".".join(["a"] * 50_000) + " = 1\n", "50,000 dotted parts"),
        "int-5000-digits": (re.sub(r"(?m)^layers\s*=.*$", "layers = " + "1" * 5000, tiny), "digits"),
    }
    cases = []
    for name, (text, reason) in model_files.items():
        path = folder / f"model-{name}.toml"
        path.write_text(text, encoding="utf-8")
        cases.append(Case(f"plan-r3:model-file-{name}", "plan.py",
                          ["--model-file", str(path), "--hardware", "910B", "--devices", "4"], reason=reason))
    cases.append(Case("plan-r3:model-file-fifo-no-writer", "plan.py",
                      ["--model-file", _fifo(folder, "model.fifo"), "--hardware", "910B", "--devices", "4"],
                      reason="no writer opened this FIFO"))
    cases.append(Case("plan-r3:model-file-dev-zero", "plan.py",
                      ["--model-file", "/dev/zero", "--hardware", "910B", "--devices", "4"], reason="is a device"))
    hardware = {
        # a figure of 1e-300 overflowed the cost model (traceback) or passed silently; each has a floor now
        "peak-1e-300": (_key(hw, "peak_tflops_bf16", "1e-300"), "'peak_tflops_bf16' must be a number in [0.1, "),
        "mfu-1e-300": (_key(hw, "mfu", "1e-300"), "'mfu' must be a number in [0.01, 1]"),
        "link-1e-300": (_key(hw, "bandwidth_GBps", "1e-300"), "bandwidth_GBps' must be a number in [0.01, "),
        "latency-1e-300": (_key(hw, "latency_us", "1e-300"), "latency_us' must be a number in [0.01, "),
        "hbm-1e-300": (_key(hw, "hbm_bandwidth_GBps", "1e-300"), "'hbm_bandwidth_GBps' must be a number in [1, "),
        "memory-1e-300": (_key(hw, "memory_GB", "1e-300"), "'memory_GB' must be a number in [1, "),
        "alltoall-group-huge": (hw.replace("[links.intra_domain]", "[links.intra_domain]\nalltoall_GBps = { "
                                           + "9" * 30 + " = 100.0 }", 1)
                                + 'intra_domain_alltoall = "a group of 10^30 devices"\n', "of at most 1024 devices"),
        "deep-array": (hw + "\n[x]" + deep_array, "nests too deeply"),
        "deep-table-header": (hw + "\n[" + ".".join(["t"] * 50_000) + "]\nb = 1\n", "50,000 dotted parts"),
        "int-5000-digits": (_key(hw, "devices_per_node", "8" * 5000), "digits"),
    }
    for name, (text, reason) in hardware.items():
        path = folder / f"hardware-{name}.toml"
        path.write_text(text, encoding="utf-8")
        cases.append(Case(f"plan-r3:hardware-{name}", "plan.py",
                          ["--model", "FLUX.1-dev", "--hardware", str(path), "--devices", "4", "--json"],
                          reason=reason))
    # a framework profile whose [form_vendors] is text: AttributeError ('str' object has no attribute 'get')
    profile = (ROOT / "templates" / "frameworks" / "xdit.toml").read_text(encoding="utf-8")
    profile = re.sub(r"(?m)^\[form_vendors\][^\[]*", "", profile).replace('name = "', 'form_vendors = "nvidia"\n'
                                                                              'name = "', 1)
    (folder / "framework-form-vendors-text.toml").write_text(profile, encoding="utf-8")
    cases.append(Case("plan-r3:framework-form-vendors-text", "plan.py",
                      [*FLUX4, "--framework", str(folder / "framework-form-vendors-text.toml")],
                      reason="[form_vendors] must be a table of form = [vendors]"))
    cases.append(Case("plan-r3:hardware-fifo-no-writer", "plan.py",
                      ["--model", "FLUX.1-dev", "--hardware", _fifo(folder, "hardware.fifo"), "--devices", "4"],
                      reason="no writer opened this FIFO"))
    cases.append(Case("plan-r3:hardware-dev-zero", "plan.py",
                      ["--model", "FLUX.1-dev", "--hardware", "/dev/zero", "--devices", "4"], reason="is a device"))
    return cases


def _flag_cases() -> list[Case]:
    sets = {
        # (the --set items, the phrase): 1e300 / 1e-300 overflowed (traceback) or passed; a repeat passed silently
        "launch-us-1e300": (["launch_us=1e300"], "'launch_us' must be a number in [0, 100000]"),
        "mfu-1e-300": (["mfu=1e-300"], "'mfu' must be a number in [0.01, 1]"),
        "peak-1e-300": (["peak_tflops_bf16=1e-300"], "'peak_tflops_bf16' must be a number in [0.1, "),
        "hbm-1e-300": (["hbm_bandwidth_GBps=1e-300"], "'hbm_bandwidth_GBps' must be a number in [1, "),
        "link-1e-300": (["links.intra_domain.bandwidth_GBps=1e-300"], "must be a number in [0.01, 10000]"),
        "ring-1e-300": (["links.intra_domain.ring_GBps=1e-300"], "must be a number in [0.01, 10000]"),
        "alltoall-1e-300": (["links.intra_domain.alltoall_GBps.4=1e-300"], "must be a number in [0.01, 10000]"),
        "latency-1e-300": (["links.intra_domain.latency_us=1e-300"], "must be a number in [0.01, 1000000]"),
        "alltoall-group-huge": (["links.intra_domain.alltoall_GBps." + "9" * 23 + "=3"], "unknown figure"),
        "repeated": (["mfu=0.3", "mfu=0.5"], "mfu is already set by --set 'mfu=0.3'"),
        "underscore-number": (["mfu=0_4"], "such as 0.4 or 1e3"),
    }
    cases = [Case(f"plan-r3:set-{name}", "plan.py",
                  [*FLUX4, *[a for item in items for a in ("--set", item)], "--csv", f"{OUT}/p.csv"],
                  outputs=["p.csv"], reason=reason) for name, (items, reason) in sets.items()]
    flags = {
        "ref-latency-1e308": (["--ref-latency", "1e308"], "--ref-latency: 1e+308 is out of range"),
        "ref-step-s-1e308": (["--ref-step-s", "1e308"], "--ref-step-s: 1e+308 is out of range"),
        "ref-step-s-1e-300": (["--ref-step-s", "1e-300"], "expected a finite number in [1e-06, 1e+07]"),
        "launch-us-1e300": (["--launch-us", "1e300"], "--launch-us: key 'launch_us' must be a number in [0, "),
    }
    cases += [Case(f"plan-r3:{name}", "plan.py", [*FLUX4, *args, "--json"], reason=reason)
              for name, (args, reason) in flags.items()]
    # counts written into a hardware name: 99999999 nodes hung (a link class per device pair), 5,000 digits were a
    # ValueError traceback, '0x0x' was read as no count at all
    names = {
        "hardware-nodes-99999999": (["--hardware", "99999999x8xH100"], "node count 99999999 is out of range"),
        "hardware-count-5000-digits": (["--hardware", "9" * 5000 + "xH100"], "(5000 digits) is out of range"),
        "hardware-count-zero": (["--hardware", "0x0xH100"], "node count 0 is out of range; expected 1..1024"),
        "interconnect-nodes-5000-digits": (["--hardware", "H100", "--interconnect", f"NVLink, {'9' * 5000} nodes"],
                                           "(5000 digits) is out of range"),
    }
    cases += [Case(f"plan-r3:{name}", "plan.py", ["--model", "FLUX.1-dev", "--devices", "4", *args], reason=reason)
              for name, (args, reason) in names.items()]
    return cases


def _table_cases(folder: Path) -> list[Case]:
    cases = [
        Case("plan-r3:score-candidates-fifo-no-writer", "plan.py",
             ["score", "--candidates", _fifo(folder, "candidates.fifo"), "--out", f"{OUT}/o.csv"],
             outputs=["o.csv"], reason="no writer opened this FIFO"),
        Case("plan-r3:score-candidates-dev-zero", "plan.py",
             ["score", "--candidates", "/dev/zero", "--out", f"{OUT}/o.csv"], outputs=["o.csv"],
             reason="is a device"),
    ]
    # a quoted cell of 200,000 characters: csv's field limit (131,072) raised _csv.Error, a traceback
    lines = PUBLISHED.read_text(encoding="utf-8").splitlines(keepends=True)
    cells = lines[1].rstrip("\n").split(",")
    long_cell = folder / "score-long-cell.csv"
    long_cell.write_text(lines[0] + ",".join([*cells[:-1], '"' + "x" * 200_000 + '"']) + "\n" + "".join(lines[2:]),
                         encoding="utf-8")
    long_dir = folder / "tables-long-cell"
    long_dir.mkdir()
    (long_dir / "t.csv").write_text(long_cell.read_text(encoding="utf-8"), encoding="utf-8")
    cases += [
        Case("plan-r3:score-cell-over-csv-field-limit", "plan.py",
             ["score", "--candidates", str(long_cell), "--out", f"{OUT}/o.csv"], outputs=["o.csv"],
             reason="line 2: not a CSV row (field larger than field limit"),
        Case("plan-r3:evaluate-cell-over-csv-field-limit", "plan.py", ["evaluate", "--tables", str(long_dir)],
             reason="line 2: not a CSV row (field larger than field limit"),
    ]
    # a measured latency of inf or 1e308 was taken as a measurement (evaluate --calibrate overflowed on the
    # single-device row: a traceback); now the row is left out with the warning every unusable latency gets
    for name, value in (("inf", "inf"), ("1e308", "1e308")):
        tdir = folder / f"tables-latency-{name}"
        tdir.mkdir()
        (tdir / "t.csv").write_text(_csv_cell(PUBLISHED.read_text(encoding="utf-8"), "latency_s", value),
                                    encoding="utf-8")
        cases.append(Case(f"plan-r3:evaluate-calibrate-latency-{name}", "plan.py",
                          ["evaluate", "--tables", str(tdir), "--calibrate", "--in-sample-only", "--json"],
                          expect="any", warn="latency_s is not a positive number up to 1e+07 s"))
    # --bench: the same cell over csv's field limit in a comm_bench.py CSV (_csv.Error, a traceback)
    bench = _bench_text().splitlines(keepends=True)
    bench_cells = bench[1].rstrip("\n").split(",")
    long_bench = folder / "bench-long-cell.csv"
    long_bench.write_text(bench[0] + ",".join([*bench_cells[:-1], '"' + "x" * 200_000 + '"']) + "\n"
                          + "".join(bench[2:]), encoding="utf-8")
    cases.append(Case("plan-r3:bench-cell-over-csv-field-limit", "plan.py",
                      ["--model", "FLUX.1-dev", "--hardware", "L20", "--devices", "4", "--bench", str(long_bench)],
                      reason="bench-long-cell.csv:2: not a CSV row (field larger than field limit"))
    fifo_dir, zero_dir = folder / "tables-fifo", folder / "tables-dev-zero"
    fifo_dir.mkdir()
    zero_dir.mkdir()
    (fifo_dir / "a.csv").write_text(PUBLISHED.read_text(encoding="utf-8"), encoding="utf-8")
    _fifo(fifo_dir, "b.csv")
    os.symlink("/dev/zero", zero_dir / "t.csv")
    cases += [
        Case("plan-r3:evaluate-table-fifo-no-writer", "plan.py", ["evaluate", "--tables", str(fifo_dir)],
             reason="no writer opened this FIFO"),
        Case("plan-r3:evaluate-table-dev-zero", "plan.py", ["evaluate", "--tables", str(zero_dir)],
             reason="is a device"),
    ]
    return cases


def cases(base: Path) -> list[Case]:
    """Write round 3's hostile inputs of plan.py under base; return the cases."""
    folder = base / "plan_r3"
    folder.mkdir()
    assert (ROOT / "scripts" / "plan.py").exists()
    return _measured_cases(folder) + _toml_cases(folder) + _flag_cases() + _table_cases(folder)
