"""plan_bench.py on gloo in 2 and 4 processes with tiny shapes: every plan's block output equals one
device, the elements each rank sends equal what plan.py prices for the same plan, bad input exits 2 with
one line and writes nothing; plan.py --measured marks measured plans and orders them by their times."""

from __future__ import annotations

import csv
import json
import os
import re
import socket
import subprocess
import sys

import pytest
from conftest import ROOT, SCRIPTS, run_script

DATA = ROOT / "tests" / "data" / "planbench"
JOINT, GQA, ODD, HEADS3 = (str(DATA / f) for f in ("tiny-joint.toml", "tiny-cross-gqa.toml", "tiny-self-odd.toml",
                                                    "tiny-heads3.toml"))
FAST = ["--warmup", "0", "--repeats", "3", "--iters", "1", "--timeout", "60"]


def spawn(n: int, *args: str, script: str = str(SCRIPTS / "plan_bench.py"), timeout: float = 120) -> list:
    """Start n ranks as torchrun would (env rendezvous on a free port); each rank's (rc, stdout, stderr)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(n),
            "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if os.path.exists("/sys/class/net/lo"):
        base.setdefault("GLOO_SOCKET_IFNAME", "lo")
    procs = [subprocess.Popen([sys.executable, script, *args], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(n)]
    out = []
    for p in procs:
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append((p.returncode, so, se))
    return out


def priced_elements(model, plan_name: str, devices: int, size: int | None = None) -> float:
    """What plan.py prices per rank per block (bytes_per_layer_by_link, bf16) in elements."""
    from ditpar.plan.cost import make_shape, predict
    from ditpar.plan.inputs import presets
    from ditpar.planbench.spec import parse_plan

    hw = presets.resolve_hardware("H100", None, devices)
    bd = predict(model, hw, make_shape(model, size, size), parse_plan(plan_name))
    return sum(bd.bytes_by_link_per_layer.values()) / 2


def _doc(ranks) -> dict:
    for rc, _so, se in ranks:
        assert rc == 0, se[-3000:]
    return json.loads(ranks[0][1])


def _check_plans(doc: dict, model, devices: int, size: int | None = None) -> None:
    for r in doc["plans"]:
        assert r["checked"] and r["max_abs_err"] <= r["tolerance"], r
        assert r["tolerance"] <= 1e-4 * 50           # fp32: 1e-4 x max(1, |out|), outputs are O(1)-O(10)
        want = priced_elements(model, r["name"], devices, size)
        got = r["elements_per_rank_per_block"]
        assert got == pytest.approx(want, rel=0.01, abs=1e-9), (r["name"], got, want)
        assert r["bytes_per_rank_per_block"] == got * 4          # fp32 on CPU
        assert r["step_s"] > 0 and r["request_s"] == pytest.approx(r["step_s"] * doc["steps"])
        assert r["block_ms"] == pytest.approx(r["step_s"] / doc["layers"] * 1e3)
        assert len(r["step_samples_s"]) == 3 and r["verdict"] in ("fastest", "tie", "slower", "noisy")


@pytest.fixture(scope="module")
def two_joint(tmp_path_factory):
    out = tmp_path_factory.mktemp("pb2")
    ranks = spawn(2, "--model-file", JOINT, "--plans", "U2", "R2", "TP2", "cfg2", "DP2", "AG2", "PF2", "--json",
                  "--csv", str(out / "b.csv"), *FAST)
    return _doc(ranks), out


def test_two_ranks_match_one_device_and_plan_py_bytes(two_joint):
    from ditpar.plan.inputs import custom_model

    doc, out = two_joint
    *built, pf = doc["plans"]
    assert pf["name"] == "PF2" and pf["verdict"] == "not-built" and "stale K/V" in pf["reason"]
    doc = {**doc, "plans": built}
    assert doc["schema"] == "dit-parallel-opt/plan_bench/v1"
    assert (doc["backend"], doc["world"], doc["dtype"], doc["check"]) == ("gloo", 2, "float32", True)
    assert [r["name"] for r in doc["plans"]] == ["U2", "R2", "TP2", "cfg2", "DP2", "AG2"]
    _check_plans(doc, custom_model.load(JOINT), 2)
    by = {r["name"]: r for r in doc["plans"]}
    # by hand, tiny-joint (16 image + 8 text tokens, 4 heads x 8, hidden 32, CFG batch 2) on 2 ranks:
    # U2: Q,K,V,O of 12 tokens x 32 wide x batch 2, half leaves the rank: 4 x 768 / 2 = 1536 elements
    assert by["U2"]["elements_per_rank_per_block"] == 1536
    assert by["DP2"]["elements_per_rank_per_block"] == 0 and by["DP2"]["bitwise"]
    with open(out / "b.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["name"] for r in rows] == [*by, "PF2"] and rows[0]["verdict"] == by["U2"]["verdict"]


def test_two_ranks_bytes_agree_with_plan_py_json(two_joint):
    doc, _ = two_joint
    proc = run_script("plan.py", "--model-file", JOINT, "--hardware", "H100", "--devices", "2", "--json", check=0)
    plans = {p["name"]: p for p in json.loads(proc.stdout)["plans"] if p["feasible"]}
    both = [r for r in doc["plans"] if r["name"] in plans and r["verdict"] != "not-built"]
    assert {r["name"] for r in both} >= {"U2", "R2"}
    for r in both:
        priced = sum(plans[r["name"]]["bytes_per_layer_by_link"].values())
        assert r["elements_per_rank_per_block"] * 2 == pytest.approx(priced, rel=0.01)


def test_four_ranks_gqa_cross_every_form():
    from ditpar.plan.inputs import custom_model

    plans = ["U4", "R4", "U2 R2", "U2 AG2", "U2 TP2", "cfg2 U2", "TP4", "U2 DP2"]
    doc = _doc(spawn(4, "--model-file", GQA, "--plans", *plans, "--json", *FAST))
    assert [r["name"] for r in doc["plans"]] == plans
    _check_plans(doc, custom_model.load(GQA), 4)
    # GQA 8q/2kv on U4: K/V replicated to lcm(2, 4) = 4 heads, one per rank, as plan.py prices it
    u4 = doc["plans"][0]
    assert u4["elements_per_rank_per_block"] == 3 / 4 * 2 * 4 * 8 * (2 * 8 + 2 * 4)   # batch 2, 4 tokens


def test_joint_and_single_stream_blocks_on_four_ranks():
    sys.path.insert(0, str(ROOT / "tests"))
    from planbench_tiny_flux import tiny_model

    plans = ["U4", "U2 R2", "U2 TP2", "TP4", "R4"]
    doc = _doc(spawn(4, "--model", "FLUX.1-dev", "--resolution", "64x64", "--plans", *plans, "--json", *FAST,
                     script=str(ROOT / "tests" / "planbench_tiny_flux.py")))
    assert doc["layers_by_kind"] == {"joint": 2, "single": 3}
    _check_plans(doc, tiny_model("FLUX.1-dev"), 4, 64)


def test_padding_of_sequence_and_heads():
    doc = _doc(spawn(4, "--model-file", ODD, "--plans", "U4", "R4", "U2 AG2", "U2 TP2", "--json", *FAST))
    for r in doc["plans"]:
        assert r["max_abs_err"] <= r["tolerance"], r
    u4 = doc["plans"][0]
    # 15 tokens -> 4 per rank (one pad row); 6 heads -> 8 (2 per rank), MHA K/V padded with Q:
    # 4 calls x (4 tokens x 8 heads x 8) x 3/4 = 768 elements
    assert u4["elements_per_rank_per_block"] == 768
    # plan.py pads the MHA K/V heads with the query heads too (8, not lcm(6, 4) = 12 replicated: that gap is closed);
    # what is left is the sequence, 15/4 tokens here (the ranking adds the pad row as pad_tokens): 720 elements
    from ditpar.plan.inputs import custom_model
    assert priced_elements(custom_model.load(ODD), "U4", 4) == pytest.approx(3.75 * 8 * 8 * 4 * 3 / 4) == 720


def test_from_plan_reads_the_short_list(tmp_path):
    plan = run_script("plan.py", "--model-file", JOINT, "--hardware", "910B", "--devices", "2", "--json", check=0)
    (tmp_path / "plan.json").write_text(plan.stdout)
    short = json.loads(plan.stdout)["short_list"]
    doc = _doc(spawn(2, "--from-plan", str(tmp_path / "plan.json"), "--model-file", JOINT, "--json", *FAST))
    assert [r["name"] for r in doc["plans"]] == short


# --- bad input: exit 2, one line, nothing written ------------------------------------------------

@pytest.mark.parametrize("args,needle", [
    (["--model-file", JOINT, "--plans", "U2 X3"], "unknown part 'X3'"),
    (["--model-file", JOINT, "--plans", "U2"], "uses 2 device(s); the launched world has 1"),
    (["--model-file", JOINT, "--plans", "single", "--repeats", "2"], "--repeats 2: at least 3"),
    (["--model-file", JOINT], "give --plans"),
    (["--model", "No-Such-Model", "--plans", "single"], "No-Such-Model"),
    (["--model-file", JOINT, "--plans", "cfg3"], "CFG parallel"),
])
def test_bad_input_exits_2_with_one_line(args, needle, tmp_path):
    proc = run_script("plan_bench.py", *args, "--csv", str(tmp_path / "o.csv"))
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("model,plan,needle", [
    (HEADS3, "U2", "3 query heads per TP rank do not divide by Ulysses 2"),
    (ODD, "R2", "15 image + 0 text tokens do not divide"),
])
def test_no_padding_refuses_indivisible_plans(model, plan, needle, tmp_path):
    ranks = spawn(2, "--model-file", model, "--plans", plan, "--no-padding", "--csv", str(tmp_path / "o.csv"), *FAST)
    for rc, _so, se in ranks:
        assert rc == 2 and se.count("\n") == 1 and needle in se, se
    assert not (tmp_path / "o.csv").exists()


def test_a_dead_rank_ends_the_run_with_one_line(tmp_path):
    ranks = spawn(2, "--model-file", JOINT, "--plans", "U2", "--fault-drill", "die:1", "--csv",
                  str(tmp_path / "o.csv"), *FAST[:-2], "--timeout", "10", timeout=90)
    assert ranks[1][0] == 17
    rc, _so, se = ranks[0]
    assert rc == 2 and se.count("\n") == 1, se
    assert se.startswith("plan_bench.py: error: rank 0:") and "a peer rank died" in se
    assert not (tmp_path / "o.csv").exists()


def test_a_hung_rank_ends_the_run_within_the_timeout(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
           "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    args = [sys.executable, str(SCRIPTS / "plan_bench.py"), "--model-file", JOINT, "--plans", "U2", "--fault-drill",
            "hang:1", "--csv", str(tmp_path / "o.csv"), *FAST[:-2], "--timeout", "3"]
    procs = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    try:
        _so, se = procs[0].communicate(timeout=90)
    finally:
        procs[1].kill()       # the stalled rank (its own watchdog would end it after --timeout + 30 s)
        procs[1].communicate()
    assert procs[0].returncode == 2 and se.count("\n") == 1, se
    assert "rank 0:" in se and "hung past --timeout 3 s" in se
    assert not (tmp_path / "o.csv").exists()


def test_a_wrong_plan_is_not_timed_and_exits_1(tmp_path):
    ranks = spawn(2, "--model-file", JOINT, "--plans", "U2", "--fault-drill", "corrupt:1", "--json",
                  "--csv", str(tmp_path / "o.csv"), *FAST)
    assert [rc for rc, _so, _se in ranks] == [1, 1]
    se = ranks[0][2]
    assert se.count("\n") == 1 and "differs from one device beyond the tolerance for U2" in se, se
    doc = json.loads(ranks[0][1])
    u2 = doc["plans"][0]
    assert u2["verdict"] == "wrong" and u2["block_ms"] is None and u2["step_s"] is None
    assert u2["max_abs_err"] == pytest.approx(1e-2, rel=1e-3) and u2["max_abs_err"] > u2["tolerance"]
    assert (tmp_path / "o.csv").exists()        # exit 1 is a result: the table is written whole


# --- plan.py --measured ------------------------------------------------------------------------

def _measured(tmp_path, plans: dict[str, float], model="Tiny-Joint", world=4, verdict="tie") -> str:
    doc = {"schema": "dit-parallel-opt/plan_bench/v1", "model": model, "world": world,
           "shape": {"tokens": 16, "cfg": True, "steps": 50},
           "plans": [{"name": n, "step_s": s, "request_s": s * 50, "dispersion_pct": 1.0, "verdict": verdict}
                     for n, s in plans.items()]}
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(doc))
    return str(path)


PLAN4 = ["--model-file", JOINT, "--hardware", "910B", "--devices", "4"]


def test_plan_py_measured_marks_and_orders(tmp_path):
    path = _measured(tmp_path, {"U4": 0.030, "TP4": 0.010, "cfg2 U2": 0.020})
    doc = json.loads(run_script("plan.py", *PLAN4, "--measured", path, "--json", check=0).stdout)
    m = doc["measured"]
    assert [o["name"] for o in m["order"][:3]] == ["TP4", "cfg2 U2", "U4"]
    assert all(o["measured"] for o in m["order"][:3]) and not any(o["measured"] for o in m["order"][3:])
    recs = {p["name"]: p for p in doc["plans"]}
    assert recs["TP4"]["measured"] and recs["TP4"]["measured_request_s"] == pytest.approx(0.5)
    assert not recs["U2 R2"]["measured"]
    # the calibration, recomputed from plan.py's own breakdown: a x compute + b x exposed comm + the rest
    a, b = m["compute_scale"], m["comm_scale"]
    for name in ("U2 R2", "R4"):
        p = recs[name]
        steps = doc["shape"]["steps"]
        comp, comm = p["compute_s"] / steps, p["exposed_comm_s"] / steps
        rest = p["step_s"] - comp - comm
        want = (a * comp + b * comm + rest) * steps + (p["predicted_latency_s"] - p["step_s"] * steps)
        assert p["calibrated_latency_s"] == pytest.approx(want, rel=1e-9)
    assert len(m["held_out"]) == 3
    text = run_script("plan.py", *PLAN4, "--measured", path, check=0).stdout
    block = text.split("measured (--measured")[1].splitlines()
    assert [ln.split()[0] for ln in block[2:5]] == ["TP4", "cfg2", "U4"]
    assert all("measured" in ln for ln in block[2:5]) and "calibrated" in block[5]


def test_plan_py_measured_fit_one_plan_is_one_scale(tmp_path):
    from ditpar.plan.decide.measured import fit

    assert fit([(1.0, 1.0, 0.5, 4.5)]) == (2.0, 2.0)
    a, b = fit([(1.0, 0.0, 0.0, 3.0), (0.0, 1.0, 0.0, 5.0)])
    assert (a, b) == pytest.approx((3.0, 5.0))


@pytest.mark.parametrize("kwargs,needle", [
    ({"model": "Other"}, "measured another request: model 'Other'"),
    ({"world": 2}, "world 2"),
    ({"verdict": "noisy"}, "no plan with a usable measurement"),
])
def test_plan_py_measured_refuses_other_requests(tmp_path, kwargs, needle):
    path = _measured(tmp_path, {"U4": 0.03}, **kwargs)
    proc = run_script("plan.py", *PLAN4, "--measured", path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr


def test_plan_py_measured_unknown_plan(tmp_path):
    proc = run_script("plan.py", *PLAN4, "--measured", _measured(tmp_path, {"U8": 0.03}))
    assert proc.returncode == 2 and "not plans of this request" in proc.stderr


def test_plan_py_conclusion_prints_the_bench_command():
    text = run_script("plan.py", *PLAN4, check=0).stdout
    short = json.loads(run_script("plan.py", *PLAN4, "--json", check=0).stdout)["short_list"]
    assert len(short) >= 2
    line = text[text.index("Measure them without weights"):]
    assert f"torchrun --nproc-per-node 4 scripts/plan_bench.py --model-file {JOINT} --plans" in line
    for name in short:
        assert (f"'{name}'" if " " in name else name) in line


# --- pure parts ----------------------------------------------------------------------------------

def test_parse_plan_names():
    from ditpar.errors import InputError
    from ditpar.planbench.spec import parse_plan

    p = parse_plan("cfg2 U2 R2")
    assert (p.cfg, p.ulysses, p.ring, p.devices, p.name) == (2, 2, 2, 8, "cfg2 U2 R2")
    assert parse_plan("u4 ag2").kv_allgather == 2 and parse_plan("single").devices == 1
    assert parse_plan("TP4 DP2").name == "TP4 DP2"
    assert parse_plan("PF2 M4").name == "PF2 M4"
    for bad in ("U2 R2 AG2", "U2 U4", "Z3", "", "m4", "U2 M4", "U" + "9" * 5000, "U2048", "U2\u0663"):
        with pytest.raises(InputError):
            parse_plan(bad)


def test_abba_and_verdicts():
    from ditpar.planbench import timing

    assert timing.abba_orders(2, 4) == [[0, 1], [1, 0], [0, 1], [1, 0]]
    s = timing.summarize([1.0, 1.02, 0.99])
    assert s["median"] == 1.0 and s["dispersion_pct"] == pytest.approx(3.0)
    rows = [{"step_s": 1.0, "dispersion_pct": 1.0}, {"step_s": 1.02, "dispersion_pct": 2.0},
            {"step_s": 1.2, "dispersion_pct": 1.0}, {"step_s": 0.5, "dispersion_pct": 9.0},
            {"verdict": "wrong"}]
    timing.verdicts(rows)
    assert [r["verdict"] for r in rows] == ["fastest", "tie", "slower", "noisy", "wrong"]


# --- round 3: memory estimate, flag bounds, --fault-drill, --from-plan schema --------------------

def _cpu_peak_bytes(fn) -> tuple[int, int]:
    """(peak, net) bytes torch's CPU allocator holds while fn runs, from the profiler's memory events:
    each op's own allocations at its start, each free at its time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    moves = sorted((e.time_range.start, e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage)
                   for e in prof.events())
    live = peak = 0
    for _, n in moves:
        live += n
        peak = max(peak, live)
    return peak, live


def _shape(kind: str, gated: bool = False, kv: int = 4):
    from ditpar.planbench.blocks import BlockShape

    text = 48 if kind in ("joint", "single") else 0
    return BlockShape(kind, 64, 4 if not gated else 8, kv, 16, 256 if not gated else 128, gated, 256, text,
                      40 if kind == "cross" else 0, 2)


def test_memory_estimate_of_a_self_block_by_hand():
    from ditpar.planbench import memory

    s = _shape("self")   # hidden 64, 4 heads x 16, FFN 256 (plain), 256 tokens, CFG batch 2
    # wq, wk, wv, wo: 64 x 64 each; w1, w2: 64 x 256 each; adaLN table 6 x 64
    assert memory.weight_elements(s) == 4 * 64 * 64 + 2 * 64 * 256 + 6 * 64 == 49536
    # x: 2 x 256 x 64; temb: 2 x 6 x 64
    assert memory.input_elements(s) == 2 * 256 * 64 + 2 * 6 * 64 == 33536
    # per row of 2 x 256: 5 x 64 (residual, modulated copies) + 64 + 2 x 64 (Q, K, V) + 2 x 256 (MLP)
    assert memory.activation_elements(s) == 2 * 256 * (5 * 64 + 64 + 128 + 512) == 524288
    est = memory.estimate({"self": (s, 2)}, [], "float32", "cpu", check=True)
    # one process on the CPU in fp32: the reference shares the full tensors; its output 2 x 256 x 64 stays
    assert est.host == (49536 + 33536) * 4 and est.device == (2 * 256 * 64 + 524288) * 4 and est.same_memory


def test_memory_estimate_of_shards_on_an_accelerator():
    from ditpar.planbench import memory
    from ditpar.planbench.spec import parse_plan

    s = _shape("self")
    est = memory.estimate({"self": (s, 1)}, [parse_plan("TP2"), parse_plan("U2")], "bfloat16", "cuda", check=False)
    # bf16 copies: TP2's half of the weights, U2's whole weights (tp 1), each plan's share of the inputs
    # (TP2: all of them, U2: half), one forward's activations
    want = (49536 // 2 + 49536 + 33536 + 33536 // 2 + 524288) * 2
    assert est.device == want and est.host == (49536 + 33536) * 4 and not est.same_memory


@pytest.mark.parametrize("kind,gated,kv", [("self", False, 4), ("self", True, 2), ("joint", False, 4),
                                           ("joint", True, 2), ("single", False, 4), ("single", True, 2),
                                           ("cross", False, 4), ("cross", True, 1)])
def test_memory_estimate_against_torch_cpu_allocations(kind, gated, kv):
    """Weights and inputs: exactly the bytes torch allocates for them. One forward's activations: at least
    the peak torch's CPU allocator reaches and at most 1.5 x it (the estimate may only err high)."""
    import torch
    from ditpar.plan.cost.plans import Plan
    from ditpar.planbench import memory
    from ditpar.planbench.blocks import forward, make_inputs, make_weights
    from ditpar.planbench.forms import Comm, Form
    from ditpar.planbench.spec import place

    s = _shape(kind, gated, kv)
    w, inp = make_weights(s, 0), make_inputs(s, 1)
    assert sum(t.untyped_storage().nbytes() for t in w.values()) == memory.weight_elements(s) * 4
    assert sum(t.untyped_storage().nbytes() for t in inp.values()) == memory.input_elements(s) * 4
    form = Form(place(Plan(), 0, 1), s, Comm({}), True)
    with torch.no_grad():
        peak, _ = _cpu_peak_bytes(lambda: forward(s, w, inp, form))
    est = memory.activation_elements(s) * 4
    assert peak <= est <= 1.5 * peak, (kind, gated, peak, est)


def test_memory_refusal_names_estimate_and_limit():
    from ditpar.errors import InputError
    from ditpar.planbench import memory

    est = memory.Estimate(host=3 << 30, device=1 << 30, same_memory=True)
    memory.refuse_if_too_big(est, host_limit=5 << 30, device_limit=None, ranks_here=1, what="m")   # 4 <= 4.5 GiB
    with pytest.raises(InputError, match=r"about 4 GiB per rank x 2 ranks on this host .* has 5 GiB available"):
        memory.refuse_if_too_big(est, host_limit=5 << 30, device_limit=None, ranks_here=2, what="m")
    gpu = memory.Estimate(host=1 << 30, device=10 << 30, same_memory=False)
    memory.refuse_if_too_big(gpu, host_limit=2 << 30, device_limit=12 << 30, ranks_here=1, what="m")
    with pytest.raises(InputError, match=r"about 10 GiB of device memory per rank .* device has 11 GiB free"):
        memory.refuse_if_too_big(gpu, host_limit=2 << 30, device_limit=11 << 30, ranks_here=1, what="m")
    # --check is on by default everywhere; a refusal then names --no-check, whose one-device reference is in the estimate
    with pytest.raises(InputError, match=r"fewer plans per run; or --no-check \(its one-device reference"):
        memory.refuse_if_too_big(gpu, host_limit=2 << 30, device_limit=11 << 30, ranks_here=1, what="m",
                                 more_hint="; or --no-check (its one-device reference is in the estimate)")
    assert memory.available_host_bytes() is None or memory.available_host_bytes() > 0


def test_check_is_on_by_default_on_accelerators_too():
    from conftest import run_script

    text = run_script("plan_bench.py", "--help").stdout
    assert "default: on, accelerators included" in " ".join(text.split())


def test_memory_refusal_on_two_ranks_is_one_line_each(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from damaged_corpus_r3_planbench import HUGE_MODEL

    (tmp_path / "huge.toml").write_text(HUGE_MODEL)
    ranks = spawn(2, "--model-file", str(tmp_path / "huge.toml"), "--plans", "U2", *FAST)
    for rc, _so, se in ranks:
        assert rc == 2 and se.count("\n") == 1 and "would allocate about" in se and "peer" not in se, se


def test_a_failed_step_blames_a_peer_only_when_there_is_one():
    from types import SimpleNamespace

    from ditpar.planbench.run import failure

    one = SimpleNamespace(rank=0, world=1, device="cpu", timeout_s=300.0)
    two = SimpleNamespace(rank=1, world=2, device="cpu", timeout_s=300.0)
    msg = str(failure(one, "building the blocks", RuntimeError("boom")))
    assert msg == "rank 0: building the blocks failed (RuntimeError: boom) in a one-process run"
    assert "a peer rank died" in str(failure(two, "warm-up", RuntimeError("Connection reset by peer")))
    oom = RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried")
    for ctx in (one, two):
        text = str(failure(ctx, "building the blocks", oom))
        assert "out of memory on cpu" in text and "peer" not in text.replace("tried", "")
    assert "out of memory" in str(failure(two, "x", MemoryError()))


def _args(**kw):
    from argparse import Namespace

    base = {"warmup": 2, "repeats": 3, "iters": 3, "seed": 0, "steps": None, "frames": None, "heads": None,
            "kv_heads": None, "layers": None, "tokens": None, "timeout": 300.0, "plans": ["single"],
            "resolution": None, "model": None, "model_file": None, "from_plan": None}
    return Namespace(**{**base, **kw})


@pytest.mark.parametrize("kw,message", [
    ({"seed": 2**63}, "--seed 9223372036854775808: expected 0..9223372036854775807 (torch's generator takes a "
                      "64-bit seed)"),
    ({"seed": -1}, "--seed -1: expected 0..9223372036854775807"),
    ({"timeout": 86401.0}, "--timeout 86401: expected 1..86400 seconds"),
    ({"timeout": 0.5}, "--timeout 0.5: expected 1..86400 seconds"),
    ({"warmup": 101}, "--warmup 101: expected 0..100 (untimed forwards per plan and block kind)"),
    ({"repeats": 101}, "--repeats 101: expected 3..100"),
    ({"repeats": -4}, "--repeats -4: at least 3"),
    ({"iters": 0}, "--iters 0: expected 1..100"),
    ({"kv_heads": 4097}, "--kv-heads 4097: expected 1..4096"),
    ({"tokens": 10**30}, "--tokens 100000000000...(31 digits): expected 1..100000000"),
    ({"plans": ["single"] * 65}, "--plans: 65 plans; at most 64 per run"),
    ({"model": "x" * 4097}, "--model: 4097 characters; expected a name or path of 1..4096"),
    ({"model_file": ""}, "--model-file: 0 characters; expected a name or path of 1..4096"),
    ({"resolution": "16x0"}, "--resolution '16x0': height 0: expected 1..16384"),
    ({"resolution": "16x16x0"}, "--resolution '16x16x0': frames 0: expected 1..10000"),
])
def test_flag_bounds(kw, message):
    from ditpar.errors import InputError
    from ditpar.planbench.app import check_args

    with pytest.raises(InputError) as exc:
        check_args(_args(**kw))
    assert str(exc.value).startswith(message), str(exc.value)


def test_flag_bounds_accept_their_edges():
    from ditpar.planbench.app import check_args

    check_args(_args(seed=2**63 - 1, timeout=86400.0, warmup=0, repeats=100, iters=100, tokens=10**8,
                     resolution="16384x1", plans=["single"] * 64))
    check_args(_args(timeout=1.0, warmup=100, repeats=3, iters=1))


@pytest.mark.parametrize("text,world,want", [
    ("die:1", 2, ("die", 1)), ("corrupt:3", 4, ("corrupt", 3)), ("hang:0", 2, ("hang", 0)),
    ("die:2", 2, "rank 2 outside the world of 2 (ranks 0..1)"), ("die:0", 1, "needs at least 2 ranks"),
    ("die:\u0663", 4, "expected die:R"), ("DIE:1", 2, "expected die:R"), ("die:1:2", 2, "expected die:R"),
    ("die:+1", 2, "expected die:R"), ("die:" + "9" * 5000, 2, "expected die:R"), ("die: 1", 2, "expected die:R"),
])
def test_fault_drill_parsing(text, world, want):
    from ditpar.errors import InputError
    from ditpar.planbench.app import parse_fault

    if isinstance(want, tuple):
        assert parse_fault(text, world) == want
        return
    with pytest.raises(InputError, match=re.escape(want)):
        parse_fault(text, world)


def test_a_corrupt_drill_without_the_check_is_refused(tmp_path):
    ranks = spawn(2, "--model-file", JOINT, "--plans", "U2", "--fault-drill", "corrupt:1", "--no-check",
                  "--csv", str(tmp_path / "o.csv"), *FAST)
    for rc, _so, se in ranks:
        assert rc == 2 and se.count("\n") == 1 and "needs --check" in se, se
    assert not (tmp_path / "o.csv").exists()


GOOD_PLAN = {"schema": "dit-parallel-opt/plan/v1", "model": "Tiny-Joint", "short_list": ["U2", "R2"],
             "shape": {"width": 16, "height": 1, "frames": 1, "steps": 50, "cfg": True, "tokens": 16}}


def test_from_plan_schema_reads_a_fifo_once_and_a_bom(tmp_path):
    import threading

    from ditpar.planbench.report import PlanDoc, read_plan_json

    want = PlanDoc("Tiny-Joint", ["U2", "R2"], 16, 1, 1, 50, True, 16)
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD_PLAN).encode())
    assert read_plan_json(str(tmp_path / "bom.json")) == want
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(json.dumps(GOOD_PLAN)))
    writer.start()
    assert read_plan_json(str(fifo)) == want
    writer.join()


@pytest.mark.parametrize("change,message", [
    ({"shape": [16, 1]}, "key 'shape' must be an object with width, height, frames, steps and cfg, got [16, 1] (list)"),
    ({"shape": {"width": 16}}, "key 'shape' needs width, height, frames, steps and cfg; missing height, frames, steps, cfg"),
    ({"shape.height": "1"}, "key 'shape.height': expected an integer 1..16384, got '1' (str)"),
    ({"shape.steps": 10001}, "key 'shape.steps': 10001 is out of range; expected an integer 1..10000"),
    ({"shape.cfg": 1}, "key 'shape.cfg': expected true or false, got 1 (int)"),
    ({"shape.tokens": None}, None),
    ({"short_list": "U2"}, "key 'short_list' must be a list of 1..64 plan names"),
    ({"short_list": ["U2", 2]}, "key 'short_list' must be a list of 1..64 plan names"),
    ({"model": ""}, "key 'model' must be a model name (text of 1..200 characters), got '' (str)"),
])
def test_from_plan_schema_names_the_key(tmp_path, change, message):
    from ditpar.errors import InputError
    from ditpar.planbench.report import read_plan_json

    doc = json.loads(json.dumps(GOOD_PLAN))
    for key, value in change.items():
        head, _, tail = key.partition(".")
        if tail:
            doc[head][tail] = value
        else:
            doc[head] = value
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    if message is None:
        assert read_plan_json(str(path)).tokens is None
        return
    with pytest.raises(InputError) as exc:
        read_plan_json(str(path))
    assert str(exc.value) == f"{path}: {message}" or str(exc.value).startswith(f"{path}: {message}"), str(exc.value)


def test_forward_flops_and_the_time_refusal():
    from ditpar.errors import InputError
    from ditpar.planbench import memory

    s = _shape("self")
    # linears: 2 x batch 2 x 256 rows x 49,152 weights (wq, wk, wv, wo 64 x 64; w1, w2 64 x 256);
    # attention: 4 x batch 2 x 256 x 256 rows x dq 64
    assert memory.forward_flops(s) == (2 * 2 * 256 * 49152, 4 * 2 * 256 * 256 * 64)
    kinds = {"self": (s, 3)}
    # 3 calls x (50,331,648 + 33,554,432) FLOP at 1e9 / 1e8 FLOP/s = 0.151 s + 1.007 s = 1.158 s
    memory.refuse_if_too_slow(kinds, 3, (1e9, 1e8), 1.2, "m")
    with pytest.raises(InputError, match=r"^m: 3 forward\(s\) .* 0.000252 TFLOP, about 1.16 s at best .* "
                                         r"past --timeout 1.1 s"):
        memory.refuse_if_too_slow(kinds, 3, (1e9, 1e8), 1.1, "m")
    gemm, attention = memory.cpu_rates(16)
    assert gemm > 1e6 and attention > 1e6


def test_watchdog_of_a_one_process_run_blames_no_peer():
    code = ("import sys, time; sys.path.insert(0, 'scripts'); from ditpar.comm.dist import Watchdog; "
            "w = Watchdog(0, 0.5, 1); w.start(); w.pet('building the blocks'); time.sleep(20)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "no progress for 0.5 s in building the blocks; this one-process run has no peer" in proc.stderr
    assert "peer rank died" not in proc.stderr


def test_a_world_beyond_any_job_is_refused_before_the_layouts_are_walked():
    # before: 100,000,000 ranks x the plan's layout walked before any group exists (minutes, then a hang)
    env = {**os.environ, "WORLD_SIZE": "100000000", "RANK": "0"}
    proc = subprocess.run([sys.executable, str(SCRIPTS / "plan_bench.py"), "--model-file", JOINT, "--plans",
                           "U10000 R10000"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "environment WORLD_SIZE=100000000: expected 1..1024 ranks" in proc.stderr


def test_from_plan_shape_yields_to_resolution(tmp_path):
    """--resolution wins over the document's shape, its token count included (the document's tokens
    replaced the --resolution's before)."""
    import plan_bench
    from ditpar.planbench.app import make_request

    doc = {"schema": "dit-parallel-opt/plan/v1", "model": "FLUX.1-dev", "short_list": ["single"],
           "shape": {"width": 1024, "height": 1024, "frames": 1, "steps": 28, "cfg": False, "tokens": 4096}}
    (tmp_path / "p.json").write_text(json.dumps(doc))
    base = ["--from-plan", str(tmp_path / "p.json")]
    req = make_request(plan_bench.build_parser().parse_args(base), 1)
    assert (req.shape.width, req.shape.tokens, req.shape.steps) == (1024, 4096, 28)
    req = make_request(plan_bench.build_parser().parse_args([*base, "--resolution", "256x256"]), 1)
    assert (req.shape.width, req.shape.tokens, req.shape.steps) == (256, 256, 28)   # (256 / 16)^2 tokens


def test_inputs_that_never_end_or_are_too_large_are_refused_before_reading(tmp_path):
    from ditpar.errors import InputError
    from ditpar.planbench.report import MAX_INPUT_BYTES, check_input

    big = tmp_path / "big.json"
    with open(big, "wb") as f:       # sparse: no 64 MiB written
        f.truncate(MAX_INPUT_BYTES + 1)
    with pytest.raises(InputError, match=r"^--from-plan .*big.json: 67,108,865 bytes; expected at most 64 MiB"):
        check_input(str(big), "--from-plan", streams=True)
    with open(big, "r+b") as f:
        f.truncate(MAX_INPUT_BYTES)
    check_input(str(big), "--from-plan", streams=True)
    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)
    check_input(str(fifo), "--from-plan", streams=True)          # read once by files.read_input
    with pytest.raises(InputError, match="is a FIFO"):
        check_input(str(fifo), "--model-file", streams=False)     # the TOML reader would block on it
    with pytest.raises(InputError, match=r"^--from-plan: /dev/zero: is a device"):
        check_input("/dev/zero", "--from-plan", streams=True)


def test_says_what_it_builds_and_its_memory_before_it_starts():
    """--progress (or stderr a terminal): rank 0 names the plans, model and shape and the memory estimate on
    stderr before building; stdout stays one JSON document; the other rank says nothing of it. Without it
    (stderr a pipe) nothing is said, so a failure stays one line."""
    from ditpar.plan.inputs import custom_model

    quiet = spawn(2, "--model-file", JOINT, "--plans", "U2", "--json", *FAST)
    assert not any("building" in se for _rc, _so, se in quiet)
    ranks = spawn(2, "--model-file", JOINT, "--plans", "U2", "TP2", "--json", "--progress", *FAST)
    doc = _doc(ranks)
    line = [ln for ln in ranks[0][2].splitlines() if ln.startswith("plan_bench.py: building ")]
    assert len(line) == 1 and not any("building" in ln for ln in ranks[1][2].splitlines())
    assert line[0].startswith(f"plan_bench.py: building 2 plan(s) (U2, TP2) of {custom_model.load(JOINT).name}, ")
    assert f"{doc['layers']} block(s)" in line[0] and "on cpu (float32)" in line[0]
    import re

    est = re.search(r"estimated memory about ([0-9.e+-]+) GiB per rank \(host and device share it;", line[0])
    assert est and 0 < float(est.group(1)) < 1   # tiny-joint: a few MiB
    assert "building" not in ranks[0][1]
