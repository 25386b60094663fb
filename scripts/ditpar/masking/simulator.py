"""Discrete-event simulation of chunked masking: one compute stream, one communication stream.

Chunk g has a forward collective F_g (a = c - D), an attention chunk A_g (f) that waits for F_g, and
a reverse collective R_g (b = D) that waits for A_g. Each stream runs its ops one at a time in issue
order (a collective waits behind the one issued before it, as on one communicator). The issue order
of the communication stream is the schedule; the compute stream runs A_0 .. A_{n-1}.

Optionally each chunk has an output transform T_g (t us, on the compute stream) that R_g waits for.
With ``transforms="per-chunk"`` T_g is enqueued right after A_g; with ``"batched"`` all T_g are
enqueued after the last attention chunk -- the shape of a host loop that issues every attention
chunk before any output work, or of a reverse that waits on the whole compute stream (t = 0).
Optionally each chunk also has post-reverse work P_g (p us on the compute stream, e.g. copy-back or
a per-chunk share of the output projection) that waits for R_g; the host loop of each order decides
where it is enqueued (after all attention for forward-first, one chunk behind for pipelined).
"""

from __future__ import annotations

from dataclasses import dataclass

from ditpar.errors import InputError
from ditpar.masking.bound import Layer

#: issue orders of the communication stream
ORDERS = ("forward-first", "pipelined", "alternating")

ORDER_MEANING = {
    "forward-first": "all forward chunks, then all reverse chunks",
    "pipelined": "software-pipelined: forward g+1 is issued before reverse g",
    "alternating": "strict alternation: forward g, reverse g, forward g+1 (serialises the pipeline)",
}


@dataclass(frozen=True)
class Op:
    """One simulated task: what it is, which chunk, which stream, when."""

    kind: str  # "forward", "attention", "transform", "reverse", "post"
    chunk: int
    stream: str  # "comm" or "compute"
    start_us: float
    end_us: float

    @property
    def label(self) -> str:
        return {"forward": "F", "attention": "A", "transform": "T", "reverse": "R", "post": "P"}[self.kind] + str(self.chunk)


@dataclass(frozen=True)
class SimResult:
    """A simulated layer: its ops and the figures derived from them."""

    order: str
    layer: Layer
    ops: tuple[Op, ...]
    makespan_us: float
    exposed_us: float
    comm_us: float
    transform_us: float = 0.0
    transforms: str = "per-chunk"
    post_us: float = 0.0

    @property
    def masking(self) -> float:
        """Share of communication that ran while compute did: 1 - exposed / C."""
        return 1.0 - self.exposed_us / self.comm_us

    def exposed_spans(self) -> list[tuple[float, float]]:
        """Spans where communication runs and compute does not."""
        compute = [(o.start_us, o.end_us) for o in self.ops if o.stream == "compute" and o.end_us > o.start_us]
        out = []
        for op in self.ops:
            if op.stream == "comm":
                out.extend(_minus((op.start_us, op.end_us), compute))
        return sorted(out)


def comm_issue_order(order: str, n: int) -> list[tuple[str, int]]:
    """The communication stream's issue order as (kind, chunk) pairs."""
    if order == "forward-first":
        return [("forward", g) for g in range(n)] + [("reverse", g) for g in range(n)]
    if order == "pipelined":
        seq = [("forward", 0)]
        for g in range(n):
            if g + 1 < n:
                seq.append(("forward", g + 1))
            seq.append(("reverse", g))
        return seq
    if order == "alternating":
        return [item for g in range(n) for item in (("forward", g), ("reverse", g))]
    raise InputError(f"--order: unknown order {order!r}; expected one of {list(ORDERS)}")


TRANSFORMS = ("per-chunk", "batched")


def compute_issue_order(n: int, transform_us: float, transforms: str, order: str = "forward-first",
                        post_us: float = 0.0) -> list[tuple[str, int]]:
    """The compute stream's issue order: attention chunks, output transforms, post-reverse work."""
    if transforms not in TRANSFORMS:
        raise InputError(f"--transforms: unknown value {transforms!r}; expected one of {list(TRANSFORMS)}")
    per_chunk: list[list[tuple[str, int]]] = []
    for g in range(n):
        items = [("attention", g)]
        if transforms == "per-chunk" and transform_us > 0:
            items.append(("transform", g))
        per_chunk.append(items)
    seq = [item for items in per_chunk for item in items]
    if transforms == "batched":
        seq += [("transform", g) for g in range(n)]
    if post_us <= 0:
        return seq
    if order == "pipelined" and transforms == "per-chunk":
        seq = []
        for g in range(n):
            seq += per_chunk[g]
            if g >= 1:
                seq.append(("post", g - 1))
        return seq + [("post", n - 1)]
    if order == "alternating" and transforms == "per-chunk":
        return [item for g in range(n) for item in per_chunk[g] + [("post", g)]]
    return seq + [("post", g) for g in range(n)]


def simulate(layer: Layer, order: str, transform_us: float = 0.0,
             transforms: str = "per-chunk", post_us: float = 0.0) -> SimResult:
    """Run the two FIFO streams to completion and measure makespan and exposed communication."""
    comm_q = comm_issue_order(order, layer.chunks)
    comp_q = compute_issue_order(layer.chunks, transform_us, transforms, order, post_us)
    return run_streams(layer, comm_q, comp_q, transform_us, label=order, transforms=transforms,
                       post_us=post_us)


def run_streams(layer: Layer, comm_q: list[tuple[str, int]], comp_q: list[tuple[str, int]],
                transform_us: float = 0.0, label: str = "custom", transforms: str = "per-chunk",
                post_us: float = 0.0) -> SimResult:
    """Simulate given issue orders of both streams (any order; a deadlock is an InputError)."""
    order = label
    a, b, f = layer.forward_us, layer.reverse_us, layer.f_us
    has_t = any(kind == "transform" for kind, _ in comp_q)
    dur = {"forward": a, "reverse": b, "attention": f, "transform": transform_us, "post": post_us}
    need = {"forward": None, "attention": "forward", "transform": "attention",
            "reverse": "transform" if has_t else "attention", "post": "reverse"}
    done: dict[tuple[str, int], float] = {}
    free = {"comm": 0.0, "compute": 0.0}
    queues = {"comm": comm_q, "compute": comp_q}
    heads = {"comm": 0, "compute": 0}
    ops: list[Op] = []
    while heads["comm"] < len(comm_q) or heads["compute"] < len(comp_q):
        progressed = False
        for stream in ("comm", "compute"):
            q = queues[stream]
            while heads[stream] < len(q):
                kind, g = q[heads[stream]]
                dep = need[kind]
                if dep is not None and (dep, g) not in done:
                    break
                start = max(free[stream], done[(dep, g)] if dep else 0.0)
                end = start + dur[kind]
                done[(kind, g)] = end
                free[stream] = end
                ops.append(Op(kind, g, stream, start, end))
                heads[stream] += 1
                progressed = True
        if not progressed:
            ck, cg = comm_q[heads["comm"]] if heads["comm"] < len(comm_q) else ("nothing", "")
            pk, pg = comp_q[heads["compute"]] if heads["compute"] < len(comp_q) else ("nothing", "")
            raise InputError(
                f"--order {order} with --transforms {transforms}: the streams deadlock -- the comm "
                f"stream's next op {ck} {cg} waits for compute, whose next op {pk} {pg} waits for a "
                f"collective queued behind it (on a device this hangs or, with an unrecorded event, "
                f"silently skips the wait)")
    ops = [o for o in ops if o.end_us > o.start_us or o.kind != "transform"]
    ops.sort(key=lambda o: (o.start_us, o.stream))
    compute = [(o.start_us, o.end_us) for o in ops if o.stream == "compute" and o.end_us > o.start_us]
    exposed = sum(hi - lo for op in ops if op.stream == "comm"
                  for lo, hi in _minus((op.start_us, op.end_us), compute))
    makespan = max(o.end_us for o in ops)
    return SimResult(order, layer, tuple(ops), makespan, exposed, layer.comm_us, transform_us, transforms,
                     post_us)


def _minus(span: tuple[float, float], others: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Parts of span not covered by the (disjoint, sorted) spans in others."""
    lo, hi = span
    out = []
    cur = lo
    for s, e in others:
        if e <= cur or s >= hi:
            continue
        if s > cur:
            out.append((cur, s))
        cur = max(cur, e)
        if cur >= hi:
            break
    if cur < hi:
        out.append((cur, hi))
    return [(x, y) for x, y in out if y > x]


def summary(result: SimResult) -> dict[str, object]:
    """JSON-ready figures of one simulated order."""
    return {
        "order": result.order,
        "makespan_us": result.makespan_us,
        "exposed_us": result.exposed_us,
        "masking": result.masking,
        "compute_us": result.layer.compute_us + result.layer.chunks * (result.transform_us + result.post_us),
        "comm_us": result.comm_us,
        "transforms": result.transforms,
    }


COLORS = {"forward": "#4C72B0", "attention": "#55A868", "transform": "#8172B3", "reverse": "#DD8452",
          "post": "#937860"}


def plot_gantt(results: list[SimResult], path: str) -> None:
    """Gantt chart: per order a compute row and a communication row, exposed spans hatched red."""
    from ditpar import cli

    plt = cli.pyplot()
    rows = len(results) * 2
    fig, ax = plt.subplots(figsize=(11, 0.55 * rows + 1.6))
    yticks, ylabels = [], []
    span = max(r.makespan_us for r in results)
    for i, res in enumerate(results):
        base = (len(results) - 1 - i) * 2.6
        ys = {"compute": base + 1.2, "comm": base}
        for op in res.ops:
            y = ys[op.stream]
            ax.broken_barh([(op.start_us, op.end_us - op.start_us)], (y, 0.9),
                           facecolors=COLORS[op.kind], edgecolor="black", linewidth=0.5)
            if res.layer.chunks <= 16 and op.end_us - op.start_us >= 0.02 * span:
                ax.text((op.start_us + op.end_us) / 2, y + 0.45, op.label, ha="center",
                        va="center", fontsize=7, color="white")
        for lo, hi in res.exposed_spans():
            ax.broken_barh([(lo, hi - lo)], (ys["comm"] - 0.15, 0.12), facecolors="red")
        yticks += [ys["compute"] + 0.45, ys["comm"] + 0.45]
        ylabels += [f"{res.order}\ncompute", f"exposed {res.exposed_us:.4g} us\ncomm"]
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels, fontsize=8)
    ax.set_xlabel("time in layer (us)")
    lay = results[0].layer
    ax.set_title(f"C={lay.comm_us:g} us, F={lay.compute_us:g} us, n={lay.chunks}, "
                 f"drain={lay.drain_us:g} us  (red: exposed communication)", fontsize=9)
    kinds = [k for k in ("forward", "attention", "transform", "reverse", "post")
             if any(o.kind == k for r in results for o in r.ops)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in kinds]
    names = {"forward": "forward collective", "attention": "attention chunk",
             "transform": "output transform", "reverse": "reverse collective", "post": "post-reverse work"}
    ax.legend(handles, [names[k] for k in kinds], loc="upper center", bbox_to_anchor=(0.5, -0.18),
              fontsize=7, ncol=len(kinds), frameon=False)
    ax.grid(axis="x", alpha=0.3)
    cli.save_figure(fig, path)
    plt.close(fig)
