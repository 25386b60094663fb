"""Evidence first: measured rows of the asked model on the asked hardware class (the shipped published tables, or
the user's own table in the same schema), printed above the prediction and ranked by their measurement."""

from __future__ import annotations

import math
import re
from pathlib import Path

from ditpar.errors import DitParError, InputError

# The shipped tables, found from the package root (scripts/ditpar/plan/decide -> the skill's root), so an installed
# skill finds them wherever it lies.
SHIPPED = Path(__file__).resolve().parents[4] / "benchmarks" / "published"
TIE = 0.05   # measured latencies closer than 5 % are not an order (the evaluation's rule: judge/evaluate.TIE)
DATE = re.compile(r"\b(20[0-9]{2}-[01][0-9]-[0-3][0-9])\b")
COMMIT = re.compile(r"\bcommit\s+([0-9a-f]{7,40})\b|@\s*([0-9a-f]{7,40})\b")


def _int(cell) -> int | None:
    try:
        v = float(str(cell).strip())
    except ValueError:
        return None
    return int(v) if math.isfinite(v) and v == int(v) and v >= 1 else None


def _seconds(cell) -> float | None:
    try:
        v = float(str(cell).strip())
    except ValueError:
        return None
    return v if math.isfinite(v) and v > 0 else None


def row_plan(row):
    """The Plan a row's degrees describe (ring run as K/V all-gather where other_config says so), else None."""
    from ditpar.plan.cost import Plan
    from ditpar.plan.inputs.tables import ALLGATHER_KV, DEGREES

    d = {k: _int(row[k]) for k in DEGREES}
    n = _int(row["n_devices"])
    if n is None or any(v is None for v in d.values()) or n % math.prod(d.values()):
        return None
    used = math.prod(d.values())
    ring = {"kv_allgather": d["ring"]} if ALLGATHER_KV.search(str(row["other_config"]).lower()) else {"ring": d["ring"]}
    return Plan(cfg=d["cfg"], ulysses=d["ulysses"], tp=d["tp"], pipefusion=d["pipefusion"], dp=n // used, **ring)


def _same_class(a, b) -> bool:
    from ditpar.plan.inputs.presets import normalize

    return normalize(a.accelerator) == normalize(b.accelerator) and normalize(a.interconnect) == normalize(b.interconnect)


def _when(row) -> str:
    """The row's date (a `date` column of a user table, else a date in its notes), else the source's commit."""
    text = f"{row.get('date', '')} {row.get('notes', '')}"
    m = DATE.search(text)
    if m:
        return f"dated {m.group(1)} in the table"
    c = COMMIT.search(str(row.get("notes", "")))
    return f"date not stated (source at commit {(c.group(1) or c.group(2))[:12]})" if c else "date not stated"


MAX_LATENCY_S = 1e7   # the bound of plan.py --ref-latency (judge/evaluate.MAX_LATENCY_S)


def _matching_rows(paths: list[Path], model, hw, left_out: dict | None = None) -> list[dict]:
    """Rows of the tables whose model resolves to `model` and whose machine is `hw`'s class (accelerator and
    interconnect), each with its file, plan and latency; rows that cannot be read as a plan are left out."""
    from ditpar.plan.inputs import presets
    from ditpar.plan.inputs.tables import read_rows

    out = []
    models: dict[str, str | None] = {}
    machines: dict[tuple[str, str], object] = {}
    for path in paths:
        for row in read_rows(path):
            cell = str(row["model"])
            if cell not in models:
                try:
                    models[cell] = presets.resolve_model(cell).name
                except DitParError:
                    models[cell] = None
            if models[cell] != model.name:
                continue
            key = (str(row["hardware"]), str(row["interconnect"]))
            if key not in machines:
                try:
                    machines[key] = presets.resolve_hardware(key[0], key[1] or None)
                except DitParError:
                    machines[key] = None
            rhw = machines[key]
            if rhw is None:
                continue
            if not _same_class(rhw, hw):
                continue
            plan, lat = row_plan(row), _seconds(row["latency_s"])
            why = ("degrees not stated or not dividing n_devices" if plan is None else
                   f"latency_s {row['latency_s']!r} is not a positive number up to {MAX_LATENCY_S:g} s"
                   if lat is None or lat > MAX_LATENCY_S else "")
            if why:
                if left_out is not None:
                    key = f"{Path(path).name}: {why}"
                    left_out[key] = left_out.get(key, 0) + 1
                continue
            out.append({"file": str(path), "row": row, "plan": plan, "latency_s": lat})
    return out


def _run_key(m: dict) -> tuple:
    from ditpar.plan.inputs.tables import ALLGATHER_KV

    r = m["row"]
    other = ALLGATHER_KV.sub("", str(r["other_config"])).rstrip("; ")
    return (m["file"], str(r["source_path"]), str(r["resolution_or_seq"]), str(r["steps"]), other)


def _compiled(settings: str) -> bool:
    """A run under torch.compile (a different stack from the eager runs the prediction is for)."""
    return bool(re.search(r"compile", re.sub(r"\b(?:no|without|not)\s+(?:torch\.)?compil\w*", "", settings, flags=re.I),
                          re.I))


def _document_single(rows: list[dict], key: tuple) -> list[float]:
    """The one-device row of the same document, shape and compile mode, when the run itself has none (a document
    that gives the baseline once for several tables)."""
    return [m["latency_s"] for m in rows if m["plan"].devices == 1 and _run_key(m)[:4] == key[:4]
            and _compiled(_run_key(m)[4]) == _compiled(key[4])]


def tables(given: list[str] | None) -> tuple[list[Path], str]:
    """(the CSV files to read, where they come from): the user's --evidence files, else the shipped folder."""
    if given:
        return [Path(p) for p in given], "your --evidence table" + ("s" if len(given) > 1 else "")
    if not SHIPPED.is_dir():
        return [], f"no shipped evidence found at {SHIPPED}"
    return sorted(SHIPPED.glob("*.csv")), "the shipped tables in benchmarks/published"


def find(given: list[str] | None, model, hw, devices: int, results) -> dict:
    """Measured runs of this model on this hardware class at `devices` cards (else the nearest count measured),
    each ranked by its measurement beside the prediction's rank, and whether the ranking agrees."""
    paths, origin = tables(given)
    if given:
        for p in paths:
            if p.suffix.lower() != ".csv":
                raise InputError(f"--evidence {p}: expected a CSV table in the published schema (benchmarks/published)")
    left_out: dict[str, int] = {}
    rows = _matching_rows(paths, model, hw, left_out)
    multi = sorted({m["plan"].devices for m in rows if m["plan"].devices > 1})
    out = {"source": origin, "devices": None, "runs": [], "agrees": None, "measured_order": [], "note": "",
           "left_out": left_out}
    if not multi:
        out["note"] = (origin if not paths else f"no measured row of {model.name} on {hw.accelerator} "
                       f"{hw.interconnect} in {origin}")
        return out
    at = devices if devices in multi else min(multi, key=lambda k: (abs(math.log(k / devices)), k))
    out["devices"] = at
    if at != devices:
        out["note"] = f"none measured at {devices} cards; the nearest count measured is {at}"
    predicted = {r.plan.name: (r.rank, r.latency_s) for r in results if r.feasible}
    runs: dict[tuple, list[dict]] = {}
    for m in rows:
        runs.setdefault(_run_key(m), []).append(m)
    for key, members in runs.items():
        here = [m for m in members if m["plan"].devices == at]
        if not here:
            continue
        one = [m["latency_s"] for m in members if m["plan"].devices == 1] or _document_single(rows, key)
        row = here[0]["row"]
        plans = []
        for m in sorted(here, key=lambda m: m["latency_s"]):
            rank, pred = predicted.get(m["plan"].name, (None, None))
            plans.append({"name": m["plan"].name, "measured_s": m["latency_s"],
                          "measured_speedup": one[0] / m["latency_s"] if one else None,
                          "predicted_rank": rank, "predicted_latency_s": pred})
        out["runs"].append({"file": Path(key[0]).name, "source": f"{row['source_repo']}:{row['source_path']}",
                            "framework": str(row["source_repo"]), "date": _when(row),
                            "settings": key[4], "shape": f"{key[2]}, {key[3] or '?'} steps",
                            "resolution": key[2], "steps": key[3], "compiled": _compiled(key[4]),
                            "one_device_s": one[0] if one else None, "plans": plans})
    out["runs"].sort(key=lambda r: (-len(r["plans"]), r["file"]))
    out["measured_order"] = measured_order(out["runs"])
    out["agrees"], out["verdict"] = verdict(out["runs"], predicted)
    return out


def measured_order(runs: list[dict]) -> list[str]:
    """Measured plans of the eager runs, fastest first, by their best measured speedup over their run's one-device
    row (runs without one left out), else in the largest run's order."""
    eager = [r for r in runs if not _compiled(r["settings"])] or runs
    best: dict[str, float] = {}
    for r in eager:
        for p in r["plans"]:
            if p["measured_speedup"]:
                best[p["name"]] = max(best.get(p["name"], 0.0), p["measured_speedup"])
    if best:
        return sorted(best, key=lambda n: -best[n])
    return [p["name"] for p in eager[0]["plans"]] if eager else []


def verdict(runs: list[dict], predicted: dict) -> tuple[bool | None, str]:
    """Whether the prediction's order of the measured plans puts the measured fastest first (within TIE), named."""
    lines, agree = [], []
    for r in runs:
        ranked = [p for p in r["plans"] if p["predicted_rank"] is not None]
        if len(ranked) < 2:
            continue
        fastest = ranked[0]
        pick = min(ranked, key=lambda p: p["predicted_rank"])
        ok = pick["measured_s"] <= fastest["measured_s"] * (1 + TIE)
        agree.append(ok)
        if not ok or fastest["predicted_rank"] > 3:
            lines.append(f"{r['file']}: measured fastest {fastest['name']} ({fastest['measured_s']:.3g} s) is "
                         f"predicted #{fastest['predicted_rank']}; the prediction's first of these, {pick['name']} "
                         f"(#{pick['predicted_rank']}), measured {pick['measured_s']:.3g} s "
                         f"({pick['measured_s'] / fastest['measured_s'] - 1:+.0%})")
    if not agree:
        return None, "no run measured two plans the ranking holds (another card count or form): nothing to compare"
    top = min(predicted, key=lambda n: predicted[n][0]) if predicted else None
    unmeasured = ("" if top is None or any(p["name"] == top for r in runs for p in r["plans"]) else
                  f"; its #1, {top}, was not measured in these tables")
    if all(agree):
        return True, (f"the ranking agrees: in each of {len(agree)} run(s) its first pick among the measured plans is "
                      "the measured fastest (within 5 %)" + ("; but " + "; ".join(lines) if lines else "") + unmeasured)
    return False, "the ranking disagrees: " + "; ".join(lines) + unmeasured


def render(ev: dict, model, hw, devices: int) -> str:
    """The evidence block printed above the prediction ('' when no table holds the box: one line saying so)."""
    gone = "".join(f"evidence: {n} row(s) of this model and machine left out: {k}\n"
                   for k, n in ev.get("left_out", {}).items())
    if not ev["runs"]:
        return (f"evidence: {ev['note']}\n" if ev["note"] else "") + gone
    n = ev["devices"]
    lines = [f"evidence first: measured {model.name} on {hw.accelerator} {hw.interconnect} at {n} cards "
             f"({ev['source']}; ranked by measurement; the prediction below is for your request)"
             + (f"; {ev['note']}" if ev["note"] else "")]
    from ditpar.plan.decide import evidence_speedups

    for r in ev["runs"]:
        one = f"; one device {r['one_device_s']:.4g} s" if r["one_device_s"] else ""
        settings = r["settings"] if len(r["settings"]) <= 90 else r["settings"][:87] + "..."
        judged = "" if "same_shape" not in r else (
            " [steps not stated: its speedups are not compared]" if not str(r["steps"]).strip() else
            " [another shape than your request: its speedups are not compared]" if not r["same_shape"] else
            " [torch.compile: the prediction prices eager; not judged]" if r["compiled"] else "")
        lines.append(f"  {r['framework']} ({r['source']}, {r['date']}): {r['shape']}; {settings or '-'}{one}{judged}")
        for i, p in enumerate(r["plans"], 1):
            sp = f"{p['measured_speedup']:.2f}x" if p["measured_speedup"] else "-"
            pr = f"#{p['predicted_rank']}" if p["predicted_rank"] else "not ranked"
            if p.get("predicted_speedup") is not None:
                pr += (f", {p['predicted_speedup']:.2f}x (range {p['range_low']:.2f}-{p['range_high']:.2f}x)"
                       + ("" if p["inside_range"] is None else ": inside" if p["inside_range"] else
                          ": outside"))
            lines.append(f"    {i:>2} {p['name']:<12} measured {p['measured_s']:>8.4g} s  speedup {sp:>6}  "
                         f"predicted {pr}")
        od = evidence_speedups.one_device_line(r)
        if od and od not in lines:   # runs of one document share their one-device row: said once
            lines.append(od)
    lines.append(f"  {ev['verdict']}")
    if ev.get("speedup_verdict"):
        lines.append(f"  {ev['speedup_verdict']}")
    if ev["measured_order"]:
        lines.append(f"  measured order (best measured speedup first): {', '.join(ev['measured_order'])}; a measurement "
                     "on this box class outranks the prediction")
    return "\n".join(lines) + "\n" + gone
