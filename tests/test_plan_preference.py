"""Which framework the table names for a plan, and data-parallel plans kept out of the runner-up slot."""

from __future__ import annotations

import dataclasses

from ditpar.plan.cost import Tunables, make_shape
from ditpar.plan.decide.rank import rank_plans, runner_up
from ditpar.plan.inputs import presets
from ditpar.plan.inputs.frameworks import all_frameworks, preferred


def _rank(model: str, hardware: str, devices: int):
    m, hw = presets.resolve_model(model), presets.resolve_hardware(hardware)
    shape = make_shape(m, m.default_width, m.default_height, m.default_frames, m.default_steps, cfg=None)
    return rank_plans(m, hw, shape, devices, Tunables(), frameworks=all_frameworks())


def test_native_backend_and_vendor_stack_named_first():
    every = {fw.name: fw for fw in all_frameworks()}
    ascend, nvidia = presets.resolve_hardware("910B"), presets.resolve_hardware("H100")
    # cache-dit sorts before MindIE-SD by file name; on Ascend the Ascend stack is named
    both = [every["cache-dit"], every["MindIE-SD"]]
    assert [fw.name for fw in preferred(both, ascend)] == ["MindIE-SD", "cache-dit"]
    # an NCCL-only profile never goes before an HCCL one on Ascend, whatever the preference list says
    assert preferred([every["diffusers-CP"], every["xDiT"]], ascend)[0].name == "xDiT"
    assert [fw.name for fw in preferred([every["cache-dit"], every["xDiT"]], nvidia)] == ["xDiT", "cache-dit"]
    # profiles outside the preference list keep the order given (stable)
    own = dataclasses.replace(every["cache-dit"], name="my-stack")
    assert [fw.name for fw in preferred([own, every["cache-dit"]], nvidia)] == ["cache-dit", "my-stack"]
    assert [fw.name for fw in preferred([own, every["ParaAttention"]], presets.resolve_hardware("A100"))] == \
        ["ParaAttention", "my-stack"]


def test_ranked_table_names_mindie_on_ascend_and_xdit_for_ulysses_on_h100():
    res = _rank("Wan2.1-T2V-14B", "910B", 8)
    assert res[0].feasible and res[0].framework == "MindIE-SD"
    # MindIE-SD has no launcher for FLUX.1-dev: the column names the framework whose recipe is printed
    flux = _rank("FLUX.1-dev", "910B", 8)
    assert flux[0].feasible and flux[0].framework == "xDiT"
    u8 = next(r for r in _rank("FLUX.1-dev", "H100", 8) if r.plan.name == "U8")
    assert u8.framework == "xDiT"


def test_data_parallel_plan_is_not_the_runner_up():
    res = _rank("FLUX.1-dev", "H100", 8)
    feas = [r for r in res if r.feasible and r.exact]
    first_dp = min(i for i, r in enumerate(feas) if r.plan.dp > 1)
    assert all(r.plan.dp == 1 for r in feas[:first_dp]) and all(r.plan.dp > 1 for r in feas[first_dp:])
    assert runner_up(feas).plan.dp == 1
