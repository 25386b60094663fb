"""Plan forms as the frameworks run them: AllGather-KV in one call or in diffusers' loop (chosen by the framework
profile), Attention2D (TensorRT-LLM VisualGen) with its gather volumes, and the head-divisibility line."""

from __future__ import annotations

import json

import pytest
from conftest import run_script
from costmodel_fixtures import box, tiny_model
from ditpar.plan.cost import Plan, Tunables, layout, make_shape, parse_order, predict
from ditpar.plan.cost.plans import DIMS, attn2d_mesh
from ditpar.plan.cost.work import (
    OPS_ATTN2D,
    OPS_KV_GATHER_ONE_CALL,
    OPS_PER_BLOCK,
    block_work,
    kv_gather_ops,
)
from ditpar.plan.decide.rank import rank_plans
from ditpar.plan.inputs import custom_model, frameworks, presets, recipes

B = 2
GQA = """name = "GQA-32q4kv"
heads = 32
kv_heads = 4
head_dim = 128
layers = 40
cfg = false
latent = [1, 128, 128]
patch = [1, 2, 2]
family = "wan"
"""


def _gqa(tmp_path):
    path = tmp_path / "gqa.toml"
    path.write_text(GQA)
    model = custom_model.load(str(path))
    return model, make_shape(model, 128, 128, 1, 50, cfg=False)


def _ranked(model, shape, devices, fw, hw="H100"):
    res = rank_plans(model, presets.resolve_hardware(hw, None, devices), shape, devices, Tunables(),
                     frameworks=frameworks.resolve_frameworks([fw]), detail=False)
    return {r.plan.name: r for r in res if r.feasible}


# ------------------------------------------------------------------ AllGather-KV: one call or the loop


@pytest.mark.parametrize("fw", ["vllm-omni"])
def test_gqa_one_call_allgather_ranks_ahead_of_ulysses_and_ring(tmp_path, fw):
    model, shape = _gqa(tmp_path)
    got = _ranked(model, shape, 4, fw)
    ag, u4, r4 = got["AG4"], got["U4"], got["R4"]
    assert ag.tunables.kv_gather_one_call
    assert ag.latency_s < u4.latency_s and ag.latency_s < r4.latency_s
    assert ag.rank < u4.rank and ag.rank < r4.rank


def test_diffusers_prices_the_loop_as_before(tmp_path):
    model, shape = _gqa(tmp_path)
    got = _ranked(model, shape, 4, "diffusers")
    hw = presets.resolve_hardware("H100", None, 4)
    loop = predict(model, hw, shape, Plan(kv_allgather=4), Tunables())
    one = predict(model, hw, shape, Plan(kv_allgather=4), Tunables(kv_gather_one_call=True))
    assert not got["AG4"].tunables.kv_gather_one_call
    assert got["AG4"].latency_s == pytest.approx(loop.latency_s)
    assert one.latency_s < loop.latency_s
    assert got["U4"].latency_s < got["AG4"].latency_s          # the loop ranks behind Ulysses here, as before


def test_one_call_block_by_hand(tmp_path):
    model, shape = _gqa(tmp_path)
    hw = presets.resolve_hardware("H100", None, 4)
    plan = Plan(kv_allgather=4)
    [one] = block_work(model, hw, shape, plan, layout(plan), kv_one_call=True)
    [loop] = block_work(model, hw, shape, plan, layout(plan))
    s = shape.tokens                                             # 4096 image tokens, no joint text (cross blocks)
    assert one.kernels == OPS_PER_BLOCK["cross"] + OPS_KV_GATHER_ONE_CALL == OPS_PER_BLOCK["cross"] + 14
    assert loop.kernels == OPS_PER_BLOCK["cross"] + kv_gather_ops(4) == OPS_PER_BLOCK["cross"] + 16 + 3 * 20
    assert one.attn_shape == (s / 4 * 32, s, 128)                # one call: local queries x the whole gathered K/V
    assert loop.attn_shape == (s / 4 * 32, s / 4, 128)           # the loop: one gathered chunk per call
    # bytes move with the K/V heads: (G-1) shards of S/G tokens x (K and V) x 4 heads x 128 x 2 B
    [ag] = [c for c in one.comms if c.name == "AllGather-KV"]
    assert ag.bytes_per_call == 3 * (s / 4) * 2 * 4 * 128 * B
    # the loop adds an fp32 out/LSE merge per further chunk; the one call has none
    merges = 3 * (s / 4) * 32 * 128 * (4 + 2 + 4)
    assert loop.relayout_bytes - one.relayout_bytes == pytest.approx(merges)


def test_profiles_say_how_allgather_runs():
    impl = {f.name: f.kv_gather_impl for f in frameworks.all_frameworks()}
    assert impl["vLLM-Omni"] == impl["LightX2V"] == impl["SGLang-diffusion"] == "one_call"
    assert impl["diffusers-CP"] == "loop"
    omni = frameworks.resolve_frameworks(["vllm-omni"])[0]
    assert omni.offers("kv_allgather", "wan", "nvidia") and ("ulysses", "kv_allgather") not in omni.incompatible


# ------------------------------------------------------------------ Attention2D


def test_attn2d_mesh():
    assert [attn2d_mesh(n) for n in (1, 2, 4, 8, 9, 16, 18)] == [(1, 1), (1, 2), (2, 2), (2, 4), (3, 3), (4, 4), (3, 6)]
    assert Plan(attn2d=9, ulysses=2, cfg=2).name == "cfg2 U2 A2D9" and Plan(attn2d=9, ulysses=2, cfg=2).devices == 36
    assert "attn2d" in DIMS
    # an order written before Attention2D was a form still parses (it goes right after kv_allgather)
    old = parse_order("tp,ulysses,ring,kv_allgather,pipefusion,cfg,dp")
    assert old == ("tp", "ulysses", "ring", "kv_allgather", "attn2d", "pipefusion", "cfg", "dp")


def test_attn2d_bytes_and_attention_by_hand():
    m = tiny_model()                                              # 8 heads x 8, 16 tokens
    plan = Plan(attn2d=4)                                         # 2 x 2 mesh
    shape = make_shape(m, 64, 64, 1, 10, cfg=False)
    [bw] = block_work(m, box(domain_size=4, devices=4), shape, plan, layout(plan))
    by = {c.name: c for c in bw.comms}
    rows = 16 / 4                                                 # tokens per rank before the gathers
    assert by["Attention2D Q all-gather"].bytes_per_call == 1 * rows * 64 * B
    assert by["Attention2D K,V all-gather"].bytes_per_call == 1 * rows * 2 * 64 * B
    assert by["Attention2D out/LSE all-to-all"].bytes_per_call == 1 * rows * (64 * B + 8 * 4)
    assert by["Attention2D out/LSE all-to-all"].family == "alltoall"
    assert bw.attn_flops == 4 * 16 * 16 * 64 / 4                   # the same FLOPs per rank as every SP form
    assert bw.attn_shape == (rows * 2 * 8, 16 / 4 * 2, 8)          # S/2 queries x S/2 keys per rank
    assert bw.kernels == OPS_PER_BLOCK["self"] + OPS_ATTN2D


def _nvl72(devices):
    out = run_script("plan.py", "--model", "wan2.2-t2v-a14b", "--hardware", "gb200-nvl72", "--devices", str(devices),
                     "--resolution", "1280x720x81", "--json", check=0).stdout
    return json.loads(out)


@pytest.mark.parametrize("devices", [16, 36])
def test_nvl72_wan22_720p_short_list_has_attention2d_not_ring16(devices):
    doc = _nvl72(devices)
    short = [p for p in doc["plans"] if p.get("short_list")]
    assert any(p["attn2d"] > 1 for p in short), [p["name"] for p in short]
    assert not any(p["ring"] >= 16 for p in short)
    assert all(p["framework"] == "TensorRT-LLM-VisualGen" for p in doc["plans"] if p["attn2d"] > 1 and p["feasible"])
    if devices == 36:   # the head wall: 40 heads stop Ulysses at U2 under cfg 2; Attention2D takes the rest
        assert doc["plans"][0]["name"] == "cfg2 U2 A2D9"


def test_trtllm_recipe_for_attention2d():
    fw = frameworks.resolve_frameworks(["tensorrt-llm"])[0]
    model = presets.resolve_model("wan2.2-t2v-a14b")
    shape = make_shape(model, 1280, 720, 81, 40)
    plan = Plan(cfg=2, ulysses=2, attn2d=9)
    rec = recipes.choose(fw, "wan", plan)
    out = recipes.render(fw, rec, model, shape, plan)
    assert "attn2d_size=(3, 3)" in out["config"] and "ulysses_size=2" in out["config"]
    assert "cfg_size=2" in out["config"] and "num_inference_steps=40" in out["config"]
    assert "num_frames=81" in out["config"] and out["world_size"] == 36
    assert recipes.render(fw, rec, model, shape, Plan(attn2d=8))["config"].count("attn2d_size=(4, 2)") == 1


# ------------------------------------------------------------------ head divisibility in every answer


def test_head_line_flux_24_heads_on_16():
    args = ["--model", "flux1-dev", "--hardware", "gb200-nvl72", "--devices", "16"]
    strict = run_script("plan.py", *args, "--framework", "xdit", check=0).stdout
    assert "U16 ruled out (24 heads do not divide by U16; no framework named pads them)" in strict
    padded = json.loads(run_script("plan.py", *args, "--json", check=0).stdout)
    pad = padded["head_degrees"]["padded"]
    assert [p["ulysses"] for p in pad] == [16] and pad[0]["heads_to"] == 32
    assert pad[0]["attention_cost"] == pytest.approx(32 / 24 - 1)
    assert padded["head_degrees"]["ulysses_wall"] == 8
    u16 = next(p for p in padded["plans"] if p["name"] == "U16")
    assert (u16["heads_per_rank"], u16["kv_heads_per_rank"]) == (2, 2)   # 24 -> 32 over 16, K/V with them
    assert u16["head_split"] == ("heads: 24 query heads do not divide by U16: padded to 32 (2 per rank, priced); "
                                 "K/V heads padded with them (2 per rank)")
    u8 = next(p for p in padded["plans"] if p["name"] == "U8 A2D2")
    assert (u8["heads_per_rank"], u8["kv_heads_per_rank"]) == (3, 3)


def test_head_line_gqa_replication(tmp_path):
    path = tmp_path / "gqa.toml"
    path.write_text(GQA)
    out = run_script("plan.py", "--model-file", str(path), "--hardware", "H100", "--devices", "8", check=0).stdout
    line = next(x for x in out.splitlines() if x.startswith("heads: 32 query / 4 K/V"))
    assert "U8 ruled out (4 K/V heads do not divide by U8; no framework named replicates K/V heads)" in line
    assert "head wall: Ulysses runs up to U8" not in line


# ------------------------------------------------------------------ published tables: the new columns and markers


def _table(tmp_path, rows, extra=()):
    import csv

    from ditpar.plan.judge import evaluate

    path = tmp_path / "t.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*evaluate.COLUMNS, *extra])
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "1") for c in [*evaluate.COLUMNS, *extra]})
    return path


def test_score_reads_attn2d_and_allgather_markers(tmp_path):
    from ditpar.errors import InputError
    from ditpar.plan.judge import evaluate

    base = {"model": "Wan2.2-T2V-A14B", "hardware": "H100", "interconnect": "NVLink", "n_devices": "8",
            "resolution_or_seq": "1280x720x81 frames", "steps": "40", "latency_s": "100", "notes": "", "source_path": "x"}
    a2d = {**base, "source_repo": "NVIDIA/TensorRT-LLM", "ulysses": "2", "cfg": "2", "attn2d": "2",
           "other_config": "attn2d_size=(2, 1)"}
    omni = {**base, "source_repo": "vllm-project/vllm-omni", "ring": "4", "cfg": "2", "attn2d": "1",
            "other_config": "allgather_degree=4"}
    diff = {**omni, "source_repo": "huggingface/diffusers", "other_config": "ring_degree=4 (allgather-kv)"}
    frame = evaluate.read_table(_table(tmp_path, [a2d, omni, diff], extra=("attn2d",)))
    rows = frame.to_dict("records")
    model, hw, _, plan, _ = evaluate.row_context(rows[0])
    assert plan.name == "cfg2 U2 A2D2"
    assert evaluate.row_context(rows[1])[3].name == "cfg2 AG4" == evaluate.row_context(rows[2])[3].name
    one, loop = evaluate.score_row(rows[1])[0], evaluate.score_row(rows[2])[0]
    assert one < loop                      # vLLM-Omni's row priced as one call, diffusers' as its loop
    bad = _table(tmp_path, [{**a2d, "attn2d": "0"}], extra=("attn2d",))
    with pytest.raises(InputError, match="column 'attn2d': '0' is not a whole number >= 1"):
        evaluate.read_table(bad)
    unstated = evaluate.read_table(_table(tmp_path, [{**a2d, "attn2d": "not stated"}], extra=("attn2d",)))
    assert evaluate.row_context(unstated.to_dict("records")[0])[4] == "not scored: degree(s) attn2d not stated"


def test_flux_8_h100_eager_tp8_not_first():
    """No published table puts TP ahead of Ulysses on one box; with DTensor's output redistributes priced, FLUX.1-dev
    on 8 x H100 eager ranks U8 first (cost-model 2.2)."""
    doc = json.loads(run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8", "--json",
                                check=0).stdout)
    feas = [p for p in doc["plans"] if p["feasible"]]
    assert feas[0]["name"] == "U8" and feas[1]["name"] == "TP8"
    tp8 = feas[1]
    note = next(n for n in tp8["notes"] if n.startswith("DTensor TP host cost"))
    assert "494 parallelized linears and 190 output redistributes" in note   # 19 x 14 + 38 x 6; 19 x 6 + 38 x 2


def test_profile_kv_gather_impl_is_checked(tmp_path):
    from ditpar.errors import InputError

    own = (frameworks.templates_dir() / "frameworks" / "custom-own-stack.toml").read_text()
    assert 'kv_gather_impl = "one_call"' in own
    bad = tmp_path / "mine.toml"
    bad.write_text(own.replace('kv_gather_impl = "one_call"', 'kv_gather_impl = "chunked"'))
    with pytest.raises(InputError, match=r"mine\.toml: key 'kv_gather_impl' must be one of one_call, loop, got 'chunked'"):
        frameworks.resolve_frameworks([str(bad)])


def test_scope_probe_refuses_attention2d_and_no_prove_line():
    out = run_script("scope_probe.py", "runs/none", "--plan", "U2 A2D4", check=2)
    assert "Attention2D gathers Q and K/V over a rows x columns mesh" in out.stderr
    assert recipes.prove_command(Plan(ulysses=2, attn2d=4)) == ""
    assert recipes.prove_command(Plan(ulysses=2, ring=4)).endswith('--plan "U2 R4" --baseline runs/scope-1card')


def test_plan_bench_names_attention2d_and_leaves_it_out_of_the_measure_command():
    from types import SimpleNamespace

    from ditpar.errors import InputError
    from ditpar.plan.decide.measured import bench_command
    from ditpar.planbench.spec import ATTN2D_REASON, parse_plan

    assert parse_plan("cfg2 U2 A2D9") == Plan(cfg=2, ulysses=2, attn2d=9)
    with pytest.raises(InputError, match="ring, AllGather-KV and Attention2D share one slot"):
        parse_plan("R2 A2D2")
    assert "TensorRT-LLM" in ATTN2D_REASON
    args = SimpleNamespace(model="Wan2.2-T2V-A14B", model_file=None, resolution=None, frames=None, steps=None,
                           heads=None, kv_heads=None, layers=None, tokens=None, no_cfg=False)
    short = [SimpleNamespace(plan=Plan(cfg=2, ulysses=2, attn2d=9)), SimpleNamespace(plan=Plan(cfg=2, ulysses=18)),
             SimpleNamespace(plan=Plan(cfg=2, ulysses=2, ring=9))]
    cmd = bench_command(args, short, 36)
    assert "--plans 'cfg2 U18' 'cfg2 U2 R9'" in cmd and "A2D" not in cmd
