"""Tensor-parallel layouts: which collectives one transformer block issues under TP, per framework layout.

- 'column_row' (Megatron-style): Q/K/V and MLP-in column-parallel without a gather, attention on the rank's own
  heads, attention-out and MLP-out row-parallel: one all-reduce per attention and per MLP (image and text streams
  apart in a joint block); AdaLN modulation linears replicated (no collective).
- 'column_row_adaln_gather': column_row plus an all-gather of each sharded AdaLN modulation linear (cache-dit's
  DTensor plans: ColwiseParallel(output_layouts=Replicate()) on norm1.linear / norm.linear).
- 'gather_after_column': every projection column-parallel with its output all-gathered back to full width
  (ColumnParallelLinear(gather_output=True)); attention then runs on all heads on every rank (not split).
"""

from __future__ import annotations

TP_LAYOUTS = ("column_row", "column_row_adaln_gather", "gather_after_column")
DEFAULT_LAYOUT = "column_row_adaln_gather"   # a framework whose layout was not read: priced as before (cache-dit's)

# all-reduces per block in the column-row layouts (row-parallel projections): self = attention out + MLP out,
# cross = + cross-attention out, joint = image and text attention out and MLP out, single = FLUX's fused proj_out
TP_ALLREDUCES = {"self": 2, "cross": 3, "joint": 4, "single": 1}
TP_ADALN_GATHERS = {"self": 0, "cross": 0, "joint": 2, "single": 1}   # sharded AdaLN linears gathered
TP_ADALN_WIDTH = {"joint": 6, "single": 3}                            # modulation outputs per hidden unit


def layout_of(name: str) -> str:
    """The layout a framework profile names ('' or 'unknown': the default)."""
    return DEFAULT_LAYOUT if name in ("", "unknown") else name


def attention_split(layout: str) -> bool:
    """Whether each TP rank attends only its own heads (False: every rank attends all heads)."""
    return layout_of(layout) != "gather_after_column"


def gathered_widths(model, base: str) -> list[float]:
    """Output width (elements per token) of each column projection gathered per stream of one block in the
    'gather_after_column' layout: fused Q/K/V, attention out, MLP in, MLP out (+ cross Q and out);
    FLUX's single stream: fused Q/K/V + MLP in, and the fused output."""
    d, f = model.hidden, model.ffn
    mats = int(getattr(model, "ffn_matrices", 2) or 2)
    dq, dkv = model.heads * model.head_dim, model.kv_heads * model.head_dim
    if base == "single":
        return [dq + 2 * dkv + (mats - 1) * f, d]
    out = [dq + 2 * dkv, d, (mats - 1) * f, d]
    return out + [dq, d] if base == "cross" else out


def block_calls(layout: str, model, base: str) -> int:
    """TP collective calls one block issues under the layout (both streams of a joint block counted)."""
    lay = layout_of(layout)
    if lay == "gather_after_column":
        return len(gathered_widths(model, base)) * (2 if base == "joint" else 1)
    return TP_ALLREDUCES[base] + (TP_ADALN_GATHERS[base] if lay == "column_row_adaln_gather" else 0)


def block_bytes(layout: str, base: str, image_rows: float, text_rows: float, hidden: int, tp: int,
                batch_rows: float, element_bytes: int, widths: list[float] = ()) -> dict[str, tuple[str, float, float]]:
    """Per-rank bytes sent per block: {collective name: (family, calls, bytes per call)}. A ring all-reduce sends
    2(tp-1)/tp of the tensor, an all-gather (tp-1)/tp of the gathered tensor; `widths`: gathered_widths (only
    the 'gather_after_column' layout reads them); rows are the rank's tokens, batch included."""
    b, d, lay = element_bytes, hidden, layout_of(layout)
    ar, ag = 2.0 * (tp - 1) / tp, (tp - 1) / tp
    out: dict[str, tuple[str, float, float]] = {}
    if lay == "gather_after_column":
        if not widths:
            raise ValueError("gather_after_column needs the block's gathered widths")
        rows = image_rows + (0.0 if base == "joint" else text_rows)   # a joint block's text stream apart
        out["TP output all-gather"] = ("allgather", float(len(widths)), ag * rows * sum(widths) / len(widths) * b)
        if base == "joint" and text_rows > 0:
            out["TP output all-gather (text)"] = ("allgather", float(len(widths)),
                                                  ag * text_rows * sum(widths) / len(widths) * b)
        return out
    n_ar = TP_ALLREDUCES[base]
    if base == "joint":
        out["TP all-reduce (image)"] = ("allreduce", n_ar / 2, ar * image_rows * d * b)
        if text_rows > 0:
            out["TP all-reduce (text)"] = ("allreduce", n_ar / 2, ar * text_rows * d * b)
    else:
        out["TP all-reduce"] = ("allreduce", float(n_ar), ar * (image_rows + text_rows) * d * b)
    if lay == "column_row_adaln_gather" and TP_ADALN_GATHERS[base]:
        out["TP AdaLN all-gather"] = ("allgather", float(TP_ADALN_GATHERS[base]),
                                      ag * TP_ADALN_WIDTH[base] * d * b * batch_rows)
    return out


def relayout_bytes(layout: str, base: str, image_rows: float, text_rows: float, element_bytes: int,
                   widths: list[float] = ()) -> float:
    """HBM bytes of the copies a gathered column output costs per block: the gathered buffer [tp, rows, width/tp]
    moved to [rows, width] (movedim + reshape: read and write of the full output), as vLLM-style all_gather
    helpers do for a last-dim gather; 0 for the column-row layouts."""
    if layout_of(layout) != "gather_after_column":
        return 0.0
    return 2.0 * (image_rows + text_rows) * sum(widths) * element_bytes


def tp_layout_note(name: str, blocks) -> str:
    """One line naming the TP layout a plan was priced with and its collective calls per forward."""
    calls = sum(c.calls * b.count for b in blocks for c in b.comms if c.dim == "tp")
    said = "" if name not in ("", "unknown") else " (the framework's layout not read: cache-dit's assumed)"
    return (f"TP layout {layout_of(name)}{said}: {calls:g} TP collective calls per forward "
            "(references/cost-model.md section 2.2)")
