"""The speedup range's width from held-out residuals, by stratum, and its coverage leave one unseen round out.

The calibration sample is the rows of the unseen rounds (benchmarks/VALIDATION.md section 4), as each round was
scored before any cost term changed for it: |log2(predicted / measured speedup)| per row, from the code of the
commit that scored it (benchmarks/unseen_residuals.csv, written by benchmarks/unseen_residuals.py). A range of level
L around a prediction is x e^-q .. x e^q, q the split-conformal quantile of |residual| of the rows of its stratum (how
new the question is to the collection); a stratum with fewer than MIN_N rows takes the pooled q at the same level
(VALIDATION section 7.24), except the machine stratum, whose given or borrowed figures widen it (WIDENED). Beside
it, the same rows scored by today's cost terms with each round held out (`heldout.evaluate_heldout(by="round")`):
optimistic, since the terms have since seen some of those tables.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from ditpar.plan.judge.rounds import UNSEEN_ROUNDS, round_of  # noqa: F401 (round_of: the rounds' one home)

PRECHANGE = Path(__file__).resolve().parents[4] / "benchmarks" / "unseen_residuals.csv"
STRATA = ("all in collection", "new framework", "new or borrowed machine", "new model family")
MIN_N = 20   # a stratum with fewer rows takes the pooled q at the same level (`quantile_table`)
# The stratum whose questions rest on a machine figure given by the user or borrowed from another preset: such a
# figure widens a range, never narrows it (only measured figures narrow one). With fewer than MIN_N rows of its own
# it takes the pooled q at the level halfway to 1 (0.8 -> 0.9), and never less than the q of the strata such a figure
# moves a question out of (the newest part wins: a new family stays a new family).
WIDENED = {"new or borrowed machine": ("all in collection", "new framework")}
WITHIN = 0.05   # the claim: held-out coverage within this of the stated level (per stratum with n >= MIN_N)
RESAMPLE_DRAWS = 200   # resamplings of the rounds behind each coverage figure's round-resampled interval


def family(model_name: str) -> str:
    """A model's family: the first run of letters of its name ('Wan2.1-T2V-14B' -> 'wan', 'FLUX.2-dev' -> 'flux')."""
    m = re.match(r"[A-Za-z]+", str(model_name).strip())
    return m.group(0).lower() if m else str(model_name).lower()


def borrowed_machine(hw) -> bool:
    """A machine whose compute figure is borrowed from another preset (its mfu source says so)."""
    return str(hw.sources.get("mfu", "")).lower().startswith("borrowed")


def stratum(model_name: str, accelerator: str, framework: str, borrowed: bool, collection: dict) -> str:
    """How new a question is to `collection` ({'families', 'accelerators', 'frameworks'}): the newest part wins
    (model family, then machine, then framework)."""
    if family(model_name) not in collection["families"]:
        return "new model family"
    if borrowed or str(accelerator) not in collection["accelerators"]:
        return "new or borrowed machine"
    if framework not in collection["frameworks"]:
        return "new framework"
    return "all in collection"


def _framework(row) -> str:
    from ditpar.plan.judge.evaluate import row_framework

    fw = row_framework(row.row)
    return fw.name if fw is not None else str(row.row["source_repo"])


def collection_of(rows) -> dict:
    """The families, accelerators and frameworks a set of rows holds."""
    return {"families": {family(r.model.name) for r in rows}, "accelerators": {str(r.hw.accelerator) for r in rows},
            "frameworks": {_framework(r) for r in rows}}


def sample(frames: dict, tun) -> tuple[list[dict], dict]:
    """(one record per unseen-round speedup row: round, table, stratum, residual, scored with its round held out;
    the held-out evaluation by round)."""
    from ditpar.plan.judge.heldout import evaluate_heldout

    res = evaluate_heldout(frames, tun, by="round")
    rows = res["row_list"]
    out = []
    for r in res["sources"]:
        if r.source not in UNSEEN_ROUNDS:
            continue
        coll = collection_of([x for x in rows if round_of(x.source) != r.source])
        for i, e in r.residuals:
            x = rows[i]
            out.append({"round": r.source, "table": x.source, "model": x.model.name, "hardware": x.hw.name,
                        "plan": x.plan.name, "residual": e,
                        "stratum": stratum(x.model.name, x.hw.accelerator, _framework(x), borrowed_machine(x.hw), coll)})
    return out, res


def conformal_q(abs_res: list[float], level: float) -> float | None:
    """The split-conformal quantile: the ceil((n + 1) level)-th smallest |residual| (None: too few rows for it)."""
    v = sorted(abs_res)
    k = math.ceil((len(v) + 1) * level)
    return v[k - 1] if 1 <= k <= len(v) else None


def quantile_table(recs: list[dict], level: float) -> dict:
    """Per stratum: q, n, rounds and whether q is its own (n >= MIN_N) or the pooled one at the same level (the
    conformal (n + 1) correction already pays for a small n; a wider level there has no coverage basis and
    over-covers); a WIDENED stratum without its own q: the pooled q at (1 + level) / 2, at least its listed strata's."""
    pooled = [abs(r["residual"]) for r in recs]
    pooled_q = conformal_q(pooled, level) if recs else None
    out = {"pooled": {"q": pooled_q, "n": len(recs), "own": True, "rounds": len({r["round"] for r in recs})}}
    for s in STRATA:
        mine = [r for r in recs if r["stratum"] == s]
        q = conformal_q([abs(r["residual"]) for r in mine], level) if len(mine) >= MIN_N else None
        out[s] = {"q": q if q is not None else pooled_q, "n": len(mine), "own": q is not None,
                  "rounds": len({r["round"] for r in mine})}
    for s, below in WIDENED.items():
        wide = out[s]["q"] if out[s]["own"] else (conformal_q(pooled, (1 + level) / 2) if pooled else None)
        qs = [x for x in (wide, *(out[b]["q"] for b in below)) if x is not None]
        out[s]["q"] = max(qs) if qs else None
    return out


def sampling_interval(n: int, level: float, mass: float = 0.9) -> tuple[float, float]:
    """The shares of n rows a range of true coverage `level` puts inside, `mass` of the time (binomial, rows taken
    as independent: rows of one table are not, so the true spread is wider)."""
    lo_k = hi_k = None
    acc = 0.0
    for k in range(n + 1):
        acc += math.comb(n, k) * level ** k * (1 - level) ** (n - k)
        if lo_k is None and acc >= (1 - mass) / 2:
            lo_k = k
        if acc >= 1 - (1 - mass) / 2:
            hi_k = k
            break
    return lo_k / n, (hi_k if hi_k is not None else n) / n


def loro_coverage(recs: list[dict], level: float) -> dict:
    """Leave one round out: each round's rows against the q (by stratum) of the other rounds' rows; per stratum, over
    all strata ('all strata') and for one pooled q on every row ('pooled'): the share inside, n, rounds, the
    largest round's share of the rows, the median range width (high / low = e^2q), the binomial sampling interval
    at the level and whether the share is within WITHIN of it."""
    hits: dict[str, list[bool]] = {}
    widths: dict[str, list[float]] = {}
    rounds: dict[str, list[str]] = {}
    for rnd in sorted({r["round"] for r in recs}):
        table = quantile_table([r for r in recs if r["round"] != rnd], level)
        for r in recs:
            if r["round"] != rnd:
                continue
            for key, q in ((r["stratum"], table[r["stratum"]]["q"]), ("all strata", table[r["stratum"]]["q"]),
                           ("pooled", table["pooled"]["q"])):
                if q is None:
                    continue
                hits.setdefault(key, []).append(abs(r["residual"]) <= q)
                widths.setdefault(key, []).append(math.exp(2 * q))
                rounds.setdefault(key, []).append(r["round"])
    out = {}
    for key, h in hits.items():
        w = sorted(widths[key])
        cov, n = sum(h) / len(h), len(h)
        per = [rounds[key].count(x) for x in set(rounds[key])]
        out[key] = {"coverage": cov, "n": n, "median_width": w[n // 2], "rounds": len(per),
                    "largest_round_share": max(per) / n, "sampling_interval": sampling_interval(n, level),
                    "within": abs(cov - level) <= WITHIN + 1e-12}
    return out


def round_resampled(recs: list[dict], level: float, draws: int = RESAMPLE_DRAWS, mass: float = 0.9) -> dict:
    """Per stratum: the (low, high) `mass` interval of the leave-one-round-out coverage over `draws` resamplings of
    the rounds with replacement (all copies of a round held out together): how far the coverage figure itself can
    move when rows come in rounds (the binomial interval takes them as independent). Seeded: the same every run."""
    import random

    rng = random.Random(0)
    rounds = sorted({r["round"] for r in recs})
    by_round = {k: [r for r in recs if r["round"] == k] for k in rounds}
    seen: dict[str, list[float]] = {}
    for _ in range(draws):
        sample = [r for k in (rng.choice(rounds) for _ in rounds) for r in by_round[k]]
        for key, h in loro_coverage(sample, level).items():
            seen.setdefault(key, []).append(h["coverage"])
    out = {}
    for key, v in seen.items():
        v.sort()
        lo, hi = v[int((1 - mass) / 2 * len(v))], v[min(len(v) - 1, math.ceil((1 + mass) / 2 * len(v)) - 1)]
        out[key] = {"low": lo, "high": hi, "draws": len(v)}
    return out


def prechange_sample(path: Path, strata: dict[str, str]) -> list[dict]:
    """The pre-change residuals (one row per speedup row: round, table, scored_at_commit, abs_log2_speedup_error,
    stratum_at_scoring), each in the stratum it had when scored (how new the question was to the tables of that
    commit: a later table does not relabel it); tables not in `strata` (the tables read today) are left out."""
    import csv
    import io

    from ditpar import files, limits
    from ditpar.errors import InputError

    text = files.read_input_text(path)
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    want = ("round", "table", "scored_at_commit", "abs_log2_speedup_error", "stratum_at_scoring")
    if not rows or any(c not in rows[0] for c in want):
        raise InputError(f"{path}: expected the columns {', '.join(want)}")
    out = []
    for i, r in enumerate(rows, 2):
        if r["table"] not in strata:
            continue
        e = limits.number(r["abs_log2_speedup_error"], f"{path}: line {i}: abs_log2_speedup_error", 0.0, 64.0)
        if r["stratum_at_scoring"] not in STRATA:
            raise InputError(f"{path}: line {i}: stratum_at_scoring {r['stratum_at_scoring']!r}: expected one of "
                             f"{', '.join(STRATA)}")
        out.append({"round": r["round"], "table": r["table"], "scored_at": r["scored_at_commit"],
                    "stratum": r["stratum_at_scoring"], "residual": e * math.log(2)})
    return out


def _levels(recs: list[dict], levels) -> dict:
    return {f"{lv:g}": {"q": quantile_table(recs, lv), "held_out": loro_coverage(recs, lv),
                        "round_resampled": round_resampled(recs, lv)} for lv in levels}


def report(frames: dict, tun, levels: tuple[float, ...] = (0.5, 0.8, 0.9), prechange: Path | None = PRECHANGE) -> dict:
    """The calibration (q per stratum) and its leave-one-round-out coverage per level: on the residuals each round
    had when it was scored (`prechange`, the sample plan.py ships), and on today's cost terms with the round held out."""
    now, _ = sample(frames, tun)
    strata: dict[str, str] = {}
    for r in now:
        strata.setdefault(r["table"], r["stratum"])
    pre = prechange_sample(prechange, strata) if prechange is not None and prechange.is_file() else []
    recs = pre or now
    return {"rounds": {k: list(v) for k, v in UNSEEN_ROUNDS.items()}, "sample_kind": "pre-change" if pre else "today",
            "rows": len(recs), "by_round": {r: sum(x["round"] == r for x in recs) for r in UNSEEN_ROUNDS},
            "levels": _levels(recs, levels), "levels_today": _levels(now, levels),
            "collection": {k: sorted(v) for k, v in collection_of(_all_rows(frames)).items()},
            "sample": recs}


def _all_rows(frames: dict):
    from ditpar.plan.judge.heldout import collect_rows

    return collect_rows(frames)


def render(rep: dict) -> str:
    """The per-stratum tables of each level, held out by round: the pre-change sample plan.py ships, then today's."""
    kind = ("as each round was scored before any change (benchmarks/unseen_residuals.csv)" if
            rep["sample_kind"] == "pre-change" else "scored by today's cost terms, each round held out")
    lines = [f"speedup range by stratum: {rep['rows']} speedup rows of the unseen rounds, {kind} ("
             + ", ".join(f"{k}: {v}" for k, v in rep["by_round"].items()) + "); coverage with one round left out"]
    lines += _render_levels(rep["levels"])
    if rep["sample_kind"] == "pre-change":
        lines.append("the same rows scored by today's cost terms, each round held out (optimistic: the terms have "
                     "since seen some of these tables):")
        lines += _render_levels(rep["levels_today"])
    return "\n".join(lines) + "\n"


def _render_levels(levels: dict) -> list[str]:
    lines = []
    for lv, d in levels.items():
        lines.append(f"level {lv}: stratum                   n rounds  q (ln)  {'range':<35}held-out coverage (n)  "
                     f"90% sampling interval  rounds resampled 90%  within {WITHIN:.2f}  median width")
        for key in ("pooled", *STRATA, "all strata"):
            q = d["q"].get(key)
            h = d["held_out"].get(key)
            if q is None:   # 'all strata': the stratified rule's rows together, no q of its own
                n, rounds = (h["n"], h["rounds"]) if h else (0, 0)
                qtext, rng = "-", "(each row its stratum's q)"
            else:
                n, rounds = q["n"], q["rounds"]
                qtext = "-" if q["q"] is None else f"{q['q']:.3f}"
                rng = "-" if q["q"] is None else f"x{math.exp(-q['q']):.2f}..x{math.exp(q['q']):.2f}"
                rng += "" if q["own"] else " (pooled q, widened)" if key in WIDENED else " (pooled q)"
            cov = "-" if h is None else f"{h['coverage']:.2f} ({h['n']})"
            si = "-" if h is None else f"{h['sampling_interval'][0]:.2f}..{h['sampling_interval'][1]:.2f}"
            b = d.get("round_resampled", {}).get(key)
            rs = "-" if b is None else f"{b['low']:.2f}..{b['high']:.2f}"
            ok = "-" if h is None else (f"n<{MIN_N}" if h["n"] < MIN_N else "yes" if h["within"] else "no")
            wid = "-" if h is None else f"x{h['median_width']:.2f}"
            lines.append(f"  {key:<33}{n:>4}{rounds:>7} {qtext:>7}  {rng:<35}{cov:>12}  {si:>21}  {rs:>20}  {ok:>11}  "
                         f"{wid:>12}")
    return lines
