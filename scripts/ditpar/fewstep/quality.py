"""Quality gate for parallel forms that are not bitwise exact: each plan's outputs against one device's.

Per seed k, PSNR and SSIM (scikit-image) of plan/seed<k> against reference/seed<k>. The band is the
one-device seed-to-seed band: the closest two different seeds of the reference come (highest PSNR and SSIM over
seed pairs). A plan passes when, on every seed, it is closer to its own seed's reference than that; it fails
otherwise; a plan with nothing compared is no-evidence. See references/fewstep-validation.md section 11.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any

import numpy as np

from ditpar.errors import InputError, NoEvidenceError
from ditpar.fewstep.frames import Sample

EXTRA = 'pip install -e ".[quality]" (or pip install scikit-image)'
EXIT_CODES = {"pass": 0, "fail": 1, "no-evidence": 2}


def _metrics():
    """scikit-image's metrics module, or one clear line naming the extra."""
    try:
        from skimage import metrics
    except ModuleNotFoundError:
        raise InputError(f"PSNR and SSIM need scikit-image, which is not installed: {EXTRA}") from None
    return metrics


def psnr_db(a: np.ndarray, b: np.ndarray, peak: float) -> float:
    """10 log10(peak^2 / MSE) over every pixel of every frame; inf for identical outputs."""
    if np.array_equal(a, b):
        return math.inf
    return float(_metrics().peak_signal_noise_ratio(a.astype(np.float64), b.astype(np.float64), data_range=peak))


def ssim(a: np.ndarray, b: np.ndarray, peak: float) -> float:
    """Mean over frames of scikit-image's SSIM (7x7 window, channels averaged)."""
    m = _metrics()
    colour = a.ndim == 4
    vals = [m.structural_similarity(a[t].astype(np.float64), b[t].astype(np.float64), data_range=peak,
                                    channel_axis=-1 if colour else None) for t in range(a.shape[0])]
    return float(np.mean(vals))


def _check_pair(ref: Sample, other: Sample) -> None:
    """Same frame count, size, channels and value range, or an error naming the file."""
    if other.frames.shape != ref.frames.shape:
        raise InputError(f"{other.path}: shape {other.frames.shape} (frames, height, width[, channels]); "
                         f"{ref.path} has {ref.frames.shape}")
    if other.peak != ref.peak:
        raise InputError(f"{other.path}: value range 0..{other.peak:g}, {ref.path} has 0..{ref.peak:g}")


def band(ref: dict[int, Sample]) -> dict[str, Any]:
    """The one-device seed-to-seed band: PSNR and SSIM of every pair of the reference's seeds."""
    seeds = sorted(ref)
    if len(seeds) < 2:
        raise NoEvidenceError(f"the reference has {len(seeds)} seed(s) ({seeds}); the seed-to-seed band needs "
                              "at least 2 (run one device with two or more seeds)")
    pairs = []
    for i, j in combinations(seeds, 2):
        _check_pair(ref[i], ref[j])
        p = psnr_db(ref[i].frames, ref[j].frames, ref[i].peak)
        if math.isinf(p):
            raise NoEvidenceError(f"{ref[i].path} and {ref[j].path} are identical: the seed does not reach the "
                                  "generator, so the band is empty")
        pairs.append({"seed_a": i, "seed_b": j, "psnr_db": p, "ssim": ssim(ref[i].frames, ref[j].frames,
                                                                             ref[i].peak)})
    return {"seeds": seeds, "pairs": pairs, "psnr_db": max(p["psnr_db"] for p in pairs),
            "ssim": max(p["ssim"] for p in pairs)}


def _lpips_scorer(want: bool) -> tuple[Any, str | None]:
    """An LPIPS function when asked and the lpips package is there, else (None, why not)."""
    if not want:
        return None, "LPIPS not computed (pass --lpips with the lpips package and its weights installed)"
    try:
        import lpips
        import torch
    except ModuleNotFoundError as exc:
        return None, f"LPIPS not computed: the Python package '{exc.name}' is not installed (pip install lpips)"
    try:
        net = lpips.LPIPS(net="alex", verbose=False)
    except Exception as exc:  # its AlexNet weights come from torchvision's download when not cached
        return None, f"LPIPS not computed: the lpips network could not be built ({type(exc).__name__}: {exc})"

    def score(a: np.ndarray, b: np.ndarray, peak: float) -> float:
        def t(x: np.ndarray):
            x = x if x.ndim == 4 else np.repeat(x[..., None], 3, axis=-1)
            return torch.from_numpy(x[..., :3].astype(np.float32) / peak * 2 - 1).permute(0, 3, 1, 2)
        with torch.no_grad():
            return float(net(t(a), t(b)).mean())
    return score, None


def gate(plans: dict[str, dict[int, Sample]], reference: str, lpips: bool = False,
         margin_db: float = 0.0) -> dict[str, Any]:
    """Compare every plan with the reference, seed by seed, against the seed-to-seed band (+ margin_db of PSNR)."""
    if reference not in plans:
        raise InputError(f"no reference folder '{reference}'; plan folders: {', '.join(plans) or 'none'} "
                         "(--reference names the one-device run)")
    ref = plans[reference]
    b = band(ref)
    b["margin_db"] = margin_db
    scorer, lpips_note = _lpips_scorer(lpips)
    rows, verdicts = [], []
    for name, seeds in plans.items():
        if name == reference:
            continue
        extra = sorted(set(seeds) - set(ref))
        if extra:
            raise InputError(f"{seeds[extra[0]].path}: seed {extra[0]} has no one-device reference; "
                             f"reference seeds: {b['seeds']}")
        missing = sorted(set(ref) - set(seeds))
        per_seed = []
        for k in sorted(seeds):
            _check_pair(ref[k], seeds[k])
            p = psnr_db(seeds[k].frames, ref[k].frames, ref[k].peak)
            s = ssim(seeds[k].frames, ref[k].frames, ref[k].peak)
            row = {"plan": name, "seed": k, "psnr_db": p, "identical": math.isinf(p), "ssim": s,
                   "frames_psnr_db": [psnr_db(seeds[k].frames[t], ref[k].frames[t], ref[k].peak)
                                      for t in range(ref[k].frames.shape[0])],
                   "lpips": scorer(seeds[k].frames, ref[k].frames, ref[k].peak) if scorer else None,
                   "within_band": p > b["psnr_db"] + margin_db and s > b["ssim"]}
            per_seed.append(row)
        rows += per_seed
        if not per_seed:
            verdict, why = "no-evidence", "no seed output in the folder: nothing compared"
        elif all(r["within_band"] for r in per_seed):
            verdict, why = "pass", "every seed closer to its reference than two one-device seeds are"
        else:
            bad = [r["seed"] for r in per_seed if not r["within_band"]]
            verdict, why = "fail", (f"seed(s) {bad} as far from the reference as a different seed is, or further"
                                    if not margin_db else f"seed(s) {bad} not {margin_db:g} dB above the band")
        if missing and per_seed:
            why += f" (on {len(per_seed)} of {len(ref)} seeds)"
        verdicts.append({"plan": name, "verdict": verdict, "seeds_compared": len(per_seed),
                         "seeds_missing": missing,
                         "min_psnr_db": min((r["psnr_db"] for r in per_seed), default=None),
                         "min_ssim": min((r["ssim"] for r in per_seed), default=None),
                         "above_band_db": (min(r["psnr_db"] for r in per_seed) - b["psnr_db"]) if per_seed else None,
                         "reason": why})
    if not verdicts:
        raise NoEvidenceError(f"only the reference '{reference}' is there: no plan folder to compare")
    overall = ("fail" if any(v["verdict"] == "fail" for v in verdicts)
               else "no-evidence" if any(v["verdict"] == "no-evidence" for v in verdicts) else "pass")
    return {"verdict": overall, "reference": reference, "band": b, "plans": verdicts, "seeds": rows,
            "lpips_note": lpips_note}


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return "identical" if math.isinf(x) else f"{x:.2f}"


def render_text(payload: dict[str, Any]) -> str:
    """The readable report: band, one row per plan, the verdict."""
    from ditpar import cli

    b = payload["band"]
    lines = [f"reference: {payload['reference']} (one device), seeds {b['seeds']}",
             f"seed-to-seed band (closest two different one-device seeds): PSNR {b['psnr_db']:.2f} dB, "
             f"SSIM {b['ssim']:.4f}; a plan passes when every seed is closer to its own reference than that"
             + (f" by more than {b['margin_db']:g} dB of PSNR" if b["margin_db"] else ""), ""]
    table = [{**v, "min_psnr_db": _fmt(v["min_psnr_db"]), "above_band_db": _fmt(v["above_band_db"]),
              "min_ssim": "-" if v["min_ssim"] is None else f"{v['min_ssim']:.4f}",
              "seeds_missing": ",".join(map(str, v["seeds_missing"])) or "-"} for v in payload["plans"]]
    lines.append(cli.format_table(table, ["plan", "verdict", "seeds_compared", "min_psnr_db", "above_band_db",
                                          "min_ssim", "seeds_missing", "reason"]))
    lines += ["", payload["lpips_note"] or "LPIPS: see the per-seed rows (--json, --csv)",
              f"verdict: {payload['verdict']}"]
    return "\n".join(lines)


def seeds_csv(payload: dict[str, Any]):
    """The per-seed table (plan, seed, psnr_db, identical, ssim, lpips, within_band) as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(payload["seeds"], columns=["plan", "seed", "psnr_db", "identical", "ssim", "lpips",
                                                   "within_band"])
