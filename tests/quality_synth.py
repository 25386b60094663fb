"""Tiny synthetic outputs for the quality gate: one-device images per seed, plans = reference + known noise.

``base(seed)`` is a smooth 32x32 RGB pattern that differs by seed; a plan adds Gaussian noise of a known sigma
(rounded and clipped to uint8), so its PSNR against the reference is close to 10 log10(255^2 / sigma^2).
``write_layout`` also writes the shipped example folder tests/data/quality (python tests/quality_synth.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SIZE = 32
SEEDS = (0, 1, 2)
# plan -> noise sigma in 8-bit levels (0: a bit-exact copy); 'causal-bug' stands for a form that changed the
# sample: its seed k is the one-device image of seed k+1 plus noise of sigma 2
PLANS = {"1dev": None, "1dev-rerun": 0.0, "U4": 2.0, "R4-fp8": 6.0, "causal-bug": -2.0}


def base(seed: int) -> np.ndarray:
    """The one-device image of a seed: sinusoid stripes whose phase and frequency follow the seed."""
    rng = np.random.default_rng(1000 + seed)
    y, x = np.mgrid[0:SIZE, 0:SIZE] / SIZE
    chans = [np.sin(2 * np.pi * (rng.uniform(1, 3) * x + rng.uniform(1, 3) * y + rng.uniform(0, 1)))
             for _ in range(3)]
    return np.round(127.5 + 100 * np.stack(chans, axis=-1)).astype(np.uint8)


def noisy(img: np.ndarray, sigma: float, seed: int) -> np.ndarray:
    """img plus N(0, sigma^2) noise, rounded and clipped to uint8."""
    rng = np.random.default_rng(seed)
    return np.clip(np.round(img + rng.normal(0, sigma, img.shape)), 0, 255).astype(np.uint8)


def save_png(path: Path, arr: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)


def write_layout(root: Path, plans: dict[str, float | None] = PLANS, seeds=SEEDS) -> Path:
    """DIR/<plan>/seed<k>.png for every plan and seed."""
    for i, (plan, sigma) in enumerate(plans.items()):
        for k in seeds:
            src = base(k) if sigma is None or sigma >= 0 else base(SEEDS[(SEEDS.index(k) + 1) % len(SEEDS)])
            img = src if not sigma else noisy(src, abs(sigma), 100 * i + k)
            save_png(root / plan / f"seed{k}.png", img)
    return root


if __name__ == "__main__":
    write_layout(Path(__file__).resolve().parent / "data" / "quality")
