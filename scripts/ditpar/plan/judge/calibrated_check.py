"""After the user's own measurement: the point prediction of the other rows of a table once compute is calibrated on
one measured row (plan.py --ref-latency, with --ref-plan for a multi-card one), judged on the unseen rounds.

Each unseen round is held out in turn (its launch, overlap, per-call and mfu constants fitted without it). Within a
table's run (model, machine, shape, steps, compile mode, the same run), a reference row's measured latency (serial
stages off) fits the compute scale (`rank.calibrate`, exactly as plan.py does), and each other row is predicted with
it. Beside it, the uncalibrated prediction of the same target rows. Two references: the run's one-device row; and
the run's multi-card row with the fewest cards; each multi-card row in turn (every ordered pair of multi-card
rows of the run).
"""

from __future__ import annotations

import dataclasses
import math
import re

from ditpar.plan.judge.rounds import UNSEEN_ROUNDS, round_of

WITHIN = math.log2(1.25)
#: a row whose latency is one denoising step (xDiT's CogVideoX charts 'Latency/Step', diffusers' PR tables 'latency
#: per denoising step'): compared per request, its latency is the step's times the steps
PER_STEP = re.compile(r"latency per (?:denoising )?step|latency ?/ ?step|per-iteration", re.I)


def measured_request_s(r) -> float:
    """A row's measured latency as a request: a per-step row's times its steps (the serial stages are not in it)."""
    text = f"{r.row.get('other_config', '')} {r.row.get('notes', '')}"
    return r.measured * r.shape.steps if PER_STEP.search(text) else r.measured


def _median(xs: list[float]) -> float | None:
    v = sorted(xs)
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else 0.5 * (v[m - 1] + v[m])


def summary(errs: list[float]) -> dict:
    """n, share with |log2 error| within 25 % and the median |log2 error| of a list of signed log2 errors."""
    a = [abs(e) for e in errs]
    return {"n": len(a), "within_25pct": (sum(x <= WITHIN + 1e-12 for x in a) / len(a)) if a else None,
            "median_abs_log2": _median(a)}




def _pairs(rows, members: list[int]) -> dict[str, list[tuple[int, int]]]:
    """(reference, target) pairs within each run, per reference kind: its one-device row; the multi-card row with
    the fewest cards (every other row of the run a target, the one-device row included); every multi-card row in
    turn (every ordered pair of multi-card rows)."""
    from ditpar.plan.judge.evaluate import scenario_config
    from ditpar.plan.judge.heldout import reference_of, single_rows

    singles = single_rows(rows)
    one, fewest, multi = [], [], []
    runs: dict[tuple, list[int]] = {}
    every: dict[tuple, list[int]] = {}
    for i in members:
        r = rows[i]
        key = (r.source, r.cal_key, scenario_config(r.row["other_config"]))
        every.setdefault(key, []).append(i)
        if r.single or r.plan.devices // r.plan.dp < 2:
            continue
        ref = reference_of(rows, singles, i)
        if ref is not None:
            one.append((ref, i))
        runs.setdefault(key, []).append(i)
    for key, g in runs.items():
        multi += [(j, i) for j in g for i in g if i != j and rows[i].plan != rows[j].plan]
        j = min(g, key=lambda k: (rows[k].plan.devices, k))
        fewest += [(j, i) for i in every[key] if i != j and rows[i].plan != rows[j].plan]
    return {"one device": one, "fewest-card multi-card row": fewest, "one multi-card row": multi}


def check(frames: dict, tun) -> dict:
    """Per reference kind (one device, one multi-card row): calibrated and uncalibrated |log2 error| of the same
    target rows, pooled and per round; the signed calibrated residuals (for the range) per stratum."""
    from ditpar.plan.cost import predict
    from ditpar.plan.decide.rank import calibrate
    from ditpar.plan.inputs.frameworks import tp_host_tunables
    from ditpar.plan.judge.conformal import _framework, borrowed_machine, collection_of, stratum
    from ditpar.plan.judge.evaluate import row_framework
    from ditpar.plan.judge.heldout import derive_mfu, evaluate_heldout

    res = evaluate_heldout(frames, tun, by="round")
    rows = res["row_list"]
    out: dict[str, dict] = {k: {"cal": [], "uncal": [], "uniform": [], "by_round": {}, "failed": 0, "records": []}
                            for k in ("one device", "fewest-card multi-card row", "one multi-card row")}
    for sr in res["sources"]:
        rnd = sr.source
        if rnd not in UNSEEN_ROUNDS:
            continue
        c = sr.constants
        mfu = derive_mfu(rows, rnd, tun, "round")
        base = dataclasses.replace(tun, launch_us=c["launch_us"], overlap_efficiency=c["overlap_efficiency"],
                                   call_us=c["call_us"])
        members = [i for i, r in enumerate(rows) if round_of(r.source) == rnd]
        coll = collection_of([x for x in rows if round_of(x.source) != rnd])

        def tun_of(i, scale=None, base=base, mfu=mfu):
            r = rows[i]
            s = scale if scale is not None else base.compute_scale * (r.hw.mfu / mfu[r.hw.name]
                                                                      if r.hw.name in mfu else 1.0)
            return tp_host_tunables(dataclasses.replace(base, compute_scale=s), row_framework(r.row), r.plan)

        def lat(i, t):
            r = rows[i]
            return predict(r.model, r.hw, r.shape, r.plan, t).latency_s + r.serial_s

        scales: dict[int, float | None] = {}
        for kind, pairs in _pairs(rows, members).items():
            d = out[kind]
            for j, i in pairs:
                if j not in scales:
                    rj = rows[j]
                    try:
                        scales[j] = calibrate(rj.model, rj.hw, rj.shape, measured_request_s(rj) - rj.serial_s, tun_of(j),
                                              rj.plan).compute_scale
                    except Exception:  # noqa: BLE001 - the measured row below the modelled non-compute time
                        scales[j] = None
                if scales[j] is None:
                    d["failed"] += 1
                    continue
                r = rows[i]
                mi = measured_request_s(r)
                ec = math.log2(lat(i, tun_of(i, scales[j])) / mi)
                eu = math.log2(lat(i, tun_of(i)) / mi)
                ej = math.log2(lat(j, tun_of(j)) / measured_request_s(rows[j]))
                d["cal"].append(ec)
                d["uncal"].append(eu)
                d["uniform"].append(eu - ej)   # one factor on the whole latency: target x measured / predicted ref
                d["by_round"].setdefault(rnd, {"cal": [], "uncal": []})
                d["by_round"][rnd]["cal"].append(ec)
                d["by_round"][rnd]["uncal"].append(eu)
                d["records"].append({"round": rnd, "table": r.source, "reference": rows[j].plan.name,
                                     "target": r.plan.name, "residual": -ec * math.log(2),
                                     "uncalibrated_log2": eu, "one_factor_log2": eu - ej,
                                     "stratum": stratum(r.model.name, r.hw.accelerator, _framework(r),
                                                        borrowed_machine(r.hw), coll)})
    return {k: {"calibrated": summary(v["cal"]), "uncalibrated": summary(v["uncal"]),
                "uniform_scale": summary(v["uniform"]), "failed": v["failed"],
                "by_round": {rnd: {"calibrated": summary(x["cal"]), "uncalibrated": summary(x["uncal"])}
                             for rnd, x in v["by_round"].items()},
                "spread": spread(v["records"]), "records": v["records"]} for k, v in out.items()}


def spread(recs: list[dict], level: float = 0.8) -> dict:
    """Per stratum (and pooled): n, the conformal q (ln) of the calibrated residuals and its coverage one round out."""
    from ditpar.plan.judge.conformal import loro_coverage, quantile_table

    if not recs:
        return {}
    q = quantile_table(recs, level)
    held = loro_coverage(recs, level)
    return {k: {"n": v["n"], "q": v["q"], "own": v["own"], "held_out": held.get(k)} for k, v in q.items()}


def render(rep: dict, range_q: dict | None = None) -> str:
    """The calibrated-check table: per reference kind, calibrated beside uncalibrated on the same rows."""
    from ditpar.plan.judge.conformal import WIDENED

    lines = ["calibrated point prediction on the unseen rounds (each round held out; compute calibrated on one "
             "measured row of the same run, as plan.py --ref-latency / --ref-plan):",
             f"  {'reference':<28}{'rows':>6}  {'calibrated: within 25 %':>24}  {'median |log2|':>13}  "
             f"{'uncalibrated: within 25 %':>26}  {'median |log2|':>13}  no fit  one factor on the whole latency"]
    for kind, d in rep.items():
        c, u = d["calibrated"], d["uncalibrated"]
        lines.append(f"  {kind:<28}{c['n']:>6}  {_f(c['within_25pct']):>24}  {_f(c['median_abs_log2'], 3):>13}  "
                     f"{_f(u['within_25pct']):>26}  {_f(u['median_abs_log2'], 3):>13}  {d['failed']:>6}  "
                     f"{_f(d['uniform_scale']['within_25pct'])} / {_f(d['uniform_scale']['median_abs_log2'], 3)}")
        for rnd, x in d["by_round"].items():
            lines.append(f"    {rnd:<34}{x['calibrated']['n']:>4}  {_f(x['calibrated']['within_25pct'])} / "
                         f"{_f(x['calibrated']['median_abs_log2'], 3)}  uncalibrated {_f(x['uncalibrated']['within_25pct'])}"
                         f" / {_f(x['uncalibrated']['median_abs_log2'], 3)}")
    lines.append("  spread of the calibrated residuals at 0.8 (q, ln; held-out coverage one round out) per stratum:")
    for kind, d in rep.items():
        for key, v in d["spread"].items():
            h = v["held_out"]
            ship = "" if not range_q or key not in range_q else f"  (shipped speedup range q {range_q[key]:.3f})"
            lines.append(f"    {kind:<28}{key:<26} n {v['n']:>4}  q {_f(v['q'], 3)}"
                         f"{'' if v['own'] else ' (pooled q, widened)' if key in WIDENED else ' (pooled q)'}  held out "
                         f"{'-' if h is None else _f(h['coverage']) + ' (' + str(h['n']) + ')'}{ship}")
    return "\n".join(lines) + "\n"


def _f(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"
