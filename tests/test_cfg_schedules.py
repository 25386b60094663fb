"""CFG schedules: a guidance-distilled preset (cfg_default = false, sourced) is priced with one branch and no
plan with CFG parallel is ranked for it; a model with guidance gets CFG-parallel plans."""

from __future__ import annotations

from ditpar.plan.cost import Tunables, make_shape
from ditpar.plan.decide.rank import rank_plans
from ditpar.plan.inputs import presets

DISTILLED = ("FLUX.1-dev", "FLUX.1-schnell", "HunyuanVideo", "Z-Image-Turbo")


def _cfg_degrees(name: str) -> set[int]:
    m, hw = presets.resolve_model(name), presets.resolve_hardware("H100")
    shape = make_shape(m, 512, 512, 1, 4, cfg=None)
    return {r.plan.cfg for r in rank_plans(m, hw, shape, 8, Tunables())}


def test_distilled_presets_say_so_with_a_source_and_get_no_cfg_parallel():
    for name in DISTILLED:
        m = presets.resolve_model(name)
        assert m.cfg_default is False and m.sources.get("cfg_default"), name
        assert _cfg_degrees(name) == {1}, name


def test_a_model_with_guidance_gets_cfg_parallel_plans():
    m = presets.resolve_model("SD3-medium")
    assert m.cfg_default is True
    assert _cfg_degrees("SD3-medium") == {1, 2}
