"""plan_bench's request (model, shape, short list) and outputs (table, JSON body, CSV frame)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ditpar import files, formats, limits
from ditpar.errors import InputError

CSV_COLUMNS = ["name", "block_ms", "step_s", "request_s", "requests_per_s", "dispersion_pct", "bytes_per_rank_per_block",
               "max_abs_err", "tolerance", "verdict", "cfg", "ulysses", "ring", "kv_allgather", "tp", "pipefusion",
               "dp", "elements_per_rank_per_block", "element_bytes"]


MAX_INPUT_BYTES = 64 << 20   # a plan.py --json document or a model file (plan.py's JSON for 1024 devices is < 5 MB)
MAX_PLANS = 64       # plans in one run (plan.py's short list has 2-6; each plan is built and timed)
MAX_NAME_CHARS = 200  # a model or plan name


@dataclass(frozen=True)
class PlanDoc:
    """What plan_bench reads from plan.py --json: the model's name, the short list and the request's shape."""

    model: str
    short_list: list[str]
    width: int
    height: int
    frames: int
    steps: int
    cfg: bool
    tokens: int | None


def _int_key(value: object, where: str, lo: int, hi: int) -> int:
    """A JSON integer in lo..hi (an integral float passes); text, a list, a bool or null is an InputError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: expected an integer {lo}..{hi}, got {_shown(value)}")
    return limits.integer(value, where, lo, hi)


def _shown(value: object) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def check_input(path: str, flag: str, streams: bool) -> None:
    """A file the user names: a regular file of at most MAX_INPUT_BYTES, or (streams) a FIFO or pipe,
    which files.read_input reads once with a timeout; a device (/dev/zero never ends) or folder is refused."""
    import stat

    why = files.input_problem(path, "file", streams=False)
    if why is None:
        size = os.stat(path).st_size
        if size > MAX_INPUT_BYTES:
            raise InputError(f"{flag} {path}: {size:,} bytes; expected at most {MAX_INPUT_BYTES >> 20} MiB "
                             "(plan.py's output or a model file is far smaller)")
        return
    try:
        fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        fifo = False
    if not (streams and fifo):
        raise InputError(f"{flag}: {why}")


def read_plan_json(path: str) -> PlanDoc:
    """plan.py --json output: its short list, model name and shape, every key read checked for type and
    range (the bounds of plan.py's flags); anything else is one InputError naming the key."""
    check_input(path, "--from-plan", streams=True)
    doc = formats.load_json(path)
    if not isinstance(doc, dict) or doc.get("schema") != "dit-parallel-opt/plan/v1":
        raise InputError(f"{path}: not a plan.py --json document (schema dit-parallel-opt/plan/v1 expected)")
    for key in ("model", "short_list", "shape"):
        if key not in doc:
            raise InputError(f"{path}: key {key!r} missing")
    short = doc["short_list"]
    if (not isinstance(short, list) or not 1 <= len(short) <= MAX_PLANS
            or not all(isinstance(x, str) and 0 < len(x) <= MAX_NAME_CHARS for x in short)):
        raise InputError(f"{path}: key 'short_list' must be a list of 1..{MAX_PLANS} plan names "
                         f"(text of 1..{MAX_NAME_CHARS} characters), got {_shown(short)}")
    model = doc["model"]
    if not isinstance(model, str) or not 0 < len(model) <= MAX_NAME_CHARS:
        raise InputError(f"{path}: key 'model' must be a model name (text of 1..{MAX_NAME_CHARS} characters), "
                         f"got {_shown(model)}")
    sh = doc["shape"]
    if not isinstance(sh, dict):
        raise InputError(f"{path}: key 'shape' must be an object with width, height, frames, steps and cfg, "
                         f"got {_shown(sh)}")
    missing = [k for k in ("width", "height", "frames", "steps", "cfg") if k not in sh]
    if missing:
        raise InputError(f"{path}: key 'shape' needs width, height, frames, steps and cfg; missing "
                         f"{', '.join(missing)}")
    side = limits.MAX_PIXELS_SIDE
    width, height = (_int_key(sh[k], f"{path}: key 'shape.{k}'", 1, side) for k in ("width", "height"))
    frames = _int_key(sh["frames"], f"{path}: key 'shape.frames'", 1, limits.MAX_FRAMES)
    steps = _int_key(sh["steps"], f"{path}: key 'shape.steps'", 1, limits.MAX_STEPS)
    if not isinstance(sh["cfg"], bool):
        raise InputError(f"{path}: key 'shape.cfg': expected true or false, got {_shown(sh['cfg'])}")
    tokens = sh.get("tokens")
    if tokens is not None:
        tokens = _int_key(tokens, f"{path}: key 'shape.tokens'", 1, limits.MAX_TOKENS)
    return PlanDoc(model, list(short), width, height, frames, steps, sh["cfg"], tokens)


def _f(x, digits: int) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}"


def render(doc: dict) -> str:
    """The readable table: one row per plan, then what was measured and what was extrapolated."""
    lines = [f"# {doc['model']}: {doc['shape_text']}",
             f"# backend {doc['backend']}  world {doc['world']}  device {doc['device']}  dtype {doc['dtype']}  "
             f"warm-up {doc['timing']['warmup']}  repeats {doc['timing']['repeats']} (ABBA)  "
             f"calls per sample {doc['timing']['iters']}",
             f"{'plan':<16}{'block_ms':>10}{'step_s':>10}{'request_s':>11}{'req/s':>9}{'disp%':>7}{'MB/rank/blk':>13}"
             f"{'max_abs_err':>13}  verdict"]
    for r in doc["plans"]:
        mb = r.get("bytes_per_rank_per_block")
        lines.append(f"{r['name']:<16}{_f(r.get('block_ms'), 3):>10}{_f(r.get('step_s'), 4):>10}"
                     f"{_f(r.get('request_s'), 3):>11}{_g(r.get('requests_per_s')):>9}{_f(r.get('dispersion_pct'), 1):>7}"
                     f"{_f(mb / 1e6 if mb is not None else None, 3):>13}"
                     f"{_e(r.get('max_abs_err')):>13}  "
                     f"{r['verdict']}" + (f": {r['reason']}" if r.get("reason") else ""))
    lines += [f"# block_ms = measured step / {doc['layers']} blocks; step_s = sum over block kinds of layers x "
              "measured block time (median of repeats, slowest rank); request_s = step_s x "
              f"{doc['steps']} steps: EXTRAPOLATED from one block of each kind (no VAE, text encoder, "
              "scheduler or CFG latent gather)",
              "# req/s = DP replicas / request_s: a plan with DPn ran n replicas at once on their own card groups "
              "(sharing the host and links), so req/s is the throughput side of that split",
              f"# disp% = (max - min) / median of the repeats; over {doc['dispersion_gate_pct']:g} % is 'noisy' "
              f"(not ranked); tie = within {doc['dispersion_gate_pct']:g} % of the fastest",
              "# MB/rank/blk = bytes each rank sends per block at this dtype (mean over block kinds, as plan.py's "
              "bytes_per_layer_by_link)", f"# check: {doc['check_text']}"]
    return "\n".join(lines) + "\n"


def _g(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def _e(x) -> str:
    return "-" if x is None else f"{x:.2e}"
