"""Score published latency tables with the cost model and measure how well it ranks them.

`score_table` adds predicted_latency_s and score_note to rows in the calibration schema;
`evaluate_tables` groups scored rows into scenarios and reports Kendall tau, pairwise order
accuracy, top-1 hits and the error of predicted speedups, beside a rule-of-thumb baseline.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ditpar.errors import DitParError, InputError
from ditpar.plan.cost import Plan, Tunables, make_shape, parse_resolution, predict
from ditpar.plan.inputs.tables import ALLGATHER_KV, COLUMNS, DEGREES, OPTIONAL_DEGREES, read_table  # noqa: F401 (the schema's home)

SCENARIO_KEY = ["source_path", "model", "hardware", "interconnect", "n_devices", "resolution_or_seq", "steps",
                "other_config"]
TIE = 0.05  # measured latencies closer than 5 % are not an order (chart reading error is 2-5 %)
MAX_LATENCY_S = 1e7   # a measured request of at most 116 days: the bound of plan.py --ref-latency (inf or 1e308
                      # would be taken as a measurement, and --calibrate overflowed on it)
LATENCY_WANTED = f"a positive number up to {MAX_LATENCY_S:g} s"

RULE_OF_THUMB = (
    "1. Use CFG parallel (degree 2) whenever the model runs CFG.",
    "2. On NVLink-class links (NVLink, HCCS) give the rest to Ulysses, as high as heads allow.",
    "3. On PCIe give the rest to PipeFusion and ring; prefer them over Ulysses.",
    "4. Avoid tensor parallel.",
    "5. Break ties by the larger of those degrees.",
)


def _int_or_none(text: str) -> int | None:
    text = str(text).strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value == int(value) and value >= 1 else None


def _steps(text: str, model) -> tuple[int, str]:
    value = _int_or_none(text)
    if value is not None:
        return value, ""
    m = re.search(r"(\d+)", str(text))
    if m:
        return int(m.group(1)), f"steps '{text}': used {m.group(1)}"
    return int(model.default_steps), f"steps '{text}': used the preset default {model.default_steps}"


def scenario_config(other_config: str) -> str:
    """other_config without the K/V all-gather marker: that marker names a plan, not a setting, so
    all-gather rows share a scenario with the other plans of their table."""
    return ALLGATHER_KV.sub("", str(other_config)).rstrip("; ")


#: a mention of compile that says it was not used or not stated ("no compile", "compile not stated", "config and
#: compile mode not stated", "not stated whether compiled", "pytorch vs torch.compile ... not said", "compile off",
#: "torch.compile disabled", "compiled=False"): eager is the default, so such a row is not compiled
NOT_COMPILED = re.compile(r"\b(?:no|without|not)\s+(?:torch\.)?compil\w*|\bcompil\w*(?:\s+mode)?\s+not\s+stated"
                          r"|not\s+stated\s+whether\s+compil\w*|\bvs\.?\s+(?:torch\.)?compil\w*"
                          r"|\bcompil\w*\s*(?:[:=]\s*)?(?:off|disabled|false|none|no)\b", re.I)


def compiled(other_config: str) -> bool:
    """Whether a row ran under torch.compile (or says so): a mention that is not negated (NOT_COMPILED)."""
    return "compil" in NOT_COMPILED.sub("", str(other_config)).lower()


def row_plan(row, model, hw) -> tuple[Plan | None, str]:
    """The plan a row describes, or None with the reason it cannot be scored."""
    other = str(row["other_config"])
    low = other.lower()
    if "distrifusion" in low:
        return None, "not scored: DistriFusion (displaced patch parallel) is outside the plan space"
    degrees = {d: _int_or_none(row[d]) for d in DEGREES}
    degrees.update({d: _int_or_none(str(row.get(d, "") or "1")) for d in OPTIONAL_DEGREES})
    absent = [d for d, v in degrees.items() if v is None]
    if absent:
        return None, f"not scored: degree(s) {', '.join(absent)} not stated"
    n = _int_or_none(row["n_devices"])
    if n is None:
        return None, f"not scored: n_devices {row['n_devices']!r} is not a positive integer"
    used = math.prod(degrees.values())
    if n % used:
        return None, f"not scored: degrees multiply to {used}, which does not divide n_devices={n}"
    warm = re.search(r"warmup(?: step)?\s*=\s*(\d+)", low)
    if ALLGATHER_KV.search(low):   # ring degree run as K/V all-gather (cache-dit ring_rotate_method=allgather)
        return Plan(cfg=degrees["cfg"], ulysses=degrees["ulysses"], kv_allgather=degrees["ring"], tp=degrees["tp"],
                    attn2d=degrees["attn2d"], pipefusion=degrees["pipefusion"], dp=n // used,
                    warmup=int(warm.group(1)) if warm else 1), ""
    return Plan(cfg=degrees["cfg"], ulysses=degrees["ulysses"], ring=degrees["ring"], tp=degrees["tp"],
                attn2d=degrees["attn2d"], pipefusion=degrees["pipefusion"], dp=n // used,
                warmup=int(warm.group(1)) if warm else 1), ""


#: a row whose other_config says classifier-free guidance is off (one branch per step) although the preset runs it;
#: "no CFG parallel" is about the plan, not the guidance, and does not match
NO_CFG = re.compile(r"\bno cfg\b(?!\s+parallel)|\bwithout cfg\b(?!\s+parallel)|does not exercise cfg"
                    r"|\b(?:cfg|guidance)\s*(?:[:=]\s*)?(?:off|disabled|false|none)\b|\b(?:one|single) (?:cfg )?branch\b",
                    re.I)


def row_context(row):
    """(model, hw, shape, plan, notes) of a row, or (None, ..., reason) when it cannot be scored."""
    from ditpar.plan.inputs import model_config, presets

    read: list[str] = []   # what a config folder in the model cell left to guesses
    try:
        model = model_config.resolve(str(row["model"]), warn=read.append)
        hw = presets.resolve_hardware(str(row["hardware"]), str(row["interconnect"]) or None,
                                      _int_or_none(row["n_devices"]))
    except DitParError as exc:
        return None, None, None, None, f"not scored: {exc}"
    plan, why = row_plan(row, model, hw)
    if plan is None:
        return None, None, None, None, why
    notes = [f"model config: {line}" for line in read]
    try:
        width, height, frames = parse_resolution(row["resolution_or_seq"])
        steps, step_note = _steps(row["steps"], model)
        if step_note:
            notes.append(step_note)
        no_cfg = bool(NO_CFG.search(str(row["other_config"])))
        shape = make_shape(model, width, height, frames, steps, cfg=False if no_cfg else None)
    except DitParError as exc:
        return None, None, None, None, f"not scored: {exc}"
    if no_cfg and model.cfg_default:
        notes.append("guidance off (other_config): one branch per step")
    if plan.cfg > 1 and not shape.cfg:
        return None, None, None, None, "not scored: cfg=2 but the model preset runs without CFG"
    if plan.devices > hw.devices_per_node * hw.nodes:
        return None, None, None, None, f"not scored: {plan.devices} devices exceed {hw.name}"
    if compiled(row["other_config"]):
        notes.append("torch.compile: scored with eager costs")
    if plan.dp > 1:
        notes.append(f"dp={plan.dp} inferred")
    return model, hw, shape, plan, "; ".join(notes)


#: a row whose latency is the DiT loop alone (the serial stages are not in it); "latency per denoising step" and
#: "Latency/Step" are xDiT's CogVideoX charts and diffusers' PR tables: one step of the loop, no decode in it. A bare
#: "per step" is not enough: "one branch per step" and "0.249 s per step" describe end-to-end rows (SGLang's CI)
DIT_ONLY = re.compile(r"dit[- ]forward only|dit[- ]only|transformer only|denoising(?: loop)? only|per-iteration"
                      r"|latency per (?:denoising )?step|latency ?/ ?step|without (?:the )?text encoder and (?:the )?vae",
                      re.I)


def row_scope(row) -> str:
    """'dit' when the row's latency covers the denoising loop only (other_config or notes say so), else
    'end_to_end' (the schema's default: ../shared/calibration/README.md)."""
    text = f"{row.get('other_config', '')} {row.get('notes', '')}"
    return "dit" if DIT_ONLY.search(text) else "end_to_end"


def row_serial(row, model, hw, shape, plan):
    """The serial stages (text encoder, VAE decode) inside a row's measured latency: none for a DiT-only row;
    the VAE decode split as the row says ('VAE patch parallel 4', 'parallel_vae_size=2', 'DistVAE': every card of
    the request; ditpar.plan.cost.vae_parallel.stated_vae_degree)."""
    from ditpar.plan.cost.end_to_end import SerialStages, serial_stages

    if row_scope(row) == "dit":
        return SerialStages(0.0, 0.0, notes=("DiT-only latency: serial stages not in it",))
    from ditpar.plan.cost.vae_parallel import stated_vae_degree

    text = f"{row.get('other_config', '')} {row.get('notes', '')}"
    return serial_stages(model, hw, shape, vae_devices=stated_vae_degree(text, plan.devices // plan.dp))


def row_framework(row):
    """The framework profile whose name or alias is the row's source_repo (e.g. vipshop/cache-dit), else None:
    its TP implementation decides the per-linear host cost of a TP row."""
    from ditpar.plan.inputs.frameworks import all_frameworks
    from ditpar.plan.inputs.presets import normalize

    repo = normalize(str(row.get("source_repo", "") or ""))
    return next((fw for fw in all_frameworks() if repo and repo in {normalize(a) for a in (fw.name, *fw.aliases)}),
                None)


def score_row(row, tun: Tunables | None = None) -> tuple[float | None, str]:
    """(predicted_latency_s or None, score_note) for one row of a candidate table."""
    p, _, _, note = score_row_band(row, tun)
    return p, note


def score_row_band(row, tun: Tunables | None = None) -> tuple[float | None, float | None, float | None, str]:
    """(predicted_latency_s, predicted_low_s, predicted_high_s, score_note) for one row; the band is
    ditpar.plan.decide.uncertainty's with every link figure a preset (a table row carries no bench)."""
    from ditpar.plan.decide import uncertainty
    from ditpar.plan.inputs.frameworks import tp_host_tunables

    tun = tun or Tunables()
    model, hw, shape, plan, note = row_context(row)
    if model is None:
        return None, None, None, note
    bd = predict(model, hw, shape, plan, tp_host_tunables(tun, row_framework(row), plan))
    band = uncertainty.band_of(bd, frozenset())
    serial = row_serial(row, model, hw, shape, plan).total_s   # the same for every plan of the row's box
    return bd.latency_s + serial, band.low_s + serial, band.high_s + serial, note or "ok"


CALIBRATION_KEY = ["source_path", "model", "hardware", "interconnect", "resolution_or_seq", "steps"]


def pick_single(candidates: list[tuple[str, float]], other_config: str) -> int | None:
    """Index of the single-device row a multi-device row compares with, among the single-device rows of its table,
    model, machine, shape, steps and compile mode ((other_config, latency) each): the one run the same way (same
    other_config, the K/V all-gather marker aside) when there is one; else the only latency there is; else None. A
    table can hold two runs of one shape (two chart versions, two implementations, a cache on and off): a row is
    never divided by another run's one-device time."""
    if not candidates:
        return None
    own = scenario_config(other_config)
    same = [i for i, (oc, _) in enumerate(candidates) if scenario_config(oc) == own]
    if same:
        return same[0]
    return 0 if len({lat for _, lat in candidates}) == 1 else None


def _calibration_key(row) -> tuple:
    return (*(str(row[k]) for k in CALIBRATION_KEY), compiled(row["other_config"]))


def calibrations(frame, tun: Tunables) -> dict[tuple, list[tuple[str, float, Tunables]]]:
    """Per (table, model, machine, shape, steps, compile mode): (other_config, measured, tunables calibrated on that
    single-device row, exactly as --ref-latency does for a user's own measurement) for each such row;
    `calibration_for` picks a row's."""
    from ditpar.plan.decide.rank import calibrate

    out: dict[tuple, list] = {}
    for _, row in frame.iterrows():
        if _int_or_none(row["n_devices"]) != 1:
            continue
        measured = pd_float(row["latency_s"])
        model, hw, shape, plan, _ = row_context(row)
        if model is None or measured is None:
            continue
        try:   # the model calibrates the DiT loop: the serial stages come off the measured latency first
            t = calibrate(model, hw, shape, measured - row_serial(row, model, hw, shape, plan).total_s, tun)
        except DitParError:
            continue
        out.setdefault(_calibration_key(row), []).append((str(row["other_config"]), measured, t))
    return out


def calibration_for(cal: dict, row) -> Tunables | None:
    """The tunables calibrated on the single-device row this row compares with (`pick_single`), or None."""
    found = cal.get(_calibration_key(row), [])
    i = pick_single([(oc, m) for oc, m, _ in found], str(row["other_config"]))
    return None if i is None else found[i][2]


def pd_float(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and 0 < value <= MAX_LATENCY_S else None


def score_table(frame, tun: Tunables | None = None, calibrate: bool = False):
    """Return frame with predicted_latency_s and score_note appended (rows and columns unchanged)."""
    tun = tun or Tunables()
    out = frame.copy()
    preds, notes, lows, highs = [], [], [], []
    cal = calibrations(frame, tun) if calibrate else {}
    for _, row in frame.iterrows():
        row_tun = calibration_for(cal, row) or tun
        p, lo, hi, note = score_row_band(row, row_tun)
        if calibrate and row_tun is not tun:
            note = (note + "; " if note != "ok" else "") + "calibrated on the single-device row"
        preds.append("" if p is None else f"{p:.6g}")
        lows.append("" if lo is None else f"{lo:.6g}")
        highs.append("" if hi is None else f"{hi:.6g}")
        notes.append(note)
    out["predicted_latency_s"] = preds
    out["score_note"] = notes
    out["predicted_low_s"] = lows
    out["predicted_high_s"] = highs
    return out


def baseline_rank_key(row) -> tuple:
    """Rule of thumb as a sort key (smaller = preferred)."""
    link = str(row["interconnect"]).lower()
    fast = "nvlink" in link or "hccs" in link
    cfg, u, r, pf, tp = (int(float(row[d])) for d in ("cfg", "ulysses", "ring", "pipefusion", "tp"))
    preferred = u if fast else pf * r
    return (-(cfg > 1), tp > 1, -preferred, -max(u, r, pf))


@dataclass
class ScenarioResult:
    key: tuple
    configs: int
    tau: float | None
    pairs: int
    correct: float
    top1: bool | None
    base_correct: float
    base_top1: bool | None


def kendall_tau(xs: list[float], ys: list[float]) -> float | None:
    """Kendall tau-b of two equally long lists (None when either side is constant)."""
    conc = disc = tx = ty = 0
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return None if denom == 0 else (conc - disc) / denom


def _pairs(meas: list[float], pred: list[float]) -> tuple[int, float]:
    total, correct = 0, 0.0
    for i in range(len(meas)):
        for j in range(i + 1, len(meas)):
            lo, hi = sorted((meas[i], meas[j]))
            if hi <= lo * (1 + TIE):
                continue
            total += 1
            if pred[i] == pred[j]:
                correct += 0.5
            elif (meas[i] < meas[j]) == (pred[i] < pred[j]):
                correct += 1
    return total, correct


def _top1(meas: list[float], pred: list[float]) -> bool | None:
    if len(meas) < 3:
        return None
    best = min(range(len(pred)), key=lambda i: pred[i])
    return meas[best] <= min(meas) * (1 + TIE)


def evaluate_tables(frames: dict[str, object], tun: Tunables | None = None, calibrate: bool = False) -> dict:
    """Score every table, group into scenarios, and compute the agreement figures."""
    import pandas as pd

    tun = tun or Tunables()
    scored = []
    for name, frame in frames.items():
        s = score_table(frame, tun, calibrate=calibrate)
        s["table"] = name
        scored.append(s)
    if not scored:
        raise InputError("no tables to evaluate")
    for s in scored:
        s["csv_line"] = range(2, len(s) + 2)   # header is line 1
    data = pd.concat(scored, ignore_index=True)
    data["measured"] = pd.to_numeric(data["latency_s"], errors="coerce")
    data.loc[~((data["measured"] > 0) & (data["measured"] <= MAX_LATENCY_S)), "measured"] = float("nan")
    data["predicted"] = pd.to_numeric(data["predicted_latency_s"], errors="coerce")
    usable = data[data["measured"].notna() & data["predicted"].notna()].copy()
    if usable.empty:
        raise InputError(f"--tables: nothing to evaluate in {', '.join(frames)}: {nothing_scored(data)}")
    usable["other_config"] = usable["other_config"].map(scenario_config)
    scenarios: list[ScenarioResult] = []
    for key, grp in usable.groupby(["table", *SCENARIO_KEY], sort=False):
        if len(grp) < 2:
            continue
        meas, pred = grp["measured"].tolist(), grp["predicted"].tolist()
        order = sorted(range(len(grp)), key=lambda i: baseline_rank_key(grp.iloc[i]))
        base_pred = [0.0] * len(grp)
        for rank, i in enumerate(order):
            base_pred[i] = float(rank)
        pairs, correct = _pairs(meas, pred)
        _, base_correct = _pairs(meas, base_pred)
        scenarios.append(ScenarioResult(key, len(grp), kendall_tau(meas, pred), pairs, correct,
                                        _top1(meas, pred), base_correct, _top1(meas, base_pred)))
    speedups, no_reference = _speedup_errors(usable)
    total_pairs = sum(s.pairs for s in scenarios)
    top = [s for s in scenarios if s.top1 is not None]
    taus = sorted(s.tau for s in scenarios if s.tau is not None)
    errs = sorted(e["rel_error"] for e in speedups)
    summary = {
        "rows": int(len(data)), "rows_scored": int(data["predicted"].notna().sum()),
        "scenarios": len(scenarios), "pairs": total_pairs,
        "pairwise_accuracy": _ratio(sum(s.correct for s in scenarios), total_pairs),
        "baseline_pairwise_accuracy": _ratio(sum(s.base_correct for s in scenarios), total_pairs),
        "top1_scenarios": len(top),
        "top1_hit_rate": _ratio(sum(bool(s.top1) for s in top), len(top)),
        "baseline_top1_hit_rate": _ratio(sum(bool(s.base_top1) for s in top), len(top)),
        "median_kendall_tau": _median(taus),
        "speedup_rows": len(errs),
        "median_speedup_rel_error": _median(errs),
    }
    unmeasured = data[data["predicted"].notna() & data["measured"].isna()]
    summary["rows_without_latency"] = int(len(unmeasured))
    warnings = [f"{table}: line(s) {', '.join(str(x) for x in grp['csv_line'])}: latency_s is not "
                f"{LATENCY_WANTED} (got {', '.join(repr(str(v)) for v in grp['latency_s'].head(3))}); left out of the evaluation"
                for table, grp in unmeasured.groupby("table", sort=False)]
    warnings += no_reference
    counted = set(usable["table"])
    for name in frames:   # a table that adds nothing to the figures says so, with why
        if name not in counted:
            warnings.append(f"{name}: left out of the evaluation: {nothing_scored(data[data['table'] == name])}")
    return {"summary": summary, "scenarios": scenarios, "speedups": speedups, "scored": data, "warnings": warnings}


def _ratio(a: float, b: int) -> float | None:
    return None if b == 0 else a / b


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def _speedup_errors(usable) -> tuple[list[dict], list[str]]:
    """Relative error of predicted vs measured speedup over the single-device row of the same
    table, model, machine, shape, steps and compile mode, run the same way (`pick_single`); and one warning per
    table naming the rows left without a speedup because several one-device runs fit and none is theirs."""
    out = []
    unmatched: dict[str, list] = {}
    ref_key = ["table", "model", "hardware", "interconnect", "resolution_or_seq", "steps", "compiled"]
    usable = usable.assign(compiled=usable["other_config"].map(compiled),
                           ndev=usable["n_devices"].map(_int_or_none))
    singles = usable[usable["ndev"] == 1]
    refs: dict[tuple, list] = {}
    for _, r in singles.iterrows():
        refs.setdefault(tuple(r[k] for k in ref_key), []).append(r)
    for _, r in usable[usable["ndev"] > 1].iterrows():
        found = refs.get(tuple(r[k] for k in ref_key), [])
        i = pick_single([(str(x["other_config"]), x["measured"]) for x in found], str(r["other_config"]))
        if i is None:
            if found:
                unmatched.setdefault(r["table"], []).append(r.get("csv_line", "?"))
            continue
        ref = found[i]
        meas = ref["measured"] / r["measured"]
        pred = ref["predicted"] / r["predicted"]
        out.append({"table": r["table"], "model": r["model"], "hardware": r["hardware"],
                    "n_devices": int(r["ndev"]), "resolution_or_seq": r["resolution_or_seq"],
                    "config": _config_label(r), "measured_speedup": meas, "predicted_speedup": pred,
                    "rel_error": abs(pred - meas) / meas})
    warnings = [f"{table}: line(s) {', '.join(str(x) for x in lines)}: several one-device runs of the row's shape, none "
                "with its other_config; no speedup taken" for table, lines in unmatched.items()]
    return out, warnings


def _config_label(r) -> str:
    parts = [f"{k[0].upper()}{int(float(r[k]))}" for k in ("cfg", "ulysses", "ring", "pipefusion", "tp")
             if float(r[k]) > 1]
    return " ".join(parts) or "single"


def top_reasons(reasons: list[str], k: int = 3) -> str:
    """The k commonest reasons, counted: '36 x why; 6 x other why'."""
    return "; ".join(f"{n} x {why}" for why, n in Counter(reasons).most_common(k))


HEADER_ONLY = "no data rows, only a header"


def require_scored(out, label: str) -> None:
    """Refuse a scored table (score_table's output) in which no row got a prediction: its notes alone would pass
    for an answer."""
    if len(out) and (out["predicted_latency_s"] != "").any():
        return
    why = top_reasons(list(out["score_note"])) if len(out) else HEADER_ONLY
    raise InputError(f"{label}: no row could be scored ({why})")


def nothing_scored(data) -> str:
    """Why no row of `data` (scored rows of one or more tables) has both a measured and a predicted latency."""
    if data.empty:
        return HEADER_ONLY
    reasons = [str(note) if str(note).startswith("not scored") else f"latency_s is not {LATENCY_WANTED}"
               for note, meas, pred in zip(data["score_note"], data["measured"], data["predicted"], strict=True)
               if math.isnan(meas) or math.isnan(pred)]
    return f"{len(data)} row(s), none with both a measured latency_s and a prediction ({top_reasons(reasons)})"


def load_tables(directory: str | Path, include_micro: bool = False) -> dict[str, object]:
    """Every *.csv in directory in the calibration schema (the attention micro-benchmark is skipped:
    its latency column is 1/throughput of one operator, not a model latency)."""
    folder = Path(directory)
    if not folder.is_dir():
        raise InputError(f"--tables {directory}: not a folder")
    frames = {}
    for path in sorted(folder.glob("*.csv")):
        frame = read_table(path)
        micro = frame["notes"].str.contains("microbenchmark", case=False).mean() > 0.5
        if micro and not include_micro:
            continue
        frames[path.name] = frame
    if not frames:
        raise InputError(f"--tables {directory}: no model latency tables (*.csv in the calibration schema)")
    return frames


def scenario_frame(res: dict):
    """One row per scenario (for --csv)."""
    import pandas as pd

    rows = []
    for sc in res["scenarios"]:
        key = dict(zip(["table", *SCENARIO_KEY], sc.key, strict=False))
        rows.append({**key, "configs": sc.configs, "kendall_tau": sc.tau, "pairs": sc.pairs,
                     "pairs_correct": sc.correct, "top1_hit": sc.top1, "baseline_pairs_correct": sc.base_correct,
                     "baseline_top1_hit": sc.base_top1})
    return pd.DataFrame(rows)


def evaluation_payload(res: dict) -> dict:
    """JSON payload: summary, scenarios, speedup errors."""
    frame = scenario_frame(res)
    return {"summary": res["summary"], "scenarios": frame.to_dict(orient="records"),
            "speedups": res["speedups"], "baseline_rule": list(RULE_OF_THUMB), "warnings": res["warnings"]}


def _fmt(x, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:.0%}" if pct else f"{x:.2f}"


def render(res: dict, per_scenario: bool = False) -> str:
    """Readable report: the model beside the rule of thumb, then (optionally) every scenario."""
    s = res["summary"]
    lines = [f"rows {s['rows']}, scored {s['rows_scored']}; scenarios with >= 2 configurations: {s['scenarios']}; "
             f"ordered pairs (measured gap > {TIE:.0%}): {s['pairs']}; top-1 scenarios (>= 3 configs): "
             f"{s['top1_scenarios']}", "",
             f"{'metric':<44}{'cost model':>12}{'rule of thumb':>15}",
             f"{'pairwise order accuracy':<44}{_fmt(s['pairwise_accuracy']):>12}"
             f"{_fmt(s['baseline_pairwise_accuracy']):>15}",
             f"{'top-1 hit rate (within 5 % of measured best)':<44}{_fmt(s['top1_hit_rate']):>12}"
             f"{_fmt(s['baseline_top1_hit_rate']):>15}",
             f"{'median Kendall tau':<44}{_fmt(s['median_kendall_tau']):>12}{'':>15}",
             f"{'median rel. error of speedup vs 1 device':<44}{_fmt(s['median_speedup_rel_error'], True):>12}"
             f"{'':>15}   ({s['speedup_rows']} rows)",
             "", "rule of thumb (baseline):", *[f"  {r}" for r in RULE_OF_THUMB]]
    if per_scenario:
        lines += ["", f"{'table':<22}{'machine':<20}{'n':>3}  {'shape':<20}{'config':<14}{'cfgs':>5}{'tau':>7}"
                  f"{'pairs ok':>10}{'top1':>6}{'base ok':>9}{'b.top1':>7}"]
        for sc in res["scenarios"]:
            table, _, _, hwn, ic, n, shp, _, other = sc.key
            lines.append(f"{table[:21]:<22}{(hwn + ' ' + ic)[:19]:<20}{n:>3}  {shp[:19]:<20}{other[:13]:<14}"
                         f"{sc.configs:>5}{_fmt(sc.tau):>7}{f'{sc.correct:g}/{sc.pairs}':>10}"
                         f"{'-' if sc.top1 is None else ('yes' if sc.top1 else 'no'):>6}"
                         f"{f'{sc.base_correct:g}/{sc.pairs}':>9}"
                         f"{'-' if sc.base_top1 is None else ('yes' if sc.base_top1 else 'no'):>7}")
    return "\n".join(lines) + "\n"
