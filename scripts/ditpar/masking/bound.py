"""Exact ceiling of chunked communication masking for one layer (closed form; see references/comm-masking.md).

Model, per layer: C = time of the masked collective family, F = compute that can run beside it,
n = chunks. Chunk g has a forward collective of a = c - D, an attention chunk of f = F/n that needs
it, and a reverse collective of b = D that needs the attention chunk; c = C/n = a + b. Collectives
run one after another on one communication stream, attention chunks one after another on one compute
stream. Every schedule then exposes at least

    E_min = max(c, C - F, n*a + b - (n-1)*f, a + n*b - (n-1)*f)

and issuing all forwards before all reverses attains it (masksim checks this), so the ceiling on the
masking rate (share of C not exposed) is 1 - E_min / C.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ditpar.errors import InputError

#: names of the four lower bounds on exposure, in the order of :func:`exposure_terms`
TERMS = ("fill+drain", "comm-minus-compute", "forward-backlog", "reverse-backlog")

TERM_MEANING = {
    "fill+drain": "first forward and last reverse have nothing to hide behind: c",
    "comm-minus-compute": "overlap cannot exceed compute: C - F",
    "forward-backlog": "all forwards finish before the last attention chunk: n*a + b - (n-1)*f",
    "reverse-backlog": "no reverse starts before the first attention chunk ends: a + n*b - (n-1)*f",
}

_REL_TOL = 1e-12


@dataclass(frozen=True)
class Layer:
    """Per-layer inputs of the masking model, in microseconds."""

    comm_us: float
    compute_us: float
    chunks: int
    drain_us: float = 0.0

    @property
    def c_us(self) -> float:
        """Communication per chunk (forward + reverse)."""
        return self.comm_us / self.chunks

    @property
    def f_us(self) -> float:
        """Attention compute per chunk."""
        return self.compute_us / self.chunks

    @property
    def forward_us(self) -> float:
        """Forward collective of one chunk: a = c - D."""
        return max(self.c_us - self.drain_us, 0.0)

    @property
    def reverse_us(self) -> float:
        """Reverse collective of one chunk (the drain): b = D."""
        return self.drain_us

    @property
    def reverse_share(self) -> float:
        """Share of a chunk's communication that is its reverse collective."""
        return self.drain_us / self.c_us


def check_time(name: str, value: float, allow_zero: bool = False) -> float:
    """Return value as float, or raise InputError if it is not a finite positive time."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected a time in us, got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InputError(f"{name}: expected a finite time {bound} us, got {value!r}")
    return v


MAX_CHUNKS = 100_000  # bound on every chunk count a user gives (closed forms; calc --max-chunks scans to it)


def check_chunks(name: str, value: int) -> int:
    """Return value as int, or raise InputError unless it is a whole number >= 1."""
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):   # OverflowError: int(inf)
        raise InputError(f"{name}: expected a whole number of chunks >= 1, got {value!r}") from None
    if n != value or n < 1:
        raise InputError(f"{name}: expected a whole number of chunks >= 1, got {value!r}")
    if n > MAX_CHUNKS:
        raise InputError(f"{name}: {n} is above {MAX_CHUNKS}; no real split goes that far")
    return n


def make_layer(comm_us: float, compute_us: float, chunks: int, drain_us: float | None = None,
               reverse_share: float | None = None) -> Layer:
    """Validated :class:`Layer`; the drain comes from drain_us or reverse_share (not both)."""
    C = check_time("--comm-us", comm_us)
    F = check_time("--compute-us", compute_us)
    n = check_chunks("--chunks", chunks)
    if drain_us is not None and reverse_share is not None:
        raise InputError("--drain-us and --reverse-share: give one of them, not both")
    c = C / n
    if reverse_share is not None:
        r = float(reverse_share)
        if not (math.isfinite(r) and 0 <= r <= 1):
            raise InputError(f"--reverse-share: expected a share in [0, 1], got {reverse_share!r}")
        D = r * c
    else:
        D = check_time("--drain-us", 0.0 if drain_us is None else drain_us, allow_zero=True)
        if D > c * (1 + _REL_TOL):
            raise InputError(
                f"--drain-us: the reverse collective of one chunk ({D:g} us) cannot exceed the chunk's "
                f"whole communication c = C/n = {c:g} us")
        D = min(D, c)
    return Layer(C, F, n, D)


def exposure_terms(layer: Layer) -> dict[str, float]:
    """The four lower bounds on exposed communication (us per layer); the largest is E_min."""
    n, c, f = layer.chunks, layer.c_us, layer.f_us
    a, b = layer.forward_us, layer.reverse_us
    return {
        "fill+drain": c,
        "comm-minus-compute": layer.comm_us - layer.compute_us,
        "forward-backlog": n * a + b - (n - 1) * f,
        "reverse-backlog": a + n * b - (n - 1) * f,
    }


def exposure_min(layer: Layer) -> float:
    """Least exposed communication any issue order can reach (us per layer)."""
    return max(exposure_terms(layer).values())


def binding_term(layer: Layer) -> str:
    """Name of the bound that decides E_min (ties go to the earlier name in TERMS)."""
    terms = exposure_terms(layer)
    top = max(terms.values())
    tol = _REL_TOL * max(layer.comm_us, 1.0)
    return next(name for name in TERMS if terms[name] >= top - tol)


def ceiling(layer: Layer) -> float:
    """Highest reachable masking rate: 1 - E_min / C."""
    return 1.0 - exposure_min(layer) / layer.comm_us


def ideal(chunks: int) -> float:
    """1 - 1/n: the ceiling when per-chunk compute covers per-chunk communication."""
    return 1.0 - 1.0 / chunks


def ideal_limit(layer: Layer) -> float:
    """Largest c/f at which the ceiling still equals the ideal 1 - 1/n at this n and reverse share.

    E_min = c exactly when C - F <= c (c/f <= n/(n-1)) and f >= max(a, b) (c/f <= c/max(a, b)),
    so the ideal holds up to min(n/(n-1), 1/max(share, 1 - share)); with one chunk E_min = C always (inf).
    """
    n = layer.chunks
    if n == 1:
        return math.inf
    share = layer.reverse_share
    return min(n / (n - 1), 1.0 / max(share, 1.0 - share))


def regime(layer: Layer) -> str:
    """'compute-bound' when the ceiling equals the ideal 1 - 1/n (c/f <= ideal_limit), else 'comm-bound'."""
    return "compute-bound" if c_over_f(layer) <= ideal_limit(layer) * (1 + _REL_TOL) else "comm-bound"


def c_over_f(layer: Layer) -> float:
    """The one number that decides the regime: c/f = C/F."""
    return layer.comm_us / layer.compute_us


def large_n_limit(layer: Layer) -> float:
    """Ceiling as n grows with C, F and the reverse share fixed and no per-chunk overhead: min(1, F/C)."""
    return min(1.0, layer.compute_us / layer.comm_us)


def compute_needed(layer: Layer, target: float) -> float | None:
    """Least F (us per layer) that lets this n reach masking `target`; None if 1 - 1/n < target."""
    n = layer.chunks
    if target > ideal(n) * (1 + _REL_TOL):
        return None
    c, a, b = layer.c_us, layer.forward_us, layer.reverse_us
    budget = max((1 - target) * layer.comm_us - c, 0.0)  # what the three other terms may reach
    f = max(0.0, ((n - 1) * c - budget) / n)
    if n > 1:
        f = max(f, max(a, b) - budget / (n - 1))
    return n * f


def comm_needed(layer: Layer, target: float) -> float | None:
    """Largest C (us per layer, reverse share fixed) that reaches `target` at this n and F; None if unreachable.

    math.inf means any C reaches it (the target is at or below 0 for this n).
    """
    n = layer.chunks
    if target > ideal(n) * (1 + _REL_TOL):
        return None
    r = layer.reverse_share
    s = max(r, 1 - r)
    gamma = n * (1 - target) - 1  # allowed (E_min - c) / c
    x = max(0.0, ((n - 1) - gamma) / n)  # least f/c
    if n > 1:
        x = max(x, s - gamma / (n - 1))
    if x <= 0:
        return math.inf
    return n * layer.f_us / x


def divisors(value: int) -> list[int]:
    """Positive divisors of value, ascending."""
    return [d for d in range(1, value + 1) if value % d == 0]


def chunk_count(requested: int, heads_local: int) -> int:
    """Largest divisor of the local head count not above the request (the recipe's rule)."""
    requested = check_chunks("chunks", requested)
    heads_local = check_chunks("heads", heads_local)
    return max(d for d in divisors(heads_local) if d <= requested)


def with_overhead(base_comm_us: float, compute_us: float, chunks: int, overhead_us: float,
                  reverse_share: float) -> Layer:
    """Layer at n chunks when each chunk pays a fixed overhead: c(n) = C0/n + o."""
    c = base_comm_us / chunks + overhead_us
    return Layer(c * chunks, compute_us, chunks, reverse_share * c)


def best_chunks(layer: Layer, overhead_us: float, candidates: list[int],
                measured_at: int | None = None) -> dict[str, object]:
    """The n among candidates with the least exposed time when each chunk pays overhead o.

    C was measured at ``measured_at`` chunks (default: the layer's own n), so the overhead-free part
    is C0 = C - m*o. Exposed time (not masking rate) is minimised: it is what the layer's time depends on.
    """
    o = check_time("--overhead-us", overhead_us, allow_zero=True)
    at = layer.chunks if measured_at is None else check_chunks("--measured-at-chunks", measured_at)
    base = layer.comm_us - at * o
    if base <= 0:
        raise InputError(
            f"--overhead-us: {at} chunks (where C was measured) x {o:g} us overhead is not below --comm-us "
            f"{layer.comm_us:g}; the overhead-free communication C - m*o must be > 0")
    rows = []
    for m in candidates:
        lay = with_overhead(base, layer.compute_us, m, o, layer.reverse_share)
        rows.append({"chunks": m, "comm_us": lay.comm_us, "exposed_us": exposure_min(lay),
                     "ceiling": ceiling(lay), "regime": regime(lay)})
    best = min(rows, key=lambda r: (r["exposed_us"], r["chunks"]))
    return {"overhead_us": o, "measured_at_chunks": at, "base_comm_us": base, "best_chunks": best["chunks"],
            "best_exposed_us": best["exposed_us"], "best_ceiling": best["ceiling"], "table": rows}


def analyse(layer: Layer, target: float | None = None, overhead_us: float | None = None,
            candidates: list[int] | None = None, measured: float | None = None,
            measured_at_chunks: int | None = None) -> dict[str, object]:
    """Everything `mask_bound.py calc` reports, as one JSON-ready mapping."""
    e_min = exposure_min(layer)
    ceil = ceiling(layer)
    out: dict[str, object] = {
        "comm_us": layer.comm_us,
        "compute_us": layer.compute_us,
        "chunks": layer.chunks,
        "drain_us": layer.drain_us,
        "c_us": layer.c_us,
        "f_us": layer.f_us,
        "forward_us": layer.forward_us,
        "reverse_us": layer.reverse_us,
        "c_over_f": c_over_f(layer),
        "regime": regime(layer),
        "ideal": ideal(layer.chunks),
        "ideal_up_to_c_over_f": ideal_limit(layer),
        "ceiling": ceil,
        "exposed_min_us": e_min,
        "binding": binding_term(layer),
        "terms_us": exposure_terms(layer),
        "large_n_limit": large_n_limit(layer),
        "measured": None,
        "achieved_fraction": None,
        "target": None,
        "best": None,
    }
    if measured is not None:
        m = float(measured)
        if not (math.isfinite(m) and m <= 1):
            raise InputError(f"--measured: expected a masking rate <= 1, got {measured!r}")
        out["measured"] = m
        out["achieved_fraction"] = m / ceil if ceil > 0 else None
    if target is not None:
        t = float(target)
        if not (math.isfinite(t) and 0 < t < 1):
            raise InputError(f"--target: expected a masking rate in (0, 1), got {target!r}")
        f_need, c_need = compute_needed(layer, t), comm_needed(layer, t)
        out["target"] = {
            "masking": t,
            "reachable_at_this_n": f_need is not None,
            "chunks_needed_at_least": math.ceil(1 / (1 - t) - _REL_TOL),
            "compute_needed_us": f_need,
            "compute_increase_us": None if f_need is None else max(f_need - layer.compute_us, 0.0),
            "comm_allowed_us": c_need,
            "comm_reduction_us": None if c_need is None else max(layer.comm_us - c_need, 0.0),
        }
    if overhead_us is not None:
        cands = candidates or list(range(1, 65))
        out["best"] = best_chunks(layer, overhead_us, cands, measured_at_chunks)
    return out


def exposure_for_order(layer: Layer, order: str) -> float:
    """Exposed communication of one issue order in the two-stream model (closed form, us per layer).

    forward-first attains E_min; pipelined (n >= 2) adds what the comm stream loses waiting for the
    first and last attention chunk: max(E_min, C - F + max(0, f - a) + max(0, f - b)); alternating
    serialises every chunk, so all of C is exposed. With one chunk every order exposes C.
    """
    n, C, F = layer.chunks, layer.comm_us, layer.compute_us
    if n == 1 or order == "alternating":
        return C
    e_min = exposure_min(layer)
    if order == "forward-first":
        return e_min
    if order == "pipelined":
        f, a, b = layer.f_us, layer.forward_us, layer.reverse_us
        return max(e_min, C - F + max(0.0, f - a) + max(0.0, f - b))
    raise InputError(f"--order: unknown order {order!r}; expected forward-first, pipelined or alternating")


def step_gain(layer: Layer, unit: str, layers: int | None = None, step_us: float | None = None
              ) -> dict[str, object]:
    """What the ceiling is worth for the whole step: the step shrinks by at most C - E_min per layer.

    unit "pct": C and F were given as percent of the step (all layers of the family together), so
    the saving is already a share of the step. unit "us": C and F are per layer; with the layer
    count and the step time the saving becomes a share of the step. C is taken as fully exposed
    before masking (the unmasked run), which is what a profile's exposed share measures.
    """
    saved = layer.comm_us - exposure_min(layer)
    if unit == "pct":
        if layer.comm_us > 100 or layer.compute_us > 100:
            raise InputError("--comm-pct/--compute-pct: a share of the step is at most 100 %")
        return {"unit": "pct", "exposed_before_pct": layer.comm_us,
                "exposed_after_pct": layer.comm_us - saved, "step_saving_pct": saved,
                "speedup": 100.0 / (100.0 - saved)}
    if layers is None or step_us is None:
        return {"unit": "us", "saving_per_layer_us": saved, "step_saving_pct": None, "speedup": None}
    n_layers = check_chunks("--layers", layers)
    step = check_time("--step-us", step_us)
    total = saved * n_layers
    if layer.comm_us * n_layers > step * (1 + _REL_TOL):
        raise InputError(f"--step-us {step:g}: shorter than the collective alone "
                         f"({layer.comm_us:g} us x {n_layers} layers)")
    return {"unit": "us", "saving_per_layer_us": saved, "layers": n_layers, "step_us": step,
            "step_saving_us": total, "step_saving_pct": 100.0 * total / step,
            "speedup": step / (step - total)}
