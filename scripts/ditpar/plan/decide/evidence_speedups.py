"""Evidence against the printed range: each measured speedup of the evidence block beside the end-to-end speedup
and range plan.py prints for the same plan, and whether it falls inside (a check of the range, not only the order)."""

from __future__ import annotations

import math

from ditpar.errors import InputError

SLACK = 1e-9   # a measured speedup equal to a printed bound (to its digits) is inside


def _shape_of(run: dict) -> tuple[tuple[int, int, int], int | None] | None:
    """((width, height, frames), steps) of an evidence run within the bounds plan.py takes for a request (steps None
    when not stated or out of them); None when its resolution cannot be read or is out of them."""
    from ditpar import limits
    from ditpar.plan.cost.shape import parse_resolution

    try:
        w, h, f = parse_resolution(run["resolution"])
        for side in (w, h):
            limits.integer(side, "resolution", 1, limits.MAX_PIXELS_SIDE)
        frames = limits.integer(f or 1, "frames", 1, limits.MAX_FRAMES)
    except InputError:
        return None
    try:
        steps = limits.integer(str(run["steps"]).strip(), "steps", 1, limits.MAX_STEPS)
    except InputError:
        steps = None
    return (w, h, frames), steps


def same_shape(run: dict, shape) -> bool:
    """Whether an evidence run is of the request's shape: pixels, frames (1 for images) and steps."""
    got = _shape_of(run)
    return got is not None and got == ((shape.width, shape.height, max(1, shape.frames)), shape.steps)


def judge(ev: dict, ranges: dict[str, dict], shape, one_device_e2e_s: float | None) -> None:
    """Annotate `ev` in place: per run `same_shape` and the predicted one-device seconds; per measured plan of a run
    of the request's shape the predicted end-to-end speedup and its range, and `inside_range` for an eager run (a
    compiled one, `compiled` from evidence.find, is shown, not judged); `speedups_agree` and `speedup_verdict`."""
    judged: list[tuple[dict, dict]] = []
    shown = 0
    for run in ev.get("runs", []):
        run["same_shape"] = same_shape(run, shape)
        comparable = run["same_shape"] and not run["compiled"]
        run["one_device_predicted_s"] = one_device_e2e_s if run["same_shape"] else None
        for p in run["plans"]:
            e = ranges.get(p["name"]) if run["same_shape"] else None   # the ranges are for the request's shape
            p["predicted_speedup"] = e["speedup"] if e else None
            p["range_low"], p["range_high"] = (e["low"], e["high"]) if e else (None, None)
            ms = p["measured_speedup"]
            p["inside_range"] = None
            if e is None or not ms:
                continue
            if not comparable:
                shown += 1
                continue
            p["inside_range"] = e["low"] * (1 - SLACK) <= ms <= e["high"] * (1 + SLACK)
            judged.append((run, p))
    ev["speedups_agree"], ev["speedup_verdict"] = _verdict(judged, shown, shape, ev.get("runs", []))


def ask_for(run: dict) -> str:
    """The plan.py flags that ask for an evidence run's own shape ('' when its resolution cannot be read)."""
    got = _shape_of(run)
    if got is None:
        return ""
    (w, h, f), steps = got
    return " ".join(x for x in (f"--resolution {w}x{h}", f"--frames {f}" if f > 1 else "",
                                f"--steps {steps}" if steps else "") if x)


def _where(p: dict) -> str:
    return "below" if p["measured_speedup"] < p["range_low"] else "above"


def _verdict(judged: list[tuple[dict, dict]], shown: int, shape, runs: list[dict]) -> tuple[bool | None, str]:
    frames = f"x{shape.frames}" if shape.frames > 1 else ""
    ask = f"{shape.width}x{shape.height}{frames}, {shape.steps} steps"
    if not judged:
        other = next((ask_for(r) for r in runs if not r["same_shape"] and ask_for(r)), "")
        why = (f"no eager run of your shape ({ask}) measured a plan this answer prices with a one-device row"
               + (f"; {shown} measured speedup(s) of a compiled run are not judged" if shown else "")
               + (f"; to test the printed range on the rows above, ask for their shape ({other})" if other else ""))
        return None, f"speedups: {why}"
    out = [p for _, p in judged if not p["inside_range"]]
    if not out:
        return True, (f"speedups agree: each of {len(judged)} measured speedup(s) of your shape falls inside the "
                      "range printed for its plan")
    named = "; ".join(f"{p['name']} measured {p['measured_speedup']:.2f}x against {p['predicted_speedup']:.2f}x "
                      f"predicted ({_where(p)} the range {p['range_low']:.2f}-{p['range_high']:.2f}x)" for p in out)
    return False, (f"speedups disagree: {len(out)} of {len(judged)} measured speedup(s) of your shape fall outside "
                   f"the printed range: {named}; the measurement outranks the prediction")


def one_device_line(run: dict) -> str:
    """The run's one-device seconds against the prediction's, for a run of the request's shape ('' otherwise)."""
    got, pred = run.get("one_device_s"), run.get("one_device_predicted_s")
    if not (got and pred and math.isfinite(pred) and pred > 0):
        return ""
    return (f"  one device: measured {got:.4g} s against {pred:.4g} s predicted end to end (measured / predicted "
            f"{got / pred:.2f}); --ref-latency {got:.4g} prices every plan from it if you run with that run's settings")
