"""Few-step gates on a timing matrix: per-cell medians and dispersion, drift, ranking, verdict.

Definitions (references/fewstep-validation.md): a run's time is the max over its ranks; per-step =
run time / steps; a cell (config x tier) is the median per-step over its repeats; dispersion =
(max - min) / median over repeats; drift r = per-step(anchor) / per-step(few).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ditpar.errors import InputError
from ditpar.fewstep.matrix import TIERS, TIMINGS, Row, card_count

VERDICTS = ("no-evidence", "fix-noise", "rerun-anchor", "extrapolate")
EXIT_CODES = {"extrapolate": 0, "rerun-anchor": 1, "fix-noise": 1, "no-evidence": 2}


@dataclass(frozen=True)
class Gates:
    """Thresholds of the four gates (percent / percentage points)."""

    dispersion_pct: float = 3.0
    drift_pct: float = 5.0
    tie_pct: float = 3.0
    share_drift_pp: float = 5.0
    min_repeats: int = 3

    def check(self) -> None:
        """Refuse thresholds that would let a thin or noisy matrix pass."""
        if self.min_repeats < 3:
            raise InputError(f"--min-repeats {self.min_repeats}: fewer than 3 repeats is never evidence")
        for name in ("dispersion_pct", "drift_pct", "tie_pct", "share_drift_pp"):
            if getattr(self, name) < 0:
                raise InputError(f"--{name.replace('_', '-')} must be >= 0")


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def cell_stats(config: str, tier: str, rows: Sequence[Row], devices: int, gates: Gates) -> dict[str, Any]:
    """One cell: runs (max over ranks), median per-step, dispersion, slowest rank, exposed share."""
    runs: dict[int, list[Row]] = {}
    for r in rows:
        runs.setdefault(r.repeat, []).append(r)
    steps = rows[0].steps
    per_run = []
    slowest: dict[int, int] = {}
    skews = []
    shares: list[float] = []
    share_complete = True
    for repeat in sorted(runs):
        ranks = runs[repeat]
        worst = max(ranks, key=lambda x: (x.dit_s, -x.rank))
        best = min(x.dit_s for x in ranks)
        per_run.append((repeat, worst.dit_s, worst.dit_s / steps))
        slowest[worst.rank] = slowest.get(worst.rank, 0) + 1
        skews.append((worst.dit_s - best) / worst.dit_s * 100.0)
        values = [x.comm_exposed_share for x in ranks]
        if any(v is None for v in values):
            share_complete = False
        else:
            shares.append(max(values))  # type: ignore[arg-type]
    per_step = [p for _, _, p in per_run]
    n = len(per_run)
    median = _median(per_step)
    if n >= gates.min_repeats:
        dispersion = (max(per_step) - min(per_step)) / median * 100.0
        status = "noisy" if dispersion > gates.dispersion_pct else "ok"
    else:
        dispersion = None
        status = "too-few-repeats"
    return {
        "config": config,
        "tier": tier,
        "devices": devices,
        "steps": steps,
        "repeats": n,
        "ranks": len({r.rank for r in rows}),
        "dit_s_median": _median([t for _, t, _ in per_run]),
        "per_step_s": median,
        "per_step_min_s": min(per_step),
        "per_step_max_s": max(per_step),
        "dispersion_pct": dispersion,
        "status": status,
        "usable": status == "ok",
        "slowest_rank": max(slowest, key=lambda k: (slowest[k], -k)),
        "rank_skew_pct": _median(skews),
        "comm_exposed_share": _median(shares) if shares and share_complete else None,
        "runs": [{"repeat": rep, "dit_s": t, "per_step_s": p} for rep, t, p in per_run],
    }


def drift_row(config: str, devices: int, few: dict | None, anchor: dict | None, gates: Gates,
              have_share: bool) -> dict[str, Any]:
    """Drift r = per-step(anchor) / per-step(few) and the exposed-share drift for one config."""
    out: dict[str, Any] = {"config": config, "devices": devices,
                           "few_per_step_s": few and few["per_step_s"],
                           "anchor_per_step_s": anchor and anchor["per_step_s"],
                           "r": None, "drift_pct": None, "drift_ok": None,
                           "marginal_per_step_s": None, "fixed_s": None,
                           "share_few": None, "share_anchor": None, "share_drift_pp": None,
                           "share_ok": None}
    if few is None or anchor is None:
        out["status"] = "missing-tier"
        return out
    r = anchor["per_step_s"] / few["per_step_s"]
    out.update(r=r, drift_pct=(r - 1.0) * 100.0)
    # two-point fit T(n) = fixed + n * marginal through the cell medians (informational)
    t_few, t_anchor = few["per_step_s"] * few["steps"], anchor["per_step_s"] * anchor["steps"]
    marginal = (t_anchor - t_few) / (anchor["steps"] - few["steps"])
    out.update(marginal_per_step_s=marginal, fixed_s=t_few - few["steps"] * marginal)
    usable = few["usable"] and anchor["usable"]
    if usable:
        out["drift_ok"] = abs(r - 1.0) * 100.0 <= gates.drift_pct
    if have_share:
        sf, sa = few["comm_exposed_share"], anchor["comm_exposed_share"]
        out.update(share_few=sf, share_anchor=sa)
        if sf is not None and sa is not None:
            out["share_drift_pp"] = (sa - sf) * 100.0
            if usable:
                out["share_ok"] = abs(sa - sf) * 100.0 <= gates.share_drift_pp
    if not usable:
        out["status"] = "unusable-cell"
    elif out["drift_ok"] is False:
        out["status"] = "drift"
    elif out["share_ok"] is False:
        out["status"] = "share-drift"
    else:
        out["status"] = "ok"
    return out


def _rel_diff(a: float, b: float) -> float:
    """(b - a) / min(a, b) in percent: > 0 means a is faster."""
    return (b - a) / min(a, b) * 100.0


def ranking_group(devices: int, configs: Sequence[str], cells: dict[tuple[str, str], dict],
                  gates: Gates) -> dict[str, Any]:
    """Rank one card-count group at each tier and classify every pair of configs.

    A pair flips when the anchor orders it beyond the tie tolerance and the few tier orders it the
    other way (or equal). Pairs the anchor calls a tie accept either few-step order.
    """
    def order(tier: str) -> list[str]:
        have = [c for c in configs if (c, tier) in cells]
        return sorted(have, key=lambda c: (cells[(c, tier)]["per_step_s"], c))

    pairs = []
    complete = [c for c in configs if (c, "few") in cells and (c, "anchor") in cells]
    for i, a in enumerate(complete):
        for b in complete[i + 1:]:
            fa, fb = cells[(a, "few")], cells[(b, "few")]
            aa, ab = cells[(a, "anchor")], cells[(b, "anchor")]
            few_diff = _rel_diff(fa["per_step_s"], fb["per_step_s"])
            anchor_diff = _rel_diff(aa["per_step_s"], ab["per_step_s"])
            usable = all(x["usable"] for x in (fa, fb, aa, ab))
            if not usable:
                status = "unusable"
            elif abs(anchor_diff) <= gates.tie_pct:
                status = "tie-at-anchor"
            elif few_diff * anchor_diff > 0:
                status = "agree"
            else:
                status = "flip"
            pairs.append({"a": a, "b": b, "few_diff_pct": few_diff, "anchor_diff_pct": anchor_diff,
                          "status": status})
    statuses = {p["status"] for p in pairs}
    if "flip" in statuses:
        consistent: bool | None = False
    elif not pairs or "unusable" in statuses:
        consistent = None
    else:
        consistent = True
    return {"devices": devices, "configs": list(configs), "order_few": order("few"),
            "order_anchor": order("anchor"), "consistent": consistent, "pairs": pairs}


def timing_of(rows: Sequence[Row], declared: str | None) -> str:
    """'dit' or 'e2e': the matrix's timing column, or --timing for a matrix without one; never both differing."""
    column = rows[0].timing if rows else ""
    if declared is None:
        return column or "dit"
    if declared not in TIMINGS:
        raise InputError(f"--timing {declared!r}: expected one of {list(TIMINGS)}")
    if column and column != declared:
        raise InputError(f"--timing {declared}: the matrix's timing column says {column}")
    return declared


def timing_source(rows: Sequence[Row], declared: str | None) -> str:
    """Where the timing came from: the matrix's own column, --timing, or assumed (neither said)."""
    if rows and rows[0].timing:
        return "the matrix's timing column"
    return "--timing" if declared is not None else "assumed: the matrix has no timing column and no --timing was given"


def e2e_cost(drift: Sequence[Mapping[str, Any]], steps: Mapping[str, int | None]) -> dict[str, Any]:
    """What end-to-end times cost: the step-independent part per config and its share of each tier."""
    rows = []
    for d in drift:
        if d.get("fixed_s") is None or d.get("few_per_step_s") is None:
            continue
        few_total = d["few_per_step_s"] * steps["few"]
        anchor_total = d["anchor_per_step_s"] * steps["anchor"]
        rows.append({"config": d["config"], "fixed_s": d["fixed_s"],
                     "fixed_share_few": d["fixed_s"] / few_total if few_total else None,
                     "fixed_share_anchor": d["fixed_s"] / anchor_total if anchor_total else None})
    worst = max(rows, key=lambda r: abs(r["fixed_share_few"] or 0.0), default=None)
    note = ("end-to-end times: every request also pays step-independent work (text encoding, VAE decode, "
            "response encoding). It adds fixed/steps to the per-step time, most at the few tier, so the "
            "drift gate measures that fixed cost rather than the DiT (r < 1 by about fixed/T_few), the "
            "decoder's noise enters the dispersion, and plan differences inside the denoise loop are "
            "diluted by the fixed share. The two-point split (fixed_s) estimates it")
    if worst is not None and worst["fixed_share_few"] is not None:
        note += (f": {worst['fixed_s']:.4g} s, {100 * worst['fixed_share_few']:.1f} % of the few-tier time "
                 f"of {worst['config']}")
    note += ". Time the DiT stage alone (--dit-regex on the denoise line) to remove it."
    return {"note": note, "configs": rows}


def analyze(rows: Sequence[Row], gates: Gates | None = None,
            planned: Mapping[str, int] | None = None, timing: str | None = None) -> dict[str, Any]:
    """Run every gate on the matrix rows and return the JSON payload (without the schema key).

    ``planned`` (config -> devices, from the runner) names configs that must be present: one
    whose runs all failed has no rows, and is reported as missing instead of vanishing.
    ``timing`` ('dit' or 'e2e') marks what the times measure when the matrix has no timing column.
    """
    gates = gates or Gates()
    gates.check()
    if not rows:
        raise InputError("matrix has no rows")
    declared_timing = timing
    timing = timing_of(rows, timing)
    planned = dict(planned or {})
    configs = sorted({r.config for r in rows} | set(planned))
    have_share = any(r.comm_exposed_share is not None for r in rows)
    devices: dict[str, int] = {}
    devices_source: dict[str, str] = {}
    for c in configs:
        mine = [r for r in rows if r.config == c]
        if mine:
            devices[c], devices_source[c] = card_count(mine)
        else:
            devices[c], devices_source[c] = planned[c], "run"
    cells: dict[tuple[str, str], dict] = {}
    for c in configs:
        for t in TIERS:
            mine = [r for r in rows if r.config == c and r.tier == t]
            if mine:
                cells[(c, t)] = cell_stats(c, t, mine, devices[c], gates)
    steps = {t: next((r.steps for r in rows if r.tier == t), None) for t in TIERS}
    configs.sort(key=lambda c: (devices[c], c))
    drift = [drift_row(c, devices[c], cells.get((c, "few")), cells.get((c, "anchor")), gates, have_share)
             for c in configs]
    groups: dict[int, list[str]] = {}
    for c in configs:
        groups.setdefault(devices[c], []).append(c)
    ranking = [ranking_group(d, cs, cells, gates) for d, cs in sorted(groups.items()) if len(cs) >= 2]
    alone = [c for d, cs in sorted(groups.items()) if len(cs) < 2 for c in cs]
    flags = [g["consistent"] for g in ranking]
    if False in flags:
        ranking_consistent: bool | None = False
    elif not flags or None in flags:
        ranking_consistent = None
    else:
        ranking_consistent = True
    reasons = _reasons(configs, cells, drift, ranking, alone, gates, devices)
    verdict = next(v for v in VERDICTS if v in reasons or v == "extrapolate")
    return {
        "verdict": verdict,
        "reasons": reasons.get(verdict, []),
        "all_reasons": reasons,
        "ranking_consistent": ranking_consistent,
        "steps": steps,
        "thresholds": {"dispersion_pct": gates.dispersion_pct, "drift_pct": gates.drift_pct,
                       "tie_pct": gates.tie_pct, "share_drift_pp": gates.share_drift_pp,
                       "min_repeats": gates.min_repeats},
        "devices": {c: {"devices": devices[c], "source": devices_source[c]} for c in configs},
        "cells": [cells[k] for k in sorted(cells, key=lambda k: (devices[k[0]], k[0], TIERS.index(k[1])))],
        "drift": drift,
        "ranking": ranking,
        "unranked_configs": alone,
        "timing": timing,
        "timing_source": timing_source(rows, declared_timing),
        "timing_cost": e2e_cost(drift, steps) if timing == "e2e" else None,
    }


def _reasons(configs, cells, drift, ranking, alone, gates: Gates, devices) -> dict[str, list[dict]]:
    """Every verdict that applies, each with its reasons (code, detail, configs, cells)."""
    out: dict[str, list[dict]] = {}

    def add(verdict: str, code: str, detail: str, configs_=(), cells_=()) -> None:
        out.setdefault(verdict, []).append({"code": code, "detail": detail,
                                            "configs": list(configs_), "cells": list(cells_)})

    for c in configs:
        lacking = [t for t in TIERS if (c, t) not in cells]
        if lacking:
            add("no-evidence", "missing-tier", f"{c}: no {'/'.join(lacking)} rows", [c],
                [f"{c}/{t}" for t in lacking])
    thin = [k for k, v in cells.items() if v["status"] == "too-few-repeats"]
    for c, t in sorted(thin):
        n = cells[(c, t)]["repeats"]
        add("no-evidence", "too-few-repeats", f"{c}/{t}: {n} repeat(s), need >= {gates.min_repeats}",
            [c], [f"{c}/{t}"])
    if not ranking:
        counts = ", ".join(f"{c}={devices[c]}" for c in configs)
        add("no-evidence", "no-same-card-pair",
            f"no two configs share a card count ({counts}); ranking across card counts is refused",
            configs)
    for c, t in sorted(k for k, v in cells.items() if v["status"] == "noisy"):
        v = cells[(c, t)]
        add("fix-noise", "noisy-cell", f"{c}/{t}: dispersion {v['dispersion_pct']:.2f} % > "
            f"{gates.dispersion_pct:g} % over {v['repeats']} repeats", [c], [f"{c}/{t}"])
    for g in ranking:
        for p in g["pairs"]:
            if p["status"] == "flip":
                add("rerun-anchor", "ranking-flip",
                    f"{p['a']} vs {p['b']} ({g['devices']} devices): few tier {p['few_diff_pct']:+.2f} %, "
                    f"anchor {p['anchor_diff_pct']:+.2f} % (positive = {p['a']} faster; tie tolerance "
                    f"{gates.tie_pct:g} %)", [p["a"], p["b"]])
    for d in drift:
        if d["drift_ok"] is False:
            add("rerun-anchor", "drift", f"{d['config']}: r = {d['r']:.4f}, |r - 1| = "
                f"{abs(d['drift_pct']):.2f} % > {gates.drift_pct:g} %", [d["config"]])
        if d["share_ok"] is False:
            add("rerun-anchor", "share-drift",
                f"{d['config']}: exposed-comm share {d['share_few']:.3f} -> {d['share_anchor']:.3f} "
                f"({d['share_drift_pp']:+.2f} pp, gate {gates.share_drift_pp:g} pp)", [d["config"]])
    return out


def cell_table_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Flat cell rows for the table and --csv (runs left out)."""
    return [{k: v for k, v in c.items() if k != "runs"} for c in payload["cells"]]


TABLE_COLUMNS = ("config", "tier", "devices", "steps", "repeats", "ranks", "per_step_s",
                 "dispersion_pct", "status", "slowest_rank", "rank_skew_pct", "comm_exposed_share")
CELL_COLUMNS = ("config", "tier", "devices", "steps", "repeats", "ranks", "per_step_s",
                "per_step_min_s", "per_step_max_s", "dispersion_pct", "status", "slowest_rank",
                "rank_skew_pct", "comm_exposed_share", "dit_s_median")
DRIFT_COLUMNS = ("config", "devices", "few_per_step_s", "anchor_per_step_s", "r", "drift_pct",
                 "marginal_per_step_s", "fixed_s", "share_few", "share_anchor", "share_drift_pp", "status")


def _shown(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows for the text table: percentages with 2 decimals, seconds and ratios with 5."""
    out = []
    for row in rows:
        shown = {}
        for k, v in row.items():
            if isinstance(v, float):
                shown[k] = f"{v:.2f}" if k.endswith(("_pct", "_pp")) else f"{v:.5f}"
            else:
                shown[k] = v
        out.append(shown)
    return out


def render_text(payload: dict[str, Any]) -> str:
    """The default human-readable report: cells, drift, ranking, verdict and reasons."""
    from ditpar.cli import format_table

    have_share = any(c["comm_exposed_share"] is not None for c in payload["cells"])
    cell_cols = [c for c in TABLE_COLUMNS if have_share or c != "comm_exposed_share"]
    drift_cols = [c for c in DRIFT_COLUMNS if have_share or not c.startswith("share")]
    parts = []
    if payload.get("timing") == "e2e":
        parts += [f"TIMING: end to end, not DiT-only ({payload['timing_source']}). "
                  + payload["timing_cost"]["note"], ""]
    else:
        parts += [f"TIMING: DiT-only, the denoising stage ({payload['timing_source']}); if the times are whole "
                  "requests, say --timing e2e", ""]
    parts += [f"cells (per-step = median over repeats of max-over-ranks DiT time / steps; "
             f"steps few={payload['steps']['few']} anchor={payload['steps']['anchor']})",
             format_table(_shown(cell_table_rows(payload)), cell_cols), "",
             "drift (r = per-step anchor / per-step few)",
             format_table(_shown(payload["drift"]), drift_cols), ""]
    for g in payload["ranking"]:
        parts.append(f"ranking, {g['devices']} devices: few {' < '.join(g['order_few'])} | "
                     f"anchor {' < '.join(g['order_anchor'])} | consistent: {_flag(g['consistent'])}")
        if g["pairs"]:
            parts.append(format_table(_shown(g["pairs"]), ["a", "b", "few_diff_pct", "anchor_diff_pct",
                                                           "status"]))
    if payload["unranked_configs"]:
        parts.append("not ranked (no other config with the same card count): "
                     + ", ".join(payload["unranked_configs"]))
    parts += ["", f"verdict: {payload['verdict']}"]
    parts += [f"  - [{r['code']}] {r['detail']}" for r in payload["reasons"]]
    later = [v for v in payload["all_reasons"] if v != payload["verdict"]]
    if later:
        parts.append("  also pending once this is fixed: " + ", ".join(
            f"{v} ({len(payload['all_reasons'][v])})" for v in later))
    return "\n".join(parts)


def _flag(value: bool | None) -> str:
    return {True: "yes", False: "NO", None: "no evidence"}[value]


def cells_csv(payload: dict[str, Any]) -> str:
    """The cell table as CSV text."""
    import csv
    import io

    from ditpar.cli import spreadsheet_safe

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CELL_COLUMNS), extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for row in cell_table_rows(payload):
        writer.writerow({k: ("" if v is None else spreadsheet_safe(v)) for k, v in row.items()})
    return buf.getvalue()
