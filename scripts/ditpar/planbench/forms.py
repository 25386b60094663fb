"""Each parallel form's share of a block on one rank: how weights and tokens are sharded, attention over
a sharded sequence (Ulysses all-to-all, ring K/V passing with an online-softmax merge, AllGather-KV, and
their hybrids), the TP all-reduces and AdaLN all-gathers, and the elements every collective sends."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ditpar.errors import InputError
from ditpar.planbench.blocks import BlockShape
from ditpar.planbench.spec import RankPlace


@dataclass(frozen=True)
class Heads:
    """Head bookkeeping of one rank: global query / K/V head ids it holds after TP and after Ulysses."""

    q_tp: tuple[int, ...]        # query heads after the TP split
    kv_tp: tuple[int, ...]       # K/V heads after the TP split (replicated where TP > K/V heads)
    q_pad: int                   # zero query heads Ulysses appends so U divides them
    kv_mode: str                 # 'split' | 'replicate' (to lcm(kv, U), as plan.py prices) | 'pad' (MHA: pad with Q)
    q_sp: tuple[int, ...]        # query heads this rank attends after the Ulysses all-to-all (-1: padding)
    kv_sp: tuple[int, ...]       # K/V heads it holds then


def _chunk(ids: list[int], n: int, i: int) -> list[int]:
    step = len(ids) // n
    return ids[i * step:(i + 1) * step]


def head_layout(s: BlockShape, tp: int, t: int, u: int, j: int, allow_pad: bool, plan_name: str) -> Heads:
    """Heads of TP rank t and Ulysses rank j; an impossible or unpadded-indivisible split is an InputError."""
    h, kv = s.heads, s.kv_heads
    if h % tp:
        raise InputError(f"plan {plan_name!r}: {h} heads do not divide by TP {tp}")
    q_tp = list(range(t * h // tp, (t + 1) * h // tp))
    rep_tp = math.lcm(kv, tp)
    kv_tp = [i // (rep_tp // kv) for i in _chunk(list(range(rep_tp)), tp, t)]
    hq = len(q_tp)
    q_pad = -(-hq // u) * u - hq
    if q_pad and not allow_pad:
        raise InputError(f"plan {plan_name!r}: {hq} query heads per TP rank do not divide by Ulysses {u} "
                         "and --no-padding forbids padding heads")
    qs = q_tp + [-1] * q_pad
    if q_pad and kv == h:
        mode, kvs = "pad", kv_tp + [-1] * q_pad
    elif len(kv_tp) % u == 0:
        mode, kvs = "split", kv_tp
    else:
        rep = math.lcm(len(kv_tp), u) // len(kv_tp)
        mode, kvs = "replicate", [x for x in kv_tp for _ in range(rep)]
    heads = Heads(tuple(q_tp), tuple(kv_tp), q_pad, mode, tuple(_chunk(qs, u, j)), tuple(_chunk(kvs, u, j)))
    kv_map(heads.q_sp, heads.kv_sp, h // kv, plan_name)
    kv_map(heads.q_tp, heads.kv_tp, h // kv, plan_name)
    return heads


def kv_map(q_ids, kv_ids, group: int, plan_name: str = "") -> list[int]:
    """For each query head, the index of its K/V head among kv_ids (GQA: head q uses K/V head q // group)."""
    out = []
    for q in q_ids:
        if q < 0:
            out.append(0)
            continue
        want = q // group
        if want not in kv_ids:
            raise InputError(f"plan {plan_name!r}: query head {q} lands on a rank without its K/V head {want}; "
                             "this head split has no valid layout")
        out.append(list(kv_ids).index(want))
    return out


@dataclass(frozen=True)
class SeqLayout:
    """Per-rank sequence shard: image part then text part, each padded so the SP degree divides it."""

    sp: int
    img_total: int
    txt_total: int

    @property
    def img_local(self) -> int:
        return -(-self.img_total // self.sp)

    @property
    def txt_local(self) -> int:
        return -(-self.txt_total // self.sp)

    @property
    def padded(self) -> bool:
        return self.img_local * self.sp != self.img_total or self.txt_local * self.sp != self.txt_total

    def valid(self, shard: int) -> tuple[int, int]:
        """(valid image rows, valid text rows) at the start of each part of shard `shard`."""
        return (max(0, min(self.img_local, self.img_total - shard * self.img_local)),
                max(0, min(self.txt_local, self.txt_total - shard * self.txt_local)))

    def valid_rows(self, shards: list[int]) -> list[int] | None:
        """Indices of the real rows in the concatenation of these shards' local layouts (None: all real)."""
        if not self.padded:
            return None
        per = self.img_local + self.txt_local
        rows = []
        for k, sh in enumerate(shards):
            vi, vt = self.valid(sh)
            rows += list(range(k * per, k * per + vi)) + list(range(k * per + self.img_local,
                                                                     k * per + self.img_local + vt))
        return rows


class Comm:
    """The process groups of one plan on this rank, and the elements each collective sends (counted)."""

    def __init__(self, pgs: dict[str, Any]) -> None:
        self.pgs = pgs
        self.sent: Counter = Counter()   # family -> elements sent by this rank
        self.counting = False

    def _add(self, family: str, elems: float) -> None:
        if self.counting:
            self.sent[family] += elems

    def all_to_all(self, dim: str, t, family: str):
        import torch
        import torch.distributed as dist

        g, n = self.pgs[dim]
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t, group=g)
        self._add(family, t.numel() * (n - 1) / n)
        return out

    def all_gather(self, dim: str, t, family: str):
        import torch
        import torch.distributed as dist

        g, n = self.pgs[dim]
        out = torch.empty((n * t.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device)
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        fn(out, t.contiguous(), group=g)
        self._add(family, t.numel() * (n - 1))
        return out.view(n, *t.shape)

    def all_reduce(self, dim: str, t, family: str):
        import torch.distributed as dist

        g, n = self.pgs[dim]
        dist.all_reduce(t, group=g)
        self._add(family, t.numel() * 2 * (n - 1) / n)
        return t

    def ring_pass(self, dim: str, t, nxt: int, prv: int, family: str):
        """Start sending t to the next rank and receiving the previous rank's block; returns (buffer, works)."""
        import torch
        import torch.distributed as dist

        g, _ = self.pgs[dim]
        buf = torch.empty_like(t)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, nxt, g), dist.P2POp(dist.irecv, buf, prv, g)])
        self._add(family, t.numel())
        return buf, works


LINEAR_EPS = 1e-15   # the normaliser's epsilon of diffusers' SanaLinearAttnProcessor2_0


def linear_state(k, v):
    """ReLU linear attention's state of (B, S, H, D) keys and values: per head (D + 1) x D in fp32, V padded with a
    row of ones for the normaliser (diffusers SanaLinearAttnProcessor2_0); a sum over tokens, so shards add up."""
    import torch
    import torch.nn.functional as F

    v1 = F.pad(v.float(), (0, 1), value=1.0)
    return torch.einsum("bshe,bshd->bhed", v1, F.relu(k.float()))


def linear_apply(q, state):
    """Queries (B, S, H, D) through a summed state (B, H, D + 1, D): (B, S, H, D), normalised, in q's dtype."""
    import torch
    import torch.nn.functional as F

    out = torch.einsum("bhed,bshd->bshe", state, F.relu(q.float()))
    return (out[..., :-1] / (out[..., -1:] + LINEAR_EPS)).to(q.dtype)


def attention_lse(q, k, v):
    """Softmax attention of (B, H, S, D) tensors and its log-sum-exp (B, H, S), for the ring merge."""
    import torch

    if q.device.type == "cuda":
        try:
            out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False)
            return out[0], out[1]
        except Exception:   # dtype or head_dim the fused kernel refuses: the exact math below
            pass
    if q.device.type == "cpu":
        out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
        return out[0], out[1]
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(s, dim=-1)
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype), lse


class Form:
    """One plan on one rank: sharding, attention over the sharded sequence, TP collectives."""

    def __init__(self, place: RankPlace, s: BlockShape, comm: Comm, allow_pad: bool) -> None:
        p = place.plan
        self.place, self.s, self.comm, self.p = place, s, comm, p
        name = p.name
        if p.tp > 1:
            for what, n in (("FFN width", s.ffn), ("modulation width", 3 * s.hidden)):
                if n % p.tp:
                    raise InputError(f"plan {name!r}: {what} {n} does not divide by TP {p.tp}")
        self.heads = head_layout(s, p.tp, place.index["tp"], p.ulysses, place.index["ulysses"], allow_pad, name)
        self.seq = SeqLayout(p.sp, s.tokens, s.text_joint)
        if self.seq.padded and not allow_pad:
            raise InputError(f"plan {name!r}: {s.tokens} image + {s.text_joint} text tokens do not divide by the "
                             f"sequence-parallel degree {p.sp} and --no-padding forbids padding")
        if p.cfg > 1 and s.batch != 2:
            raise InputError(f"plan {name!r}: CFG parallel needs classifier-free guidance in the request "
                             "(the model is guidance-distilled or --no-cfg was given)")
        group = s.heads // s.kv_heads
        self.map_sp = kv_map(self.heads.q_sp, self.heads.kv_sp, group, name)
        self.map_tp = kv_map(self.heads.q_tp, self.heads.kv_tp, group, name)
        self._indices: dict = {}
        self.batch_slice = slice(place.index["cfg"], place.index["cfg"] + 1) if p.cfg > 1 else slice(None)

    @property
    def local_heads(self) -> tuple[int, int]:
        return len(self.heads.q_tp), len(self.heads.kv_tp)

    # --- sharding ----------------------------------------------------------------------------------
    def shard_weights(self, w: dict) -> dict:
        """This rank's slices of the full weights (column- and row-parallel under TP)."""
        import torch

        p, s, hd = self.p, self.s, self.s.head_dim
        if p.tp == 1:
            return dict(w)
        t = self.place.index["tp"]

        def cols(ids):
            return torch.tensor([h * hd + i for h in ids for i in range(hd)])
        qc, kc = cols(self.heads.q_tp), cols(self.heads.kv_tp)
        f = s.ffn // p.tp
        fc = torch.arange(t * f, (t + 1) * f)
        out = {}
        for name, m in w.items():
            tail = name[1:]
            if name == "table":
                out[name] = m
            elif name in ("mod", "amod"):
                n = m.shape[1] // p.tp
                out[name] = m[:, t * n:(t + 1) * n]
            elif s.kind == "single" and name == "wo":
                out[name] = m[torch.cat([qc, s.heads * hd + fc])]
            elif tail == "q":
                out[name] = m[:, qc]
            elif tail in ("k", "v"):
                out[name] = m[:, kc]
            elif tail == "o":
                out[name] = m[qc]
            elif tail in ("1", "3"):
                out[name] = m[:, fc]
            elif tail == "2":
                out[name] = m[fc]
            else:
                raise AssertionError(name)
        return {k: v.contiguous() for k, v in out.items()}

    def _seq_part(self, t, total: int, local: int):
        import torch.nn.functional as F

        pad = local * self.p.sp - total
        if pad:
            t = F.pad(t, (0, 0, 0, pad))
        i = self.place.sp_index
        return t[:, i * local:(i + 1) * local]

    def shard_inputs(self, inp: dict) -> dict:
        """This rank's batch slice and sequence shard of the full inputs."""
        b = self.batch_slice
        out = {"x": self._seq_part(inp["x"][b], self.seq.img_total, self.seq.img_local), "temb": inp["temb"][b]}
        if "c" in inp:
            out["c"] = self._seq_part(inp["c"][b], self.seq.txt_total, self.seq.txt_local)
        if "ctx" in inp:
            out["ctx"] = inp["ctx"][b]
        return {k: v.contiguous() for k, v in out.items()}

    def reference_share(self, ref: dict) -> dict:
        """The rows of the one-device output this rank's output must equal (its valid rows)."""
        vi, vt = self.seq.valid(self.place.sp_index)
        i, b = self.place.sp_index, self.batch_slice
        out = {"x": ref["x"][b, i * self.seq.img_local: i * self.seq.img_local + vi]}
        if "c" in ref:
            out["c"] = ref["c"][b, i * self.seq.txt_local: i * self.seq.txt_local + vt]
        return out

    def valid_share(self, out: dict) -> dict:
        vi, vt = self.seq.valid(self.place.sp_index)
        res = {"x": out["x"][:, :vi]}
        if "c" in out:
            res["c"] = out["c"][:, :vt]
        return res

    # --- TP collectives ----------------------------------------------------------------------------
    def tp_reduce(self, y, stream: str):
        if self.p.tp == 1:
            return y
        return self.comm.all_reduce("tp", y.contiguous(), f"TP all-reduce ({stream})")

    def tp_gather_mod(self, m):
        if self.p.tp == 1:
            return m
        g = self.comm.all_gather("tp", m, "TP AdaLN all-gather")       # (tp, b, width/tp)
        return g.permute(1, 0, 2).reshape(m.shape[0], -1)

    # --- attention ---------------------------------------------------------------------------------
    def _index(self, values: list[int], device):
        """An index tensor made once per (values, device): a fresh host-to-device copy per call would
        synchronise the host with the device inside the timed forward."""
        import torch

        key = (tuple(values), str(device))
        if key not in self._indices:
            self._indices[key] = torch.tensor(values, dtype=torch.long, device=device)
        return self._indices[key]

    def _expand(self, k, mapping: list[int]):
        if mapping == list(range(k.shape[2])):
            return k
        return k.index_select(2, self._index(mapping, k.device))

    def local_attention(self, q, k, v, mapping: list[int] | None = None, rows: list[int] | None = None):
        """Attention of (B, S, H, D) tensors on this rank (GQA K/V expanded to the query heads)."""
        import torch.nn.functional as F

        mapping = self.map_tp if mapping is None else mapping
        if rows is not None:
            idx = self._index(rows, k.device)
            k, v = k.index_select(1, idx), v.index_select(1, idx)
        k, v = self._expand(k, mapping), self._expand(v, mapping)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return o.transpose(1, 2)

    def _to_seq(self, t, family: str):
        """Ulysses: (B, S_l, H, D) -> (B, U*S_l, H/U, D): send head group j to Ulysses rank j."""
        u = self.p.ulysses
        b, sl, h, d = t.shape
        send = t.reshape(b, sl, u, h // u, d).permute(2, 0, 1, 3, 4).contiguous()
        recv = self.comm.all_to_all("ulysses", send, family)
        return recv.permute(1, 0, 2, 3, 4).reshape(b, u * sl, h // u, d)

    def _to_heads(self, t, family: str):
        """Ulysses back: (B, U*S_l, H/U, D) -> (B, S_l, H, D)."""
        u = self.p.ulysses
        b, s, hu, d = t.shape
        send = t.reshape(b, u, s // u, hu, d).permute(1, 0, 2, 3, 4).contiguous()
        recv = self.comm.all_to_all("ulysses", send, family)
        return recv.permute(1, 2, 0, 3, 4).reshape(b, s // u, u * hu, d)

    def attend(self, q, k, v):
        """Self-attention over the whole (sharded) sequence; returns this rank's rows, TP-local heads."""
        import torch
        import torch.nn.functional as F

        p, hs = self.p, self.heads
        u = p.ulysses
        if u > 1:
            if hs.q_pad:
                q = F.pad(q, (0, 0, 0, hs.q_pad))
            if hs.kv_mode == "pad":
                k, v = F.pad(k, (0, 0, 0, hs.q_pad)), F.pad(v, (0, 0, 0, hs.q_pad))
            elif hs.kv_mode == "replicate":
                rep = math.lcm(k.shape[2], u) // k.shape[2]
                k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
            fam = "ulysses all-to-all Q,K,V,O"
            q, k, v = self._to_seq(q, fam), self._to_seq(k, fam), self._to_seq(v, fam)
        outer = p.ring if p.ring > 1 else p.kv_allgather
        oi = self.place.index["ring"] if p.ring > 1 else self.place.index["kv_allgather"]
        if self.s.linear:
            o = self._linear(q, k, v, oi, u)
        elif p.ring > 1:
            o = self._ring(q, torch.stack([k, v]))
        elif p.kv_allgather > 1:
            kv = self.comm.all_gather("kv_allgather", torch.stack([k, v]), "AllGather-KV")   # (g, 2, B, S, H, D)
            kv = kv.permute(1, 2, 0, 3, 4, 5).reshape(2, k.shape[0], outer * k.shape[1], *k.shape[2:])
            rows = self.seq.valid_rows(list(range(p.sp)))
            o = self.local_attention(q, kv[0], kv[1], self.map_sp, rows)
        else:
            rows = self.seq.valid_rows([oi * u + j for j in range(u)])
            o = self.local_attention(q, k, v, self.map_sp, rows)
        if u > 1:
            o = self._to_heads(o.contiguous(), "ulysses all-to-all Q,K,V,O")
            if hs.q_pad:
                o = o[:, :, : len(hs.q_tp)]
        return o

    def _linear(self, q, k, v, oi: int, u: int):
        """ReLU linear attention: the state of this rank's valid K/V rows; over an AllGather-KV group the states are
        summed in one all-reduce (no K/V moves, no head split); a ring passes K/V and adds each block's state."""
        import torch

        if self.p.ring > 1:
            state = None
            r, me = self.p.ring, self.place.index["ring"]
            grp = self.place.groups["ring"]
            cur = torch.stack([k, v])
            for hop in range(r):
                pending = self.comm.ring_pass("ring", cur, grp[(me + 1) % r], grp[(me - 1) % r], "ring K,V pass") \
                    if hop < r - 1 else None
                add = self._state(cur[0], cur[1], [((me - hop) % r) * u + j for j in range(u)])
                state = add if state is None else state + add
                if pending is not None:
                    buf, works = pending
                    for w in works:
                        w.wait()
                    cur = buf
            return linear_apply(q, state)
        if self.p.kv_allgather > 1:
            state = self._state(k, v, [oi * u + j for j in range(u)])
            state = self.comm.all_reduce("kv_allgather", state.contiguous(), "linear-attention state all-reduce")
            return linear_apply(q, state)
        return linear_apply(q, self._state(k, v, [oi * u + j for j in range(u)]))

    def _state(self, k, v, shards: list[int]):
        """The state of the valid rows of K/V (padded rows left out), heads mapped to the query heads."""
        rows = self.seq.valid_rows(shards)
        if rows is not None:
            idx = self._index(rows, k.device)
            k, v = k.index_select(1, idx), v.index_select(1, idx)
        return linear_state(self._expand(k, self.map_sp), self._expand(v, self.map_sp))

    def _ring(self, q, kv):
        """Ring attention: K/V blocks travel the ring (one hop per sub-block, overlapped with attention),
        partial outputs merged by their log-sum-exp; no rank ever holds the gathered K/V."""
        import torch

        r, u = self.p.ring, self.p.ulysses
        me = self.place.index["ring"]
        grp = self.place.groups["ring"]
        nxt, prv = grp[(me + 1) % r], grp[(me - 1) % r]
        qt = q.transpose(1, 2)
        out = lse = None
        cur = kv
        for hop in range(r):
            pending = self.comm.ring_pass("ring", cur, nxt, prv, "ring K,V pass") if hop < r - 1 else None
            src = (me - hop) % r
            rows = self.seq.valid_rows([src * u + j for j in range(u)])
            k, v = cur[0], cur[1]
            if rows is not None:
                if not rows:
                    k = None
                else:
                    idx = self._index(rows, k.device)
                    k, v = k.index_select(1, idx), v.index_select(1, idx)
            if k is not None:
                k, v = self._expand(k, self.map_sp), self._expand(v, self.map_sp)
                o_b, lse_b = attention_lse(qt, k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous())
                o_b, lse_b = o_b.float(), lse_b.float()
                if out is None:
                    out, lse = o_b, lse_b
                else:
                    new = torch.logaddexp(lse, lse_b)
                    out = out * torch.exp(lse - new)[..., None] + o_b * torch.exp(lse_b - new)[..., None]
                    lse = new
            if pending is not None:
                buf, works = pending
                for w in works:
                    w.wait()
                cur = buf
        return out.to(q.dtype).transpose(1, 2)
