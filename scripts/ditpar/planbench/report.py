"""plan_bench's request (model, shape, short list) and outputs (table, JSON body, CSV frame)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ditpar.errors import InputError

CSV_COLUMNS = ["name", "block_ms", "step_s", "request_s", "dispersion_pct", "bytes_per_rank_per_block",
               "max_abs_err", "tolerance", "verdict", "cfg", "ulysses", "ring", "kv_allgather", "tp", "pipefusion",
               "dp", "elements_per_rank_per_block", "element_bytes"]


def read_plan_json(path: str) -> dict:
    """plan.py --json output: its short list, model name and shape; anything else is an InputError."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read plan.py --json output ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != "dit-parallel-opt/plan/v1":
        raise InputError(f"{path}: not a plan.py --json document (schema dit-parallel-opt/plan/v1 expected)")
    short = doc.get("short_list")
    if not isinstance(short, list) or not short or not all(isinstance(x, str) for x in short):
        raise InputError(f"{path}: key 'short_list' must be a non-empty list of plan names")
    for key in ("model", "shape"):
        if key not in doc:
            raise InputError(f"{path}: key {key!r} missing")
    return doc


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
             f"{'plan':<16}{'block_ms':>10}{'step_s':>10}{'request_s':>11}{'disp%':>7}{'MB/rank/blk':>13}"
             f"{'max_abs_err':>13}  verdict"]
    for r in doc["plans"]:
        mb = r.get("bytes_per_rank_per_block")
        lines.append(f"{r['name']:<16}{_f(r.get('block_ms'), 3):>10}{_f(r.get('step_s'), 4):>10}"
                     f"{_f(r.get('request_s'), 3):>11}{_f(r.get('dispersion_pct'), 1):>7}"
                     f"{_f(mb / 1e6 if mb is not None else None, 3):>13}"
                     f"{_e(r.get('max_abs_err')):>13}  "
                     f"{r['verdict']}" + (f": {r['reason']}" if r.get("reason") else ""))
    lines += [f"# block_ms = measured step / {doc['layers']} blocks; step_s = sum over block kinds of layers x "
              "measured block time (median of repeats, slowest rank); request_s = step_s x "
              f"{doc['steps']} steps: EXTRAPOLATED from one block of each kind (no VAE, text encoder, "
              "scheduler or CFG latent gather)",
              f"# disp% = (max - min) / median of the repeats; over {doc['dispersion_gate_pct']:g} % is 'noisy' "
              f"(not ranked); tie = within {doc['dispersion_gate_pct']:g} % of the fastest",
              "# MB/rank/blk = bytes each rank sends per block at this dtype (mean over block kinds, as plan.py's "
              "bytes_per_layer_by_link)", f"# check: {doc['check_text']}"]
    return "\n".join(lines) + "\n"


def _e(x) -> str:
    return "-" if x is None else f"{x:.2e}"
