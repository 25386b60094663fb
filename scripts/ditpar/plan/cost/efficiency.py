"""Size-dependent compute efficiency of one card's GEMMs and attention, from a sourced table per device family.

`templates/gemm_efficiency.toml` holds measured bf16 throughput by GEMM shape (M, N, K) for a device family.
A per-card GEMM runs at `peak x mfu x relative(M, N, K)`: `relative` is the measured throughput at that shape
over the family's best measured throughput, so the preset's `mfu` stays the large-GEMM ceiling (and what
--ref-latency calibrates), and small GEMMs (a TP-sharded N or K, a few tokens per card) run below it. Attention
is priced as its two batched GEMMs (Q K^T and P V) relative to a large attention of the same head width.
An accelerator with no sourced curve gets relative = 1 and says so (`Efficiency.source`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ditpar.errors import InputError
from ditpar.plan.inputs.presets import _read_toml, normalize, templates_dir

TABLE_NAME = "gemm_efficiency.toml"
LARGE = 1 << 30   # a dimension "as large as the table goes" (held at the grid edge)


@dataclass(frozen=True)
class GemmCurve:
    """Measured TFLOP/s of one device family on a log2-spaced (M, N, K) grid."""

    family: str
    accelerators: tuple[str, ...]
    peak_tflops: float
    dims: tuple[int, ...]
    tflops: tuple[tuple[tuple[float, ...], ...], ...]   # [m][n][k]
    source: str
    verified: bool
    _memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def best_tflops(self) -> float:
        """Best measured throughput of the family: the ceiling `mfu` stands for (the grid's maximum, found once)."""
        hit = self._memo.get("best")
        if hit is None:
            hit = self._memo["best"] = max(v for plane in self.tflops for row in plane for v in row)
        return hit

    def achieved_tflops(self, m: float, n: float, k: float) -> float:
        """Throughput at (m, n, k): linear in log2 of each dimension between grid points, held at the edges."""
        key = (float(m), float(n), float(k))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = _interp(self, *key)
        return hit

    def fraction_of_peak(self, m: float, n: float, k: float) -> float:
        return self.achieved_tflops(m, n, k) / self.peak_tflops

    def relative(self, m: float, n: float, k: float) -> float:
        """Throughput at (m, n, k) over the family's best: 1 for a large GEMM, below 1 for a small one."""
        return min(1.0, self.achieved_tflops(m, n, k) / self.best_tflops)


def _interp(curve: GemmCurve, m: float, n: float, k: float) -> float:
    logs = [math.log2(d) for d in curve.dims]
    coords = []
    for x in (m, n, k):
        t = math.log2(min(max(x, curve.dims[0]), curve.dims[-1]))
        i = min(max(bisect.bisect_right(logs, t) - 1, 0), len(logs) - 2)
        coords.append((i, (t - logs[i]) / (logs[i + 1] - logs[i])))
    (i, a), (j, b), (q, c) = coords
    total = 0.0
    for di, wi in ((0, 1 - a), (1, a)):
        for dj, wj in ((0, 1 - b), (1, b)):
            for dq, wq in ((0, 1 - c), (1, c)):
                w = wi * wj * wq
                if w:
                    total += w * curve.tflops[i + di][j + dj][q + dq]
    return total


def table_path() -> Path:
    return templates_dir() / TABLE_NAME


@lru_cache(maxsize=4)
def load_curves(path: str | None = None) -> tuple[GemmCurve, ...]:
    """Every family of the table; a malformed table is an InputError naming the file and key."""
    p = Path(path) if path else table_path()
    if not p.is_file():
        return ()     # no table: every family at the preset mfu, and describe() says so
    data = _read_toml(p)
    out = []
    for name, fam in (data.get("families") or {}).items():
        where = f"{p}: families.{name}"
        try:
            dims = tuple(int(d) for d in fam["dims"])
            grid = {(int(r["m"]), int(r["n"])): tuple(float(v) for v in r["tflops"]) for r in fam["grid"]}
            tflops = tuple(tuple(grid[(m, n)] for n in dims) for m in dims)
            curve = GemmCurve(name, tuple(str(a) for a in fam["accelerators"]), float(fam["peak_tflops_bf16"]),
                              dims, tflops, str(fam["source"]), bool(fam.get("verified", False)))
        except KeyError as exc:
            raise InputError(f"{where}: missing key or grid row {exc}") from None
        except (TypeError, ValueError) as exc:
            raise InputError(f"{where}: {exc}") from None
        if len(dims) < 2 or list(dims) != sorted(set(dims)) or any(len(r) != len(dims) for pl in tflops for r in pl):
            raise InputError(f"{where}: dims must be >= 2 increasing sizes and every tflops row one value per dim")
        if not all(v > 0 for pl in tflops for r in pl for v in r) or curve.peak_tflops <= 0:
            raise InputError(f"{where}: throughput figures and peak_tflops_bf16 must be positive")
        out.append(curve)
    return tuple(out)


def curve_for(hw) -> GemmCurve | ScaledCurve | None:
    """The family curve of the machine's accelerator; else the equal-time derivation from a measured family
    (`[derived.*]` of the table) at the preset's peak; None when neither lists it."""
    return _curve_for(str(getattr(hw, "accelerator", "")), float(getattr(hw, "peak_tflops_bf16", 0) or 0))


@lru_cache(maxsize=256)
def _curve_for(accelerator: str, peak: float) -> GemmCurve | ScaledCurve | None:
    acc = normalize(accelerator)
    curves = load_curves()
    for curve in curves:
        if acc and acc in {normalize(a) for a in curve.accelerators}:
            return curve
    for name, (base_name, accs, rule) in load_derived().items():
        base = next((c for c in curves if c.family == base_name), None)
        if base is not None and peak > 0 and acc in {normalize(a) for a in accs}:
            return ScaledCurve(f"{name} from {base_name}", base, (base.peak_tflops / peak) ** (1.0 / 3.0), peak,
                               f"derived ({rule}) from {base.family}: {base.source}")
    return None


@dataclass(frozen=True)
class ScaledCurve:
    """A measured family's curve moved to a device of another peak by the equal-time rule (gemm_efficiency.toml
    [derived]): every dimension scaled by `scale` before the look-up, throughput scaled to this peak."""

    family: str
    base: GemmCurve
    scale: float
    peak_tflops: float
    source: str
    verified: bool = False
    _memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def best_tflops(self) -> float:
        return self.base.best_tflops * self.peak_tflops / self.base.peak_tflops

    def achieved_tflops(self, m: float, n: float, k: float) -> float:
        key = (float(m), float(n), float(k))
        hit = self._memo.get(key)
        if hit is None:
            s = self.scale
            hit = self._memo[key] = self.base.achieved_tflops(m * s, n * s, k * s) * self.peak_tflops / self.base.peak_tflops
        return hit

    def fraction_of_peak(self, m: float, n: float, k: float) -> float:
        return self.achieved_tflops(m, n, k) / self.peak_tflops

    def relative(self, m: float, n: float, k: float) -> float:
        return min(1.0, self.achieved_tflops(m, n, k) / self.best_tflops)


@lru_cache(maxsize=4)
def load_derived(path: str | None = None) -> dict[str, tuple[str, tuple[str, ...], str]]:
    """`[derived.<name>]` entries: name -> (measured family it scales, accelerators, stated rule)."""
    p = Path(path) if path else table_path()
    if not p.is_file():
        return {}
    out = {}
    for name, d in (_read_toml(p).get("derived") or {}).items():
        try:
            out[name] = (str(d["from"]), tuple(str(a) for a in d["accelerators"]), str(d["rule"]))
        except (KeyError, TypeError) as exc:
            raise InputError(f"{p}: derived.{name}: missing or malformed key {exc}") from None
    return out


@dataclass(frozen=True)
class Gemm:
    """One per-card GEMM of a block: M rows (tokens on this card, batch included) x K in -> N out."""

    m: float
    n: float
    k: float

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


def linear_efficiency(curve: GemmCurve | None, gemms: tuple[Gemm, ...], scale: float = 1.0) -> float:
    """FLOP-weighted efficiency of a block's projections relative to large GEMMs (time = FLOPs / (rate x eff));
    `scale` shrinks M (a PipeFusion patch)."""
    if curve is None or not gemms:
        return 1.0
    flops = time = 0.0
    for g in gemms:
        f = g.flops * scale
        flops += f
        time += f / curve.relative(g.m * scale, g.n, g.k)
    return flops / time if time else 1.0


def attention_efficiency(curve: GemmCurve | None, rows: float, kv: float, head_dim: float) -> float:
    """Efficiency of attention with `rows` query rows on the card (heads x tokens x batch) over `kv` keys,
    relative to a large attention of the same head width: Q K^T (rows x kv, inner head_dim) and
    P V (rows x head_dim, inner kv) at equal FLOPs."""
    if curve is None or rows <= 0 or kv <= 0:
        return 1.0
    def both(r: float, s: float) -> float:
        return 2.0 / (1.0 / curve.achieved_tflops(r, s, head_dim) + 1.0 / curve.achieved_tflops(r, head_dim, s))
    return min(1.0, both(rows, kv) / both(LARGE, LARGE))


def describe(hw) -> dict:
    """Where the machine's compute efficiency comes from, for the report and JSON."""
    curve = curve_for(hw)
    if curve is None:
        return {"family": None, "source": f"{getattr(hw, 'accelerator', '?')} has no sourced GEMM curve in "
                f"templates/{TABLE_NAME}; every GEMM and attention at the preset mfu (no shape term)",
                "verified": False}
    return {"family": curve.family, "source": curve.source, "verified": curve.verified,
            "derived": isinstance(curve, ScaledCurve),
            "best_fraction_of_peak": round(curve.best_tflops / curve.peak_tflops, 3)}
