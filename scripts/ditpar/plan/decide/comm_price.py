"""What the framework's communication options would give the leading Ulysses plan: async Ulysses (the V and Q
all-to-alls behind the Q and K projections on a side stream) and FP8 all-to-all (half the payload bytes, plus the
quantise/dequantise passes over HBM). Priced here, never taken by the ranking (plan.py --json comm_options)."""

from __future__ import annotations

import dataclasses

from ditpar.plan.cost import cfg_calls, efficiency
from ditpar.plan.cost.plans import layout
from ditpar.plan.cost.timing import comm_time_s
from ditpar.plan.cost.work import block_work, parse_kind

FAMILY = "ulysses all-to-all Q,K,V,O"
SCALE_BYTES = 4.0     # one fp32 scale per (token, head) row of head_dim values (LightX2V quant_fp8_vllm)
QUANT_HBM = 3.0       # HBM bytes per bf16 payload byte: quantise reads 2 writes 1, dequantise reads 1 writes 2


def fp8_ratio(head_dim: int) -> float:
    """FP8 payload bytes over bf16 bytes: 1 byte per value plus a 4-byte scale per head_dim values, over 2 bytes."""
    return (1.0 + SCALE_BYTES / head_dim) / 2.0


def _qkv_s(model, hw, b, tun) -> float:
    """Seconds of one block's Q, K and V projections on one rank (the work an async all-to-all hides behind)."""
    if not b.gemms:
        return 0.0
    g = b.gemms[0]
    base, _ = parse_kind(b.kind)
    if base == "single":   # fused QKV + MLP-in: only its QKV columns
        qkv = model.heads * model.head_dim + 2 * model.kv_heads * model.head_dim
        mats = int(getattr(model, "ffn_matrices", 2) or 2)
        g = efficiency.Gemm(g.m, g.n * qkv / (qkv + (mats - 1) * model.ffn), g.k)
    rate = hw.peak_tflops_bf16 * 1e12 * hw.mfu / tun.compute_scale
    return 2.0 * g.m * g.n * g.k / rate / efficiency.linear_efficiency(efficiency.curve_for(hw), (g,), 1.0)


def price(model, hw, shape, r, tun) -> dict:
    """Seconds per request: exposed Ulysses all-to-all, what async Ulysses hides at most, what FP8 saves net."""
    plan = r.plan
    calls = float(shape.steps)
    if cfg_calls.two_calls(model, shape, plan, tun.cfg_calls):   # two calls of batch 1 per step, as predict prices
        shape, calls = dataclasses.replace(shape, cfg=False), 2.0 * shape.steps
    exposed = float(r.breakdown.exposed_by_family_s.get(FAMILY, 0.0))
    hide = fp8 = quant = 0.0
    ratio = fp8_ratio(model.head_dim)
    hbm = float(getattr(hw, "hbm_bandwidth_GBps", 0) or 0) * 1e9
    for b in block_work(model, hw, shape, plan, layout(plan, tun.order), tun.kv_gather_one_call):
        for c in b.comms:
            if c.name != FAMILY:
                continue
            one = comm_time_s(hw, c)
            qkv = _qkv_s(model, hw, b, tun)
            hide += 2.0 * min(one, qkv / 3.0) * b.count            # V behind Q's projection, Q behind K's
            small = dataclasses.replace(c, bytes_by_link={k: v * ratio for k, v in c.bytes_by_link.items()})
            fp8 += c.calls * (one - comm_time_s(hw, small)) * b.count
            local = c.bytes_per_call * c.group_size / max(c.group_size - 1, 1)   # the whole local tensor
            quant += c.calls * (QUANT_HBM * local / hbm if hbm else 0.0) * b.count
    hide, fp8, quant = min(hide * calls, exposed), min(fp8 * calls, exposed), quant * calls
    return {"plan": plan.name, "exposed_alltoall_s": exposed, "async_hides_up_to_s": hide,
            "fp8_saves_comm_s": fp8, "fp8_quantise_s": quant, "fp8_net_s": fp8 - quant, "fp8_bytes_ratio": ratio}


def _options(p: dict, fw, latency_s: float) -> list[dict]:
    """The framework's priced options for the plan of `p` (JSON records)."""
    out = []
    for name, opt in sorted(fw.comm_options.items()):
        if name == "async_ulysses":
            saves, exact, why = p["async_hides_up_to_s"], True, "same math; the Q/K/V projections run as separate GEMMs"
            basis = ("the V and Q all-to-alls on a side stream behind the Q and K projections (each hidden up to "
                     "the projection's time); the K and output all-to-alls stay exposed")
        else:
            saves, exact = max(p["fp8_net_s"], 0.0), False
            why = "FP8 (e4m3) payload: Q, K, V and the attention output lose mantissa bits; check with the quality gate"
            basis = (f"payload x {p['fp8_bytes_ratio']:.3f} (1 byte per value + a 4-byte scale per head row, over 2) "
                     f"saves {p['fp8_saves_comm_s']:.3g} s of link time; quantise + dequantise cost "
                     f"{p['fp8_quantise_s']:.3g} s of HBM traffic (3 bytes per bf16 byte)")
        out.append({"option": name, "framework": fw.name, "saves_s": saves, "latency_s": latency_s - saves,
                    "exact": exact, "exact_reason": why, "basis": basis, "setting": opt["setting"],
                    "source": opt["source"]})
    return out


def attach(payload: dict, results, model, hw, shape, tun, frameworks) -> str:
    """Add `comm_options` to the payload for the leading feasible Ulysses plan; return its text lines."""
    from ditpar.plan.inputs.frameworks import runs

    lead = next((r for r in results if r.feasible and r.plan.ulysses > 1 and r.plan.pipefusion == 1), None)
    if lead is None:
        payload["comm_options"] = {"plan": None, "reason": "no feasible Ulysses plan (without PipeFusion) ranked"}
        return ""
    p = price(model, hw, shape, lead, tun)
    opts = [o for fw in frameworks or [] if fw.comm_options and runs(fw, model, hw, shape, lead.plan) is None
            for o in _options(p, fw, lead.breakdown.latency_s)]
    payload["comm_options"] = {**p, "options": opts}
    rec = next((x.get("run_recipe") for x in payload.get("plans", []) if x.get("name") == lead.plan.name), None)
    for o in opts:   # the lead's recipe names the setting where its framework is the one that has the option
        if rec and rec.get("framework") == o["framework"]:
            rec.setdefault("notes", []).append(f"{o['option']}: {o['setting']} (priced, not in latency_s: saves "
                                               f"{o['saves_s']:.3g} s; exact={'yes' if o['exact'] else 'NO'})")
    lines = []
    for o in opts:
        label = "async Ulysses" if o["option"] == "async_ulysses" else "FP8 all-to-all"
        verb = "would hide up to" if o["option"] == "async_ulysses" else "would save"
        if o["option"] == "fp8_alltoall" and p["fp8_net_s"] <= 0:
            lines.append(f"{label} on {o['framework']} would not pay for {p['plan']}: quantising costs "
                         f"{p['fp8_quantise_s']:.3g} s, the smaller payload saves {p['fp8_saves_comm_s']:.3g} s "
                         f"of the {p['exposed_alltoall_s']:.3g} s exposed all-to-all")
            continue
        lines.append(f"{label} on {o['framework']} {verb} {o['saves_s']:.3g} s of the {p['exposed_alltoall_s']:.3g} s "
                     f"exposed all-to-all of {p['plan']} ({o['basis']}); exact={'yes' if o['exact'] else 'NO'}"
                     + ("" if o["exact"] else f" ({o['exact_reason']})") + f"; to try it: {o['setting']}")
    return "".join(x + "\n" for x in lines)
