"""Damaged and hostile input, round 3, for plan.py's own inputs: exact messages and values of the checks that
tests/damaged_corpus_r3_plan.py runs end to end (--measured's schema, --set parsing and ranges, the schema's
floors, files and formats on devices and deep TOML keys, a model file's tokens, the non-finite backstop)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import threading
from types import SimpleNamespace

import pytest
from conftest import ROOT, SCRIPTS, run_script
from ditpar import files, formats
from ditpar.errors import InputError
from ditpar.plan.cost import Tunables, make_shape
from ditpar.plan.inputs import custom_model, presets, schema
from ditpar.plan.inputs.calibration import apply_sets

TINY = ROOT / "tests" / "data" / "planbench" / "tiny-joint.toml"
BENCH = {"schema": "dit-parallel-opt/plan_bench/v1", "model": "Tiny-Joint", "world": 4, "device": "cuda:0",
         "backend": "nccl", "dtype": "bfloat16", "shape": {"tokens": 16, "cfg": True},
         "plans": [{"name": "U4", "step_s": 0.01, "request_s": 0.5, "dispersion_pct": 1.5, "verdict": "fastest"}]}


@pytest.fixture(autouse=True)
def _forget():
    yield
    files.reset()


# --- --measured: the schema of every key read ------------------------------------------------------------

def _read(tmp_path, doc) -> dict:
    from ditpar.plan.decide import measured

    path = tmp_path / "m.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    model = custom_model.load(str(TINY))
    return measured.read(str(path), model, make_shape(model), 4)


def _plan(**changes) -> dict:
    return {**BENCH, "plans": [{**BENCH["plans"][0], **changes}]}


def test_measured_reads_a_valid_document(tmp_path):
    rows = _read(tmp_path, BENCH)
    assert list(rows) == ["u4"]
    assert rows["u4"]["step_s"] == 0.01 and rows["u4"]["request_s"] == 0.5
    assert rows["u4"]["_on"] == "cuda:0 (nccl, bfloat16)"
    # a row not timed (null step_s, as plan_bench.py writes for a wrong plan) is skipped, not refused
    doc = {**BENCH, "plans": [*BENCH["plans"], {"name": "TP4", "step_s": None, "request_s": None,
                                                "dispersion_pct": None, "verdict": "wrong"}]}
    assert list(_read(tmp_path, doc)) == ["u4"]


@pytest.mark.parametrize("doc, message", [
    (_plan(step_s=True), "plans[0] (U4): key 'step_s' must be seconds in (0, 1e+07] or null, got True"),
    (_plan(step_s=0), "plans[0] (U4): key 'step_s' must be seconds in (0, 1e+07] or null, got 0"),
    (_plan(step_s="0.01"), "plans[0] (U4): key 'step_s' must be seconds in (0, 1e+07] or null, got '0.01'"),
    (_plan(request_s=-0.5), "plans[0] (U4): key 'request_s' must be seconds in (0, 1e+07] or null, got -0.5"),
    (_plan(request_s=1e8), "plans[0] (U4): key 'request_s' must be seconds in (0, 1e+07] or null, got 100000000.0"),
    (_plan(dispersion_pct=-1), "key 'dispersion_pct' must be a percentage in [0, 1e+06] or null, got -1"),
    (_plan(verdict="great"), "key 'verdict' must be one of '', 'fastest', 'tie', 'slower', 'noisy', 'wrong', "
                             "'not-built' or null, got 'great'"),
    ({**BENCH, "plans": [{"name": "U4", "step_s": 0.01}]},
     "plans[0] (U4): has step_s but no request_s (seconds in (0, 1e+07] or null)"),
    ({**BENCH, "plans": [BENCH["plans"][0], {**BENCH["plans"][0], "name": " u4 "}]},
     "plans[1] ( u4 ): the same plan as plans[0] (U4); each plan is measured once"),
    ({**BENCH, "world": 4.0}, "key 'world' must be an integer 1..1024, got 4.0"),
    ({**BENCH, "world": True}, "key 'world' must be an integer 1..1024, got True"),
    ({**BENCH, "shape": {"tokens": 16}}, "shape: has no key 'cfg' (true or false)"),
    ({**BENCH, "shape": [16]}, "key 'shape' must be a table with tokens and cfg, got [16]"),
    ({**BENCH, "device": 3}, "key 'device' must be a non-empty text, got 3"),
    ({**BENCH, "plans": []}, "key 'plans' must be a non-empty list of measured plans, got list"),
    ('{"schema": "dit-parallel-opt/plan_bench/v1", "world": NaN}', "holds NaN, which JSON does not allow"),
])
def test_measured_schema_names_file_plan_and_key(tmp_path, doc, message):
    with pytest.raises(InputError) as err:
        _read(tmp_path, doc)
    assert str(err.value).startswith(f"--measured {tmp_path / 'm.json'}: ")
    assert message in str(err.value)


def test_measured_step_below_the_fixed_part_is_refused_not_fitted_negative(tmp_path):
    from ditpar.plan.decide import measured
    from ditpar.plan.decide.rank import rank_plans

    model = custom_model.load(str(TINY))
    shape = make_shape(model)
    results = rank_plans(model, presets.load_hardware("910B", None, 4), shape, 4, Tunables())
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_plan(step_s=1e-6, request_s=5e-5)), encoding="utf-8")
    with pytest.raises(InputError, match=r"plan U4: step_s 1e-06 s is below the part of its predicted step no "
                                         r"compute or link scale moves \(0.003751 s of host-bound time"):
        measured.apply(str(path), results, model, shape)
    path.write_text(json.dumps(_plan(step_s=0.01, request_s=0.5)), encoding="utf-8")
    m = measured.apply(str(path), results, model, shape)
    assert m["compute_scale"] > 0 and all(o["calibrated_latency_s"] > 0 for o in m["order"])


def test_measured_schema_states_every_key_it_reads():
    from ditpar.plan.decide import measured

    assert set(measured.DOCUMENT) == {"model", "world", "device", "backend", "dtype"}
    assert set(measured.SHAPE) == {"tokens", "cfg"} and set(measured.ROW) == {"name", "verdict", "step_s",
                                                                             "request_s", "dispersion_pct"}
    assert measured.ROW["step_s"].describe() == "seconds in (0, 1e+07] or null"
    assert measured.DOCUMENT["world"].describe() == "an integer 1..1024"


# --- --set: known, once, a plain number inside the schema's range -------------------------------------------

L20 = presets.load_hardware("L20")


@pytest.mark.parametrize("items, message", [
    (["mfu=0.3", "mfu=0.5"], "--set 'mfu=0.5': mfu is already set by --set 'mfu=0.3'; give each figure once"),
    (["mfu=0_4"], "--set 'mfu=0_4': expected KEY=VALUE with a finite number such as 0.4 or 1e3, got '0_4'"),
    (["mfu=0x1"], "got '0x1'"),
    (["mfu=nan"], "got 'nan'"),
    (["mfu"], "--set 'mfu': expected KEY=VALUE with a finite number, e.g. mfu=0.4"),
    (["=3"], "--set '=3': expected KEY=VALUE"),
    (["launch_us=100001"], "--set 'launch_us=100001': key 'launch_us' must be a number in [0, 100000], got 100001.0"),
    (["overlap_efficiency=1.5"], "key 'overlap_efficiency' must be a number in [0, 1], got 1.5"),
    (["mfu=0.009"], "key 'mfu' must be a number in [0.01, 1], got 0.009"),
    (["peak_tflops_bf16=0.09"], "key 'peak_tflops_bf16' must be a number in [0.1, 100000], got 0.09"),
    (["links.intra_domain.ring_GBps=0"], "key 'links.intra_domain.ring_GBps' must be a number in [0.01, 10000], got 0.0"),
    (["links.intra_domain.alltoall_GBps.1025=3"], "--set 'links.intra_domain.alltoall_GBps.1025': unknown figure"),
    (["links.intra_domain.alltoall_GBps.2=3"], "unknown figure"),
    (["links.inter_node.bandwidth_GBps=3"] if "inter_node" not in L20.links else ["links.x.bandwidth_GBps=3"],
     "unknown figure"),
])
def test_bad_set_items_are_named(items, message):
    with pytest.raises(InputError) as err:
        apply_sets(items, L20, Tunables())
    assert message in str(err.value)


def test_set_ends_of_each_range_are_accepted():
    hw, tun, notes = apply_sets(["launch_us=0", "mfu=0.01", "peak_tflops_bf16=1e5", " links.intra_domain.latency_us"
                                 "=0.01", "links.intra_domain.alltoall_GBps.1024=10000", "overlap_efficiency=0"],
                                L20, Tunables())
    assert tun.launch_us == 0.0 and tun.overlap_efficiency == 0.0
    assert (hw.mfu, hw.peak_tflops_bf16, hw.links["intra_domain"].latency_us) == (0.01, 1e5, 0.01)
    assert dict(hw.links["intra_domain"].alltoall_GBps)[1024] == 10000.0
    assert notes[0] == "launch_us: 25.0 -> 0" and notes[4] == "links.intra_domain.alltoall_GBps.1024: unset -> 10000"


# --- the schema's floors: each figure's range, and 0 = not given where that means something ----------------

@pytest.mark.parametrize("key, low, below, expected", [
    ("peak_tflops_bf16", 0.1, 0.09, "a number in [0.1, 100000]"), ("mfu", 0.01, 0.0099, "a number in [0.01, 1]"),
    ("memory_GB", 1, 0.5, "a number in [1, 100000]"), ("hbm_bandwidth_GBps", 1, 0.9, "a number in [1, 100000]"),
])
def test_hardware_figures_have_a_floor(key, low, below, expected):
    spec = schema.HARDWARE.keys[key]
    schema.check_value(low, spec, "box.toml", key)
    with pytest.raises(InputError) as err:
        schema.check_value(below, spec, "box.toml", key)
    assert str(err.value) == f"box.toml: key '{key}' must be {expected}, got {below}"


def test_link_figures_have_a_floor_and_optional_ones_may_be_zero():
    ring, bw = schema.LINK.keys["ring_GBps"], schema.LINK.keys["bandwidth_GBps"]
    schema.check_value(0, ring, "b.toml", "links.intra_domain.ring_GBps")   # 0 = no ring figure
    with pytest.raises(InputError, match=r"must be 0 \(not given\) or a number in \[0.01, 10000\], got 0.001"):
        schema.check_value(0.001, ring, "b.toml", "links.intra_domain.ring_GBps")
    with pytest.raises(InputError, match=r"must be a number in \[0.01, 10000\], got 0$"):
        schema.check_value(0, bw, "b.toml", "links.intra_domain.bandwidth_GBps")
    with pytest.raises(InputError, match=r"must be a number in \[0.01, 1000000\], got 1e-300"):
        schema.check_value(1e-300, schema.LINK.keys["latency_us"], "b.toml", "links.intra_domain.latency_us")


def test_every_shipped_hardware_preset_is_inside_the_ranges():
    assert len(presets.list_hardware()) >= 10   # every template loaded through the schema
    for name in presets.list_hardware():
        hw = presets.resolve_hardware(name)
        assert 0.1 <= hw.peak_tflops_bf16 and 0.01 <= hw.mfu and all(
            link.bandwidth_GBps >= 0.01 and link.latency_us >= 0.01 for link in hw.links.values())


@pytest.mark.parametrize("name, interconnect, message", [
    ("1025xH100", None, "'1025xH100': device count 1025 is out of range; expected 1..1024"),
    ("0x8xH100", None, "'0x8xH100': node count 0 is out of range; expected 1..1024"),
    ("H100", "NVLink, 1234567 nodes", "'NVLink, 1234567 nodes': node count 1234567 is out of range; expected 1..1024"),
    ("9" * 5000 + "xH100", None, "device count 999999... (5000 digits) is out of range"),
], ids=["devices-1025", "nodes-0", "interconnect-nodes", "5000-digits"])
def test_counts_in_a_hardware_name_are_bounded(name, interconnect, message):
    with pytest.raises(InputError) as err:
        presets.resolve_hardware(name, interconnect, 4)
    assert message in str(err.value) and len(str(err.value)) < 200
    assert presets.resolve_hardware("2x8xH100").n_devices == 16   # within the bound, as before


# --- files and formats: devices, deep dotted keys --------------------------------------------------------

@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_a_character_device_is_refused_as_input():
    assert files.input_problem("/dev/zero", streams=True) == \
        "/dev/zero: is a device, not a file; name a saved file, a FIFO or <(...)"
    with pytest.raises(InputError, match="is a device"):
        formats.load_json("/dev/zero")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_with_a_writer_is_still_read(tmp_path):
    from ditpar.plan.judge import evaluate

    fifo = tmp_path / "t.csv"
    os.mkfifo(fifo)
    table = ROOT / "benchmarks" / "published" / "xdit_flux.csv"
    text = table.read_text(encoding="utf-8")
    writer = threading.Thread(target=lambda: fifo.write_text(text, encoding="utf-8"))
    writer.start()
    frame = evaluate.read_table(fifo)
    writer.join()
    assert frame.equals(evaluate.read_table(table)) and frame.shape == (29, 16)


def test_deep_dotted_toml_keys_are_refused_before_parsing():
    with pytest.raises(InputError, match=r"^x.toml: a key of 65 dotted parts nests more than 64 levels"):
        formats.toml_text(".".join(["a"] * 65) + " = 1\n", "x.toml")
    with pytest.raises(InputError, match="a key of 50,000 dotted parts"):
        formats.toml_text("[" + ".".join(["t"] * 50_000) + "]\n", "x.toml")
    # 64 parts is within the depth; dots inside quoted parts and values are not parts
    doc = formats.toml_text(".".join(["a"] * 63) + " = 1\n" + '"' + "." * 99 + '" = 2\nv = "' + "." * 99 + '"\n',
                            "x.toml")
    assert doc["v"] == "." * 99 and doc["." * 99] == 2


# --- a model file's tokens: the bound of --tokens ------------------------------------------------------------

def test_model_file_tokens_take_the_bound_of_the_tokens_flag(tmp_path):
    from ditpar.plan.cost import Plan, predict

    path = tmp_path / "m.toml"
    path.write_text(TINY.read_text(encoding="utf-8").replace("tokens = 16", "tokens = 65536"), encoding="utf-8")
    model = custom_model.load(str(path))
    shape = make_shape(model)
    assert (shape.tokens, shape.width, shape.height) == (65536, 65536, 1)
    flag = custom_model.with_tokens(make_shape(custom_model.load(str(TINY))), 65536)
    hw = presets.load_hardware("910B")
    assert predict(model, hw, shape, Plan(ulysses=4), Tunables()).latency_s == \
        predict(model, hw, flag, Plan(ulysses=4), Tunables()).latency_s
    big = tmp_path / "big.toml"
    big.write_text(TINY.read_text(encoding="utf-8").replace("tokens = 16", "latent = [100, 1000, 1001]\n"
                                                            "patch = [1, 1, 1]"), encoding="utf-8")
    with pytest.raises(InputError, match=r"100,100,000 tokens is out of range 1..100,000,000 \(the bound of --tokens\)"):
        make_shape(custom_model.load(str(big)))
    # a preset's sides stay in pixels
    with pytest.raises(InputError, match="width 16385 is out of range 1..16384"):
        make_shape(presets.resolve_model("FLUX.1-dev"), 16385, 1024)


# --- the backstop: a time that is not finite is an input error naming the figures ----------------------

def _plan_module():
    sys.path.insert(0, str(SCRIPTS))
    import importlib.util

    spec = importlib.util.spec_from_file_location("plan_script", SCRIPTS / "plan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_non_finite_time_names_the_figures_given():
    plan = _plan_module()
    args = SimpleNamespace(set=["mfu=0.01"], ref_latency=None, ref_step_s=2.0, launch_us=None, hardware="box.toml",
                           model_file=None, model="FLUX.1-dev", measured=None, ref_plan=None)
    bd = SimpleNamespace(step_s=math.inf)
    results = [SimpleNamespace(feasible=False, latency_s=math.inf, breakdown=bd, plan=SimpleNamespace(name="U8")),
               SimpleNamespace(feasible=True, latency_s=math.inf, breakdown=bd, plan=SimpleNamespace(name="U4"))]
    with pytest.raises(InputError) as err:
        plan.check_finite(args, results)
    assert str(err.value) == ("the predicted latency of U4 (inf) is not a finite number of seconds: the figures given "
                              "(--set mfu=0.01, --ref-step-s 2, --hardware box.toml) are each inside their range but "
                              "together beyond what the cost model can price; check their units")
    plan.check_finite(args, results[:1])   # an infeasible plan's inf is its veto, not a figure


def test_plan_py_labels_a_set_figure_given_not_measured():
    text = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "L20", "--devices", "4", "--set",
                      "links.intra_domain.alltoall_GBps.4=12", check=0).stdout
    line = next(ln for ln in text.splitlines() if "all-to-all busbw, group 4" in ln)
    assert line.split("GB/s", 1)[1].strip().startswith("given (--set): --set links.intra_domain.alltoall_GBps.4")


def test_tunables_spec_is_what_plan_py_launch_us_obeys():
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "4", "--launch-us",
                      "100001", check=2)
    assert proc.stderr == ("plan.py: error: --launch-us: key 'launch_us' must be a number in [0, 100000], "
                           "got 100001.0\n")
    assert dataclasses.asdict(schema.TUNABLES.keys["launch_us"])["hi"] == 100000
