"""A DiT block of a model preset's shapes with random weights: AdaLN modulation, attention (self, joint
text+image, or + cross-attention), MLP. The same forward serves one device and every parallel form:
the form supplies attention over the sequence and the TP collectives (ditpar.planbench.forms)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ditpar.errors import InputError
from ditpar.plan.cost.work import parse_kind

KINDS = ("self", "cross", "joint", "single")


@dataclass(frozen=True)
class BlockShape:
    """What one block kind computes for one request (as the preset describes the model)."""

    kind: str           # self | cross | joint | single
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    gated: bool         # ffn_matrices == 3 (SwiGLU-style)
    tokens: int         # image/video tokens of one sample
    text_joint: int     # text tokens in the attention sequence (joint, single)
    text_cross: int     # context tokens of the cross-attention (cross)
    batch: int          # samples per forward (2 with classifier-free guidance)
    linear: bool = False  # ReLU linear self-attention (SANA); cross-attention stays softmax


def block_shapes(model, shape) -> dict[str, tuple[BlockShape, int]]:
    """kind -> (BlockShape, layers of that kind); kinds the benchmark cannot build are an InputError."""
    attention = getattr(model, "attention", "softmax")
    if attention not in ("softmax", "linear"):
        raise InputError(f"{model.name}: key 'attention' = {attention!r}; plan_bench builds softmax or linear "
                         "self-attention")
    out = {}
    for kind, count in model.blocks.items():
        base, span = parse_kind(kind)
        if span != "full":
            raise InputError(f"{model.name}: block kind {kind!r} (attention inside a frame or along time) is not "
                             "built by plan_bench; full-sequence kinds only (self, cross, joint, single)")
        joint = shape.text_joint if base in ("joint", "single") else 0
        cross = shape.text_cross + int(getattr(model, "image_cross_tokens", 0) or 0) if base == "cross" else 0
        out[kind] = (BlockShape(base, model.hidden, model.heads, model.kv_heads, model.head_dim, model.ffn,
                                int(getattr(model, "ffn_matrices", 2) or 2) == 3, shape.tokens, joint, cross,
                                shape.batch, attention == "linear"), int(count))
    return out


def weight_shapes(s: BlockShape) -> dict[str, tuple[int, int]]:
    """Name -> (in, out) of every linear (y = x @ W); biases are left out (elementwise, no collective)."""
    d, dq, dkv, f = s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim, s.ffn
    stream = {"wq": (d, dq), "wk": (d, dkv), "wv": (d, dkv), "wo": (dq, d), "w1": (d, f), "w2": (f, d)}
    if s.gated:
        stream["w3"] = (d, f)
    if s.kind == "single":
        out = {"wq": (d, dq), "wk": (d, dkv), "wv": (d, dkv), "w1": (d, f), "wo": (dq + f, d), "mod": (d, 3 * d)}
        if s.gated:
            out["w3"] = (d, f)
        return out
    out = dict(stream)
    if s.kind == "cross":
        out.update({"cq": (d, dq), "ck": (d, dkv), "cv": (d, dkv), "co": (dq, d)})
    if s.kind == "joint":
        out.update({"a" + k[1:]: v for k, v in stream.items()})   # the text stream's own weights
        out.update({"mod": (d, 6 * d), "amod": (d, 6 * d)})
    return out


def make_weights(s: BlockShape, seed: int) -> dict:
    """Random fp32 weights on the CPU, N(0, 1/fan_in) so activations stay O(1); the same on every rank."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = {n: torch.randn(i, o, generator=gen) / math.sqrt(i) for n, (i, o) in sorted(weight_shapes(s).items())}
    if s.kind in ("self", "cross"):   # adaLN-single style: a per-block table added to the shared time embedding
        out["table"] = torch.randn(6, s.hidden, generator=gen) * 0.1
    return out


def make_inputs(s: BlockShape, seed: int) -> dict:
    """Full (unsharded) fp32 inputs of one forward on the CPU: image tokens, text tokens, context, time."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    b, d = s.batch, s.hidden
    out = {"x": torch.randn(b, s.tokens, d, generator=gen)}
    if s.text_joint:
        out["c"] = torch.randn(b, s.text_joint, d, generator=gen)
    if s.kind == "cross":
        out["ctx"] = torch.randn(b, s.text_cross, d, generator=gen)
    if s.kind in ("self", "cross"):
        out["temb"] = torch.randn(b, 6, d, generator=gen) * 0.1
    else:
        out["temb"] = torch.randn(b, d, generator=gen)
    return out


# --- the forward -----------------------------------------------------------------------------------

def _ln(x):
    import torch.nn.functional as F

    return F.layer_norm(x, x.shape[-1:], eps=1e-6)


def _modulate(x, shift, scale):
    return _ln(x) * (1 + scale[:, None]) + shift[:, None]


def _heads(x, n: int):
    return x.reshape(x.shape[0], x.shape[1], n, -1)


def _mlp(w: dict, h, prefix: str, form, stream: str):
    import torch.nn.functional as F

    up = h @ w[prefix + "1"]
    act = F.silu(up) * (h @ w[prefix + "3"]) if prefix + "3" in w else F.gelu(up, approximate="tanh")
    return form.tp_reduce(act @ w[prefix + "2"], stream)


def forward(s: BlockShape, w: dict, inp: dict, form) -> dict:
    """One block forward on this rank's share (weights and tokens as the form sharded them).
    Returns {'x': image tokens out, 'c': text tokens out (joint, single)}."""
    import torch
    import torch.nn.functional as F

    hq, hk = form.local_heads
    x = inp["x"]
    if s.kind in ("self", "cross"):
        sh1, sc1, g1, sh2, sc2, g2 = (inp["temb"] + w["table"]).unbind(1)
        h = _modulate(x, sh1, sc1)
        o = form.attend(_heads(h @ w["wq"], hq), _heads(h @ w["wk"], hk), _heads(h @ w["wv"], hk))
        x = x + g1[:, None] * form.tp_reduce(o.flatten(2) @ w["wo"], "image")
        if s.kind == "cross":
            h, ctx = _ln(x), inp["ctx"]
            o = form.local_attention(_heads(h @ w["cq"], hq), _heads(ctx @ w["ck"], hk), _heads(ctx @ w["cv"], hk))
            x = x + form.tp_reduce(o.flatten(2) @ w["co"], "image")
        x = x + g2[:, None] * _mlp(w, _modulate(x, sh2, sc2), "w", form, "image")
        return {"x": x}
    t = F.silu(inp["temb"])
    if s.kind == "single":
        c = inp["c"]
        seq = torch.cat([x, c], dim=1)
        shift, scale, gate = form.tp_gather_mod(t @ w["mod"]).chunk(3, dim=-1)
        h = _modulate(seq, shift, scale)
        o = form.attend(_heads(h @ w["wq"], hq), _heads(h @ w["wk"], hk), _heads(h @ w["wv"], hk))
        up = h @ w["w1"]
        act = F.silu(up) * (h @ w["w3"]) if "w3" in w else F.gelu(up, approximate="tanh")
        seq = seq + gate[:, None] * form.tp_reduce(torch.cat([o.flatten(2), act], dim=-1) @ w["wo"], "image+text")
        return {"x": seq[:, : x.shape[1]], "c": seq[:, x.shape[1]:]}
    c = inp["c"]   # joint: two streams, one attention over image + text
    mx = form.tp_gather_mod(t @ w["mod"]).chunk(6, dim=-1)
    mc = form.tp_gather_mod(t @ w["amod"]).chunk(6, dim=-1)
    hx, hc = _modulate(x, mx[0], mx[1]), _modulate(c, mc[0], mc[1])
    q = torch.cat([_heads(hx @ w["wq"], hq), _heads(hc @ w["aq"], hq)], dim=1)
    k = torch.cat([_heads(hx @ w["wk"], hk), _heads(hc @ w["ak"], hk)], dim=1)
    v = torch.cat([_heads(hx @ w["wv"], hk), _heads(hc @ w["av"], hk)], dim=1)
    o = form.attend(q, k, v).flatten(2)
    n = x.shape[1]
    x = x + mx[2][:, None] * form.tp_reduce(o[:, :n] @ w["wo"], "image")
    c = c + mc[2][:, None] * form.tp_reduce(o[:, n:] @ w["ao"], "text")
    x = x + mx[5][:, None] * _mlp(w, _modulate(x, mx[3], mx[4]), "w", form, "image")
    c = c + mc[5][:, None] * _mlp(w, _modulate(c, mc[3], mc[4]), "a", form, "text")
    return {"x": x, "c": c}
