"""The VAE decode split over the request's cards (VAE patch / tile / spatial-shard parallel), priced from published pairs.

Frameworks that split the decode (vLLM-Omni `vae_patch_parallel_size`, xDiT DistVAE `--use_parallel_vae`, SGLang
parallel decode, LightX2V `parallel_vae`, TensorRT-LLM `parallel_vae_size`) give each rank a band or a set of
tiles and exchange halos or gather the pieces. The published speedups stay well under the card count (halo
exchange, overlapping tiles decoded twice, the final gather and stitch on one rank), so the split is priced as
Amdahl's law with a serial share taken from published decode times measured serial and split on the same box:

    t(n) = t(1) x (s + (1 - s) / n),   s = median of the published pairs' (t(n) / t(1) - 1/n) / (1 - 1/n)
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class SplitMeasurement:
    """One published decode time on one card and split over n cards, same model, shape and box."""

    label: str
    source: str
    cards: int
    serial_s: float
    split_s: float

    @property
    def serial_share(self) -> float:
        """Amdahl's serial share that reproduces this pair."""
        return (self.split_s / self.serial_s - 1.0 / self.cards) / (1.0 - 1.0 / self.cards)


SPLITS: tuple[SplitMeasurement, ...] = (
    SplitMeasurement("HunyuanVideo 848x480x77, 4x H200", "github.com/sgl-project/sglang/pull/36012 ('Lossless decode "
                     "falls from a 5.713 s mean to 1.654 s': sequential tiled decode vs tiles over the 4 Ulysses ranks)",
                     4, 5.713, 1.654),
    SplitMeasurement("Wan2.1-T2V-1.3B 832x480x81, 2x H200", "github.com/sgl-project/sglang/pull/27875 (CFG-only, "
                     "origin/main decode 2631.4 ms on one rank, the PR 1814.8 ms on the two CFG ranks)", 2, 2.6314, 1.8148),
    SplitMeasurement("SD3.5 1024px tiled, 2x V100", "github.com/vllm-project/vllm-omni/pull/1428 (VAE decode time "
                     "pp=1 ~271.9 ms, pp=2 ~203.6 ms)", 2, 0.2719, 0.2036),
    SplitMeasurement("LTX-2 image-to-video, TP2", "github.com/vllm-project/vllm-omni/pull/2135 (VAE patch parallel size 1: "
                     "730.73 ms, 2: 397.07 ms; its text-to-video row, 11474 -> 294 ms, is left out: a 39x gain on 2 "
                     "cards is not a split)", 2, 0.73073, 0.39707),
)

#: Amdahl serial share of a split decode (median of the published pairs)
SERIAL_SHARE = statistics.median(m.serial_share for m in SPLITS)


def split_decode_s(serial_s: float, cards: int, share: float = SERIAL_SHARE) -> float:
    """Seconds of a decode of `serial_s` on one card when split over `cards` (1 = unchanged)."""
    n = max(1, int(cards))
    return serial_s if n == 1 else serial_s * (share + (1.0 - share) / n)


#: how tables and launch lines say the decode was split: a degree where they give one, else every card
_DEGREE = re.compile(r"(?:vae[_ -]?patch[_ -]?parallel(?:[_ -]?size)?|parallel[_ -]?vae(?:[_ -]?size)?|"
                     r"vae[_ -]?parallel(?:[_ -]?(?:size|degree))?|vae[_ -]?pp|distvae)\s*(?:=|:|x|\s)\s*(\d{1,3})\b", re.I)
_NAMED = re.compile(r"vae decode parallel|parallel[_ -]?vae|vae[_ -]?parallel|distvae|patch[_ -]parallel vae|"
                    r"vae[_ -]?patch[_ -]?parallel|parallel[_ -]decode", re.I)


def stated_vae_degree(text: str, cards: int) -> int:
    """Cards a table row or launch line splits the VAE decode over: the degree it states ('VAE patch parallel 4',
    'vae_patch_parallel_size=4', 'parallel_vae_size 2'), every card of the request where it names the split without
    a degree ('DistVAE', '--use_parallel_vae'), else 1 (serial). A stated 1 is serial."""
    m = _DEGREE.search(text or "")
    if m:
        return max(1, min(int(m.group(1)), max(1, cards)))
    return max(1, cards) if _NAMED.search(text or "") else 1
