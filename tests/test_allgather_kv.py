"""AllGather-KV priced as diffusers' TemplatedRingAttention runs it: one attention call per gathered chunk, an
fp32 out/LSE merge after each further chunk. Op counts read off that loop; bytes and the order by hand."""

from __future__ import annotations

import pytest
from conftest import ROOT
from ditpar.plan.cost import Plan, layout, make_shape
from ditpar.plan.cost.work import OPS_PER_BLOCK, OPS_USP_LAYOUT, block_work, kv_gather_ops
from ditpar.plan.inputs import presets
from ditpar.plan.judge import evaluate


def test_gather_ops_grow_by_one_merge_per_further_chunk():
    # gather (cat, flatten x2, contiguous, all_gather, chunk) and the first chunk's call, casts and unsqueeze = 16;
    # each further chunk: buffer slices (5), attention call (4), casts (2), unsqueeze (1), merge (8) = 20
    assert [kv_gather_ops(g) for g in (1, 2, 4, 8)] == [0, 16 + 20, 16 + 3 * 20, 16 + 7 * 20]


def _single_block(plan: Plan):
    model, hw = presets.resolve_model("FLUX.1-dev"), presets.resolve_hardware("H100", None, 8)
    shape = make_shape(model, 1024, 1024, 1, 28, cfg=None)
    return next(bw for bw in block_work(model, hw, shape, plan, layout(plan)) if bw.kind == "single"), model, shape


def test_a_flux_single_block_under_ag4_by_hand():
    bw, model, shape = _single_block(Plan(kv_allgather=4))
    # ops: the block's own 30 and the gather's 76 (no Ulysses or ring: no SeqAllToAll4D layout copies)
    assert bw.kernels == OPS_PER_BLOCK["single"] + 76
    # U2 AG2: Ulysses adds its 32 layout copies and 4 all_to_all calls; the gather over 2 ranks 16 + 20
    assert _single_block(Plan(ulysses=2, kv_allgather=2))[0].kernels == OPS_PER_BLOCK["single"] + OPS_USP_LAYOUT + 4 + 36
    tokens = 4096 + 512                                   # image + joint text tokens attend together
    # each attention call sees one gathered chunk: a quarter of the keys
    assert bw.attn_shape[1] == pytest.approx(tokens / 4)
    # bytes: the gathered K/V re-laid out once (2 x tokens x 2 x dkv x 2 B) and 3 fp32 merges of the rank's out
    # (n rows x dq) at 4 + 2 + 4 bytes per element
    n, dq = tokens / 4, 24 * 128
    want = 2 * tokens * 2 * dq * 2 + 3 * n * dq * (4 + 2 + 4)
    assert bw.relayout_bytes == pytest.approx(want)


def test_diffusers_h100_table_is_ordered_as_measured():
    """diffusers' FLUX.1-dev on 4 x H100: Ulysses-4 6.67 s < Ulysses-2 x ring-2 11.07 s < ring-4 13.08 s, the ring
    run as K/V all-gather; before this term the all-gather form was predicted fastest."""
    frame = evaluate.load_tables(ROOT / "benchmarks" / "published")["diffusers_distributed_inference.csv"]
    h100 = frame[frame["hardware"] == "H100"]
    got = {evaluate.row_context(r)[3].name: evaluate.score_row(r)[0] for _, r in h100.iterrows()}
    assert set(got) == {"U4", "U2 AG2", "AG4"}
    assert got["U4"] < got["U2 AG2"] < got["AG4"]


def test_framework_diffusers_ranks_its_ring_as_the_kv_gather():
    """`plan.py --framework diffusers`: diffusers' only ring (huggingface/diffusers@58eb52c0, rotate_method
    'allgather' only) is ranked as the K/V all-gather form, the same pricing `plan.py evaluate` gives the table's
    ring rows through their `ring_rotate_method=allgather` marker; no P2P ring is offered for it."""
    import json

    from conftest import run_script

    out = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "4", "--steps", "50",
                     "--framework", "diffusers", "--all", "--json", check=0)
    plans = {p["name"]: p for p in json.loads(out.stdout)["plans"]}
    assert not plans["R4"]["feasible"] and not plans["U2 R2"]["feasible"]
    assert plans["R4"]["gates"][0]["reason"] == "no named framework runs it: diffusers-CP: no ring for flux"
    assert all(plans[n]["feasible"] and plans[n]["framework"] == "diffusers-CP" for n in ("U4", "U2 AG2", "AG4"))
    # the evaluation path (table row -> marker -> Plan(kv_allgather=...)), serial stages taken off, gives the same
    frame = evaluate.load_tables(ROOT / "benchmarks" / "published")["diffusers_distributed_inference.csv"]
    h100 = frame[frame["hardware"] == "H100"]
    for _, row in h100.iterrows():
        model, hw, shape, plan, _ = evaluate.row_context(row)
        dit = evaluate.score_row(row)[0] - evaluate.row_serial(row, model, hw, shape, plan).total_s
        assert plans[plan.name]["predicted_latency_s"] == pytest.approx(dit, rel=1e-3)
    # and the ranking orders the three as the table measured them: U4 6.67 < U2 AG2 11.07 < AG4 13.08 s
    lat = {n: plans[n]["predicted_latency_s"] for n in ("U4", "U2 AG2", "AG4")}
    assert lat["U4"] < lat["U2 AG2"] < lat["AG4"]
