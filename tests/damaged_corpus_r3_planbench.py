"""Damaged and hostile input, round 3: plan_bench.py's --from-plan document, its size and count flags,
--fault-drill and its model files. Every case failed before the fix (a traceback, a hang, a full memory,
exit 17, a silent pass or a message that blamed a peer rank in a one-process run); see the issue
"Damaged and hostile input, round 3". Hooked into damaged_corpus.build()."""

from __future__ import annotations

import json
import os
from pathlib import Path

from damaged_corpus import DATA, OUT, Case

TINY = str(DATA / "planbench" / "tiny-joint.toml")
PLAN_DOC = {"schema": "dit-parallel-opt/plan/v1", "model": "Tiny-Joint", "short_list": ["single"],
            "shape": {"width": 16, "height": 1, "frames": 1, "steps": 50, "cfg": True, "tokens": 16}}
# a model file within every bound of the schema whose one block needs tens of terabytes of weights
HUGE_MODEL = """name = "Huge"
heads = 4096
kv_heads = 4096
head_dim = 256
layers = 1
hidden = 1048576
ffn = 4194304
text_tokens = 0
cfg = false
tokens = 16
"""


def _plan_doc(folder: Path, name: str, text: str) -> str:
    path = folder / f"{name}.json"
    path.write_text(text)
    return str(path)


def _with(key: str, value: object, shape: bool = True) -> str:
    doc = json.loads(json.dumps(PLAN_DOC))
    (doc["shape"] if shape else doc)[key] = value
    return json.dumps(doc)


def _from_plan_cases(folder: Path) -> list[Case]:
    good = json.dumps(PLAN_DOC)
    docs = {
        # name: (document text, phrase the one-line message must hold, model file given)
        "shape-list": (_with("shape", [16, 16, 1], shape=False), "got [16, 16, 1] (list)", True),
        "shape-text": (_with("shape", "16x16", shape=False), "key 'shape' must be an object", True),
        "tokens-text": (_with("tokens", "abc"), "key 'shape.tokens'", True),
        "tokens-list": (_with("tokens", [16]), "key 'shape.tokens'", True),
        "tokens-float": (_with("tokens", 16.5), "key 'shape.tokens'", True),
        "tokens-huge": (_with("tokens", 10**15), "key 'shape.tokens'", True),
        "cfg-text": (_with("cfg", "no"), "key 'shape.cfg'", True),
        "steps-float": (_with("steps", 2.7), "key 'shape.steps'", True),
        "width-bool": (_with("width", True), "key 'shape.width'", True),
        "frames-zero": (_with("frames", 0), "key 'shape.frames'", True),
        "model-int": (_with("model", 5, shape=False), "key 'model'", False),
        "short-list-long": (_with("short_list", [f"U{i}" for i in range(1, 66)], shape=False), "1..64 plan names",
                            True),
        "bigint": (good.replace('"steps": 50', '"steps": ' + "9" * 5000), "5000 digits", True),
        "deep": ("[" * 100_000 + "]" * 100_000, "nests too deeply", True),
        # the short list of another model, measured silently on this one before
        "other-model": (_with("model", "FLUX.1-dev", shape=False), "chosen for model 'FLUX.1-dev'", True),
    }
    cases = []
    for name, (text, reason, model_file) in docs.items():
        args = ["--from-plan", _plan_doc(folder, f"r3-{name}", text), "--csv", f"{OUT}/b.csv"]
        cases.append(Case(f"plan_bench:r3-from-plan-{name}", "plan_bench.py",
                          args + (["--model-file", TINY] if model_file else []), outputs=["b.csv"], reason=reason))
    fifo = folder / "r3-plan.fifo"
    if hasattr(os, "mkfifo"):
        os.mkfifo(fifo)
        cases.append(Case("plan_bench:r3-from-plan-fifo-no-writer", "plan_bench.py",
                          ["--from-plan", str(fifo), "--model-file", TINY], reason="FIFO"))
        cases.append(Case("plan_bench:r3-model-file-fifo", "plan_bench.py",
                          ["--model-file", str(fifo), "--plans", "single"], reason="FIFO"))
    if os.path.exists("/dev/zero"):
        cases.append(Case("plan_bench:r3-from-plan-dev-zero", "plan_bench.py",
                          ["--from-plan", "/dev/zero", "--model-file", TINY], reason="device"))
        cases.append(Case("plan_bench:r3-model-file-dev-zero", "plan_bench.py",
                          ["--model-file", "/dev/zero", "--plans", "single"], reason="device"))
    return cases


def _flag_cases(folder: Path) -> list[Case]:
    huge = folder / "r3-huge-model.toml"
    huge.write_text(HUGE_MODEL)
    base = ["--model-file", TINY, "--csv", f"{OUT}/b.csv"]
    flags = {
        # name: (extra arguments, phrase the one-line message must hold)
        "timeout-huge": (["--timeout", "1e308"], "--timeout"),
        "seed-2-70": (["--seed", str(2**70)], "--seed"),
        "seed-negative": (["--seed", "-1"], "--seed"),
        "warmup-huge": (["--warmup", str(10**20)], "--warmup"),
        "repeats-huge": (["--repeats", str(10**6)], "--repeats"),
        "iters-huge": (["--iters", str(10**9)], "--iters"),
        "steps-huge": (["--steps", str(10**20)], "--steps"),
        "tokens-huge": (["--tokens", str(10**11)], "--tokens"),
        "heads-huge": (["--heads", str(10**8)], "--heads"),
        # 23 TFLOP per forward: hours on a CPU, ended by the watchdog after --timeout + 30 s, blaming a peer
        "compute-past-timeout": (["--tokens", "300000", "--timeout", "5"], "past --timeout 5 s"),
        "resolution-zero": (["--resolution", "0x0"], "width 0"),
        "resolution-digits": (["--resolution", "16x" + "9" * 5000], "--resolution"),
        "plan-digits": (["--plans", "U" + "9" * 5000], "characters"),
        "plan-patches-alone": (["--plans", "m4"], "PipeFusion's patch count"),
        "fault-die-one-rank": (["--fault-drill", "die:0"], "at least 2 ranks"),
        "fault-corrupt-one-rank": (["--fault-drill", "corrupt:0"], "at least 2 ranks"),
        "fault-arabic-digit": (["--fault-drill", "die:\u0663"], "expected die:R"),
    }
    cases = [Case(f"plan_bench:r3-{name}", "plan_bench.py",
                  base + extra + ([] if "--plans" in extra else ["--plans", "single"]), outputs=["b.csv"],
                  reason=reason) for name, (extra, reason) in flags.items()]
    cases.append(Case("plan_bench:r3-memory-estimate", "plan_bench.py",
                      ["--model-file", str(huge), "--plans", "single", "--csv", f"{OUT}/b.csv"], outputs=["b.csv"],
                      reason="would allocate about"))
    cases += [
        # before: "model name must be a non-empty string, got None" (the empty path was taken as no file)
        Case("plan_bench:r3-model-file-empty", "plan_bench.py", ["--model-file", "", "--plans", "single"],
             reason="--model-file: 0 characters"),
        # before: a 100,000-character error line
        Case("plan_bench:r3-model-name-huge", "plan_bench.py", ["--model", "x" * 100_000, "--plans", "single"],
             reason="--model: 100000 characters"),
        # plan_bench builds linear attention; a 4K SANA request (about 3 TFLOP per block forward, three forwards
        # between progress checks) is refused before building when --timeout is shorter than its time bound. The
        # default 300 s is not: a fast CPU runs it in minutes, so the case pins --timeout 2 (any CPU under 4 TFLOP/s)
        Case("plan_bench:r3-linear-attention-preset", "plan_bench.py",
             ["--model", "SANA-1.6B-4K", "--plans", "single", "--timeout", "2"], reason="past --timeout 2 s"),
    ]
    return cases


def cases(base: Path) -> list[Case]:
    """Write round 3's plan_bench inputs under base; return the cases."""
    folder = base / "plan_bench_r3"
    folder.mkdir(parents=True)
    return _from_plan_cases(folder) + _flag_cases(folder)
