"""Parallel plans (degrees whose product is the device count) and their rank layout onto domains."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import product

from ditpar.errors import InputError

DIMS = ("tp", "ulysses", "ring", "kv_allgather", "attn2d", "pipefusion", "cfg", "dp")
DEFAULT_ORDER = DIMS  # innermost (contiguous ranks, fast domain) first; xDiT's "tp-sp-pp-cfg-dp"
SEQUENCE_SLOT = ("ring", "kv_allgather", "attn2d")  # alternatives for the outer sequence axis: one per plan


@dataclass(frozen=True)
class Plan:
    """Degrees of one plan; `patches` and `warmup` matter only with PipeFusion."""

    cfg: int = 1
    ulysses: int = 1
    ring: int = 1
    kv_allgather: int = 1
    attn2d: int = 1    # Attention2D (TensorRT-LLM VisualGen): a rows x columns mesh of the sequence (attn2d_mesh)
    tp: int = 1
    pipefusion: int = 1
    dp: int = 1
    patches: int = 0   # PipeFusion patch count M (0: default = pipefusion degree)
    warmup: int = 1    # PipeFusion synchronous warm-up steps

    @property
    def devices(self) -> int:
        return self.cfg * self.sp * self.tp * self.pipefusion * self.dp

    @property
    def sp(self) -> int:
        """Sequence-parallel degree: Ulysses x ring x KV all-gather x Attention2D."""
        return self.ulysses * self.ring * self.kv_allgather * self.attn2d

    @property
    def attn2d_mesh(self) -> tuple[int, int]:
        """(Q-gather group, K/V-gather group) of the Attention2D mesh: the squarest split of the degree, the
        larger side gathering K/V (fewer bytes with GQA); TensorRT-LLM's attn2d_size = [rows, cols]."""
        return attn2d_mesh(self.attn2d)

    @property
    def num_patches(self) -> int:
        return self.patches or self.pipefusion

    @cached_property
    def used(self) -> frozenset[str]:
        """The dimensions of DIMS this plan splits (degree > 1)."""
        return frozenset(d for d in DIMS if self.degree(d) > 1)

    def degree(self, dim: str) -> int:
        return int(getattr(self, dim))

    @cached_property
    def name(self) -> str:
        """Short label such as 'cfg2 U2 R2' (single device: 'single'); made once per plan."""
        parts = [f"{short}{int(v)}" for short, v in (
            ("cfg", self.cfg), ("U", self.ulysses), ("R", self.ring), ("AG", self.kv_allgather), ("A2D", self.attn2d),
            ("TP", self.tp), ("PF", self.pipefusion), ("DP", self.dp)) if int(v) > 1]
        if self.pipefusion > 1 and self.num_patches != self.pipefusion:
            parts.append(f"M{self.num_patches}")
        return " ".join(parts) or "single"

    def as_dict(self) -> dict[str, int]:
        return {"ulysses": self.ulysses, "ring": self.ring, "kv_allgather": self.kv_allgather,
                "attn2d": self.attn2d, "pipefusion": self.pipefusion, "patches": self.num_patches if self.pipefusion > 1 else 1,
                "cfg": self.cfg, "tp": self.tp, "dp": self.dp}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def attn2d_mesh(degree: int) -> tuple[int, int]:
    """(Q-gather group size, K/V-gather group size) of an Attention2D degree: the largest divisor not above
    its square root gathers Q, the other side K and V (9 -> (3, 3), 8 -> (2, 4), 2 -> (1, 2))."""
    q = max(d for d in _divisors(max(int(degree), 1)) if d * d <= degree)
    return q, max(int(degree), 1) // q


def enumerate_plans(devices: int, cfg_available: bool, *, patches: int = 0, warmup: int = 1,
                    with_dp: bool = True) -> list[Plan]:
    """Every assignment of degrees with product `devices` (ring, KV all-gather and Attention2D share one slot;
    TP does not combine with PipeFusion in any framework we know); legality is G1's job."""
    if devices < 1:
        raise InputError(f"--devices {devices}: expected a positive device count")
    divs = _divisors(devices)
    plans = []
    slots = [(1, 1, 1)] + [(s, 1, 1) for s in divs[1:]] + [(1, s, 1) for s in divs[1:]] \
        + [(1, 1, s) for s in divs[1:]]
    for cfg, u, (r, g, a2), tp, pf in product((1, 2) if cfg_available else (1,), divs, slots, divs, divs):
        rest = cfg * u * r * g * a2 * tp * pf
        if devices % rest:
            continue
        dp = devices // rest
        if (dp > 1 and not with_dp) or (tp > 1 and pf > 1):
            continue
        plans.append(Plan(cfg=cfg, ulysses=u, ring=r, kv_allgather=g, attn2d=a2, tp=tp, pipefusion=pf, dp=dp,
                          patches=patches if pf > 1 else 0, warmup=warmup))
    return plans


def parse_order(text: str | None) -> tuple[str, ...]:
    """Parse a layout order such as 'tp,ulysses,ring,kv_allgather,attn2d,pipefusion,cfg,dp' (innermost first);
    an order written before Attention2D was a form gets it right after kv_allgather."""
    if not text:
        return DEFAULT_ORDER
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if "attn2d" not in names and "kv_allgather" in names and len(names) == len(DIMS) - 1:
        at = names.index("kv_allgather") + 1
        names = names[:at] + ("attn2d",) + names[at:]
    if sorted(names) != sorted(DIMS):
        raise InputError(f"--layout {text!r}: expected each of {', '.join(DIMS)} once (innermost first)")
    return names


def layout(plan: Plan, order: tuple[str, ...] = DEFAULT_ORDER) -> dict[str, list[list[int]]]:
    """Rank groups of every dimension: ranks are numbered innermost-first along `order` (remembered per degrees
    and order: a ranking asks for the same layout many times; callers read it, never change it)."""
    return _layout(tuple(plan.degree(d) for d in DIMS), tuple(order))


@lru_cache(maxsize=4096)
def _layout(degrees: tuple[int, ...], order: tuple[str, ...]) -> dict[str, list[list[int]]]:
    deg_of = dict(zip(DIMS, degrees, strict=True))
    devices = 1
    for d in degrees:
        devices *= d
    strides, stride = {}, 1
    for dim in order:
        strides[dim] = stride
        stride *= deg_of[dim]
    groups: dict[str, list[list[int]]] = {}
    for dim in order:
        deg, st = deg_of[dim], strides[dim]
        if deg == 1:   # one group per rank (shared by the layouts of this card count: read, never changed)
            groups[dim] = _singles(devices)
            continue
        # a group per rank whose digit along dim is 0, in rank order: the same groups, in the same order, as
        # collecting each rank's group the first time one of its members is met
        groups[dim] = [list(range(base, base + deg * st, st)) for outer in range(0, devices, deg * st)
                       for base in range(outer, outer + st)]
    return groups


@lru_cache(maxsize=64)
def _singles(devices: int) -> list[list[int]]:
    return [[r] for r in range(devices)]
