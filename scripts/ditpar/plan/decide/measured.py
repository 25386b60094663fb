"""plan.py --measured: plan_bench.py's measured plans replace their predictions, order first by their
measured times, and calibrate the unmeasured plans (a compute scale and a link scale fitted to them)."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from ditpar import formats, limits
from ditpar.errors import InputError

SCHEMA = "dit-parallel-opt/plan_bench/v1"
MAX_SECONDS = 1e7   # a measured step or request: at most 116 days (no benchmark runs that long; a figure in us?)
VERDICTS = ("", "fastest", "tie", "slower", "noisy", "wrong", "not-built")   # ditpar/planbench/timing.py, app.py
SKIPPED = ("wrong", "not-built", "noisy")   # rows whose time is not a measurement of the plan


@dataclass(frozen=True)
class Field:
    """One key --measured reads: its type and range, and whether it may be absent or null."""

    kind: str                       # text, int, bool, seconds, percent, choice
    lo: float = 0.0
    hi: float = 0.0
    required: bool = True
    null: bool = False              # JSON null allowed (plan_bench.py writes null for a value it has not got)
    choices: tuple = ()

    def describe(self) -> str:
        what = {"text": "a non-empty text", "bool": "true or false",
                "int": f"an integer {int(self.lo)}..{int(self.hi)}",
                "seconds": f"seconds in (0, {self.hi:g}]", "percent": f"a percentage in [0, {self.hi:g}]",
                "choice": "one of " + ", ".join(repr(c) for c in self.choices)}[self.kind]
        return what + (" or null" if self.null else "")


#: the schema of a plan_bench.py --json document as --measured reads it: every key read, its type and range
#: (other keys are not read). Sizes carry their plan.py flag's bound (--devices, --tokens).
DOCUMENT = {
    "model": Field("text"),
    "world": Field("int", 1, limits.MAX_DEVICES),
    "device": Field("text", required=False),      # names the box in the output
    "backend": Field("text", required=False),
    "dtype": Field("text", required=False),
}
SHAPE = {"tokens": Field("int", 1, limits.MAX_TOKENS), "cfg": Field("bool")}
#: one row of 'plans': a used row (verdict not wrong, not-built or noisy, step_s given) needs request_s too
ROW = {
    "name": Field("text"),
    "verdict": Field("choice", choices=VERDICTS, required=False, null=True),
    "step_s": Field("seconds", hi=MAX_SECONDS, required=False, null=True),
    "request_s": Field("seconds", hi=MAX_SECONDS, required=False, null=True),
    "dispersion_pct": Field("percent", hi=1e6, required=False, null=True),   # (max - min) / median of the repeats
}


def _norm(name: str) -> str:
    return " ".join(str(name).lower().split())


def _check(value, spec: Field, where: str):
    """value against its field: the value, or an InputError naming where and what was expected."""
    if value is None and spec.null:
        return None
    kind = spec.kind
    ok = False
    if kind == "text":
        ok = isinstance(value, str) and bool(value.strip())
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "choice":
        ok = isinstance(value, str) and value in spec.choices
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and spec.lo <= value <= spec.hi
    elif kind in ("seconds", "percent"):
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
              and (value > 0 if kind == "seconds" else value >= 0) and value <= spec.hi)
    if not ok:
        raise InputError(f"{where} must be {spec.describe()}, got {value!r}")
    return value


def _fields(table: dict, specs: dict[str, Field], where: str) -> dict:
    """The keys of one table that --measured reads, each checked (a missing required key is named)."""
    out = {}
    for key, spec in specs.items():
        if key not in table:
            if spec.required:
                raise InputError(f"{where}has no key '{key}' ({spec.describe()})")
            continue
        out[key] = _check(table[key], spec, f"{where}key '{key}'")
    return out


def read(path: str, model, shape, devices: int) -> dict[str, dict]:
    """Measured rows by normalised plan name, from a plan_bench.py --json document of this very request;
    every key read is checked against DOCUMENT, SHAPE and ROW (one InputError naming file, plan and key)."""
    try:
        doc = formats.load_json(path)   # a FIFO once, a device refused, hostile nesting and integers named
    except InputError as exc:
        raise InputError(f"--measured {exc}") from None
    where = f"--measured {path}: "
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InputError(f"{where}not a plan_bench.py --json document (schema {SCHEMA} expected)")
    head = _fields(doc, DOCUMENT, where)
    if not isinstance(doc.get("shape"), dict):
        raise InputError(f"{where}key 'shape' must be a table with tokens and cfg, got {doc.get('shape')!r}")
    sh = _fields(doc["shape"], SHAPE, f"{where}shape: ")
    want = {"model": model.name, "world": devices, "tokens": shape.tokens, "cfg": shape.cfg}
    got = {"model": head["model"], "world": head["world"], "tokens": sh["tokens"], "cfg": sh["cfg"]}
    diff = [f"{k} {got[k]!r} (this request: {want[k]!r})" for k in want if got[k] != want[k]]
    if diff:
        raise InputError(f"{where}measured another request: " + "; ".join(diff))
    plans = doc.get("plans")
    if not isinstance(plans, list) or not plans:
        raise InputError(f"{where}key 'plans' must be a non-empty list of measured plans, got "
                         f"{type(plans).__name__ if plans is not None else 'nothing'}")
    on = f"{head.get('device', '?')} ({head.get('backend', '?')}, {head.get('dtype', '?')})"
    rows: dict[str, dict] = {}
    first: dict[str, str] = {}
    for i, r in enumerate(plans):
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not r["name"].strip():
            raise InputError(f"{where}plans[{i}] has no 'name' (a plan name as plan.py prints it)")
        at = f"{where}plans[{i}] ({r['name']}): "
        row = _fields(r, ROW, at)
        key = _norm(row["name"])
        if key in first:
            raise InputError(f"{at}the same plan as {first[key]}; each plan is measured once (one document per run)")
        first[key] = f"plans[{i}] ({r['name']})"
        if row.get("verdict") in SKIPPED or row.get("step_s") is None:
            continue
        if row.get("request_s") is None:
            raise InputError(f"{at}has step_s but no request_s ({ROW['request_s'].describe()})")
        rows[key] = {**r, "_on": on}
    if not rows:
        raise InputError(f"{where}no plan with a usable measurement (every plan is wrong, noisy or "
                         "not built): nothing to mark or calibrate")
    return rows


def _parts(r, steps: int) -> tuple[float, float, float]:
    """(compute, exposed communication, the rest) of one predicted step."""
    bd = r.breakdown
    comp, comm = bd.compute_s / steps, bd.exposed_comm_s / steps
    return comp, comm, max(0.0, bd.step_s - comp - comm)


def fit(points: list[tuple[float, float, float, float]]) -> tuple[float, float]:
    """(compute scale, communication scale) so that a*compute + b*comm + rest matches the measured steps:
    least squares with both scales > 0; one point, or a fit that leaves one non-positive, gives one common scale."""
    common = sum(y - h for _c, _x, h, y in points) / sum(c + x for c, x, _h, _y in points)
    if len(points) < 2:
        return common, common
    scc = sum(c * c for c, _x, _h, _y in points)
    sxx = sum(x * x for _c, x, _h, _y in points)
    scx = sum(c * x for c, x, _h, _y in points)
    scy = sum(c * (y - h) for c, _x, h, y in points)
    sxy = sum(x * (y - h) for _c, x, h, y in points)
    det = scc * sxx - scx * scx
    if det <= 1e-12 * max(scc * sxx, 1e-300):
        return common, common
    a, b = (scy * sxx - sxy * scx) / det, (sxy * scc - scy * scx) / det
    return (a, b) if a > 0 and b > 0 else (common, common)


def apply(path: str, results, model, shape) -> dict:
    """Mark measured plans, fit the two scales on them, calibrate every feasible plan; order measured first."""
    rows = read(path, model, shape, results[0].plan.devices)
    feas = [r for r in results if r.feasible]
    by = {_norm(r.plan.name): r for r in results}
    unknown = [rows[k]["name"] for k in rows if k not in by]
    if unknown:
        raise InputError(f"--measured {path}: plan(s) {', '.join(unknown)} are not plans of this request "
                         f"(e.g. {', '.join(r.plan.name for r in feas[:6])})")
    steps = shape.steps
    pts = {k: (*_parts(by[k], steps), float(rows[k]["step_s"])) for k in rows}
    a, b = fit(list(pts.values()))
    if not (a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)):
        # a measured step below what the model holds fixed (host-bound time: no scale of compute or links moves
        # it) fits a scale <= 0, and every calibrated latency would come out negative: refused, never printed
        low = min(pts, key=lambda k: pts[k][3] - pts[k][2])
        c, x, h, y = pts[low]
        raise InputError(f"--measured {path}: plan {by[low].plan.name}: step_s {y:.4g} s is below the part of its "
                         f"predicted step no compute or link scale moves ({h:.4g} s of host-bound time; compute "
                         f"{c:.4g} s, exposed communication {x:.4g} s): the fit gives scale(s) {a:.3g}, {b:.3g}; was "
                         "it measured on this box, in seconds, for this request?")
    held = []
    if len(pts) >= 3:   # each measured plan predicted from a fit on the others
        for k, (c, x, h, y) in pts.items():
            ha, hb = fit([p for kk, p in pts.items() if kk != k])
            held.append({"name": by[k].plan.name, "measured_step_s": y, "held_out_step_s": ha * c + hb * x + h,
                         "error_pct": 100.0 * ((ha * c + hb * x + h) / y - 1)})
    order = []
    for r in feas:
        c, x, h = _parts(r, steps)
        k = _norm(r.plan.name)
        cal = (a * c + b * x + h) * steps + (r.breakdown.latency_s - r.breakdown.step_s * steps)
        rec = {"name": r.plan.name, "measured": k in rows, "calibrated_latency_s": cal,
               "predicted_latency_s": r.latency_s,
               "measured_request_s": float(rows[k]["request_s"]) if k in rows else None,
               "measured_step_s": float(rows[k]["step_s"]) if k in rows else None,
               "dispersion_pct": rows[k].get("dispersion_pct") if k in rows else None}
        r.measured = rec
        order.append(rec)
    dp = {r.plan.name: r.plan.dp > 1 for r in feas}   # as plan.py ranks: replicas after plans serving one request
    order.sort(key=lambda m: (not m["measured"], dp[m["name"]],
                              m["measured_request_s"] if m["measured"] else m["calibrated_latency_s"]))
    on = sorted({r["_on"] for r in rows.values()})
    return {"file": path, "measured_on": on[0] if len(on) == 1 else on, "compute_scale": a, "comm_scale": b, "plans_fitted": len(pts), "held_out": held,
            "order": order, "note": "measured plans ordered by their measured request time (plan_bench.py: "
            "synthetic blocks, extrapolated to layers x steps); the others by the prediction with compute x"
            f"{a:.3g} and exposed communication x{b:.3g} fitted to the measured plans"}


def one_device(m: dict, results, single, steps: int) -> str:
    """The conclusion's sentence when, after --measured, one device beats every parallel plan (a measured plan by
    its measured request time, the others calibrated): one device is priced with the same fitted compute scale.
    `single` is the one-device predicted Breakdown. '' when a plan that splits the request is faster."""
    feas = [r for r in results if r.feasible]
    exact = bool(feas) and getattr(feas[0], "exact", True)   # the ranking's class: exact plans unless approximate lead
    dp = {r.plan.name: r.plan.dp > 1 or (exact and not getattr(r, "exact", True)) for r in feas}
    split = [o for o in m["order"] if not dp.get(o["name"], True)]
    if not split or single is None or not math.isfinite(single.latency_s):
        return ""
    c = single.compute_s / steps
    h = max(0.0, single.step_s - c - single.exposed_comm_s / steps)
    one = (m["compute_scale"] * c + h) * steps + (single.latency_s - single.step_s * steps)
    times = {o["name"]: (o["measured_request_s"] if o["measured"] else o["calibrated_latency_s"], o["measured"])
             for o in split}
    name = min(times, key=lambda k: times[k][0])
    best, was = times[name]
    if not best > one:
        return ""
    n = results[0].plan.devices
    kind = "exact parallel plan" if exact and any(not getattr(r, "exact", True) for r in feas) else "parallel plan"
    return (f" Measured: one device beats every {kind}: the fastest that splits the request, {name}, "
            f"{'measured' if was else 'calibrated on the measurements'} at {best:.4g} s against {one:.4g} s on one "
            f"device (its prediction with the fitted compute scale x{m['compute_scale']:.3g}; {one / best:.2g}x). "
            f"Run each request on one card: DP{n} ({n} replicas) serves {n} requests at once; the plans above are "
            "ordered for a request that must be split.")


def render(m: dict, top: int) -> str:
    lines = ["", f"measured (--measured {m['file']}, on {m['measured_on']}): {m['note']}",
             f"{'plan':<18}{'source':>11}{'request_s':>11}{'predicted_s':>13}"]
    shown = [o for o in m["order"] if o["measured"]] + [o for o in m["order"] if not o["measured"]][:top]
    for o in shown:
        val = o["measured_request_s"] if o["measured"] else o["calibrated_latency_s"]
        lines.append(f"{o['name']:<18}{'measured' if o['measured'] else 'calibrated':>11}{val:>11.4g}"
                     f"{o['predicted_latency_s']:>13.4g}")
    for h in m["held_out"]:
        lines.append(f"  held out {h['name']}: measured step {h['measured_step_s']:.4g} s, calibrated on the others "
                     f"{h['held_out_step_s']:.4g} s ({h['error_pct']:+.1f} %)")
    if len(m["order"]) and m["plans_fitted"] < 3:
        lines.append(f"  {m['plans_fitted']} measured plan(s): no held-out check of the calibration (needs 3)")
    return "\n".join(lines) + "\n"


def bench_command(args, short: list, devices: int) -> str:
    """The plan_bench.py command that measures the short list of this request (same model and shape flags)."""
    if len(short) < 2:
        return ""
    flags = [f"--model {shlex.quote(args.model)}" if args.model else f"--model-file {shlex.quote(args.model_file)}"]
    for flag, v in (("--resolution", args.resolution), ("--frames", args.frames), ("--steps", args.steps),
                    ("--heads", args.heads), ("--kv-heads", args.kv_heads), ("--layers", args.layers),
                    ("--tokens", args.tokens)):
        if v is not None:
            flags.append(f"{flag} {shlex.quote(str(v))}")
    if args.no_cfg:
        flags.append("--no-cfg")
    plans = " ".join(shlex.quote(r.plan.name) for r in short if r.plan.pipefusion == 1 and r.plan.attn2d == 1)
    if not plans:
        return ""
    return (f"Measure them without weights on these cards: torchrun --nproc-per-node {devices} scripts/plan_bench.py "
            f"{' '.join(flags)} --plans {plans} --json > measured.json, then add --measured measured.json here.")


def extend_payload(payload: dict, results, m: dict) -> None:
    """JSON: the fit and order under 'measured'; per plan measured (bool), measured_request_s, calibrated_latency_s."""
    payload["measured"] = m
    for rec, r in zip(payload["plans"], results, strict=True):
        got = getattr(r, "measured", None) or {}
        rec["measured"] = bool(got.get("measured"))
        rec["measured_request_s"] = got.get("measured_request_s")
        rec["calibrated_latency_s"] = got.get("calibrated_latency_s")
