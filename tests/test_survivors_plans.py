"""plan/cost/plans.py at its edges (issue 29): plan labels and dictionaries, the SP degree, the one-device
enumeration, data parallelism switched off, PipeFusion's patch and warm-up options reaching only PipeFusion
plans, and --layout parsing. Expected values come from the definitions (degrees multiply to the device count)
and a brute-force enumeration written here."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
from ditpar.errors import InputError
from ditpar.plan.cost.plans import DIMS, Plan, enumerate_plans, layout, parse_order


def test_names_by_hand():
    assert Plan().name == "single"
    assert Plan(dp=1, patches=4).name == "single"                      # patches mean nothing without PipeFusion
    assert Plan(cfg=2, ulysses=2, ring=2).name == "cfg2 U2 R2"
    assert Plan(dp=2, tp=2, kv_allgather=2, ulysses=4, cfg=2).name == "cfg2 U4 AG2 TP2 DP2"   # fixed order
    assert Plan(pipefusion=2).name == "PF2"                             # default M = stages
    assert Plan(pipefusion=2, patches=2).name == "PF2"                  # M given equal to the stages
    assert Plan(pipefusion=2, patches=4).name == "PF2 M4"
    assert Plan(pipefusion=4, patches=2, ulysses=2).name == "U2 PF4 M2"


def test_as_dict_patches():
    assert Plan().as_dict() == {"ulysses": 1, "ring": 1, "kv_allgather": 1, "attn2d": 1, "pipefusion": 1,
                                "patches": 1, "cfg": 1, "tp": 1, "dp": 1}
    assert Plan(patches=4).as_dict()["patches"] == 1                   # no PipeFusion: one patch
    assert Plan(pipefusion=2).as_dict()["patches"] == 2
    assert Plan(pipefusion=2, patches=6, cfg=2).as_dict() == {"ulysses": 1, "ring": 1, "kv_allgather": 1,
                                                               "attn2d": 1, "pipefusion": 2, "patches": 6, "cfg": 2,
                                                               "tp": 1, "dp": 1}


def test_sequence_parallel_degree_and_devices():
    assert Plan(ulysses=2, ring=4).sp == 8
    assert Plan(ulysses=4, kv_allgather=2).sp == 8
    assert Plan(ulysses=2, ring=2, tp=2, cfg=2, dp=3).sp == 4
    assert Plan(ulysses=2, ring=2, tp=2, cfg=2, dp=3).devices == 2 * 2 * 2 * 2 * 3


def test_defaults_one_warmup_step_and_default_patches():
    # xDiT's PipeFusion: one synchronous warm-up step unless told otherwise; M = the stage count
    p = Plan(pipefusion=4)
    assert (p.warmup, p.patches, p.num_patches) == (1, 0, 4)


def test_plan_is_frozen_and_hashable():
    p = Plan(ulysses=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.ulysses = 4
    assert len({Plan(ulysses=2), Plan(ulysses=2), Plan(ring=2)}) == 2


def test_one_device_is_the_single_plan():
    assert enumerate_plans(1, False) == [Plan()]
    assert enumerate_plans(1, True) == [Plan()]                         # cfg 2 cannot fit on one device
    with pytest.raises(InputError, match="--devices 0: expected a positive device count"):
        enumerate_plans(0, False)
    with pytest.raises(InputError, match="--devices -2"):
        enumerate_plans(-2, True)


def _brute(devices, cfg_ok, with_dp):
    out = set()
    rng = range(1, devices + 1)
    for cfg, u, r, g, a, tp, pf, dp in itertools.product((1, 2) if cfg_ok else (1,), rng, rng, rng, rng, rng, rng,
                                                         rng):
        # ring, AllGather-KV and Attention2D share one slot; TP never with PipeFusion
        if cfg * u * r * g * a * tp * pf * dp != devices or sum(x > 1 for x in (r, g, a)) > 1 or (tp > 1 and pf > 1):
            continue
        if dp > 1 and not with_dp:
            continue
        out.add((cfg, u, r, g, a, tp, pf, dp))
    return out


@pytest.mark.parametrize("devices", [2, 4, 6])
def test_without_data_parallelism(devices):
    plans = enumerate_plans(devices, True, with_dp=False)
    got = {(p.cfg, p.ulysses, p.ring, p.kv_allgather, p.attn2d, p.tp, p.pipefusion, p.dp) for p in plans}
    assert got == _brute(devices, True, with_dp=False)
    assert all(p.dp == 1 and p.devices == devices for p in plans)
    assert Plan(ulysses=devices) in plans and Plan(dp=devices) not in plans


def test_dp_is_a_whole_number():
    for p in enumerate_plans(8, True):
        assert type(p.dp) is int
    assert json.loads(json.dumps(Plan(dp=4).as_dict()))["dp"] == 4
    assert json.dumps(next(p for p in enumerate_plans(4, False) if p.dp == 4).as_dict()).endswith('"dp": 4}')


def test_patches_and_warmup_reach_pipefusion_plans_only():
    plans = enumerate_plans(4, False, patches=8, warmup=3)
    pf = [p for p in plans if p.pipefusion > 1]
    other = [p for p in plans if p.pipefusion == 1]
    assert pf and other
    assert all(p.patches == 8 and p.num_patches == 8 and p.warmup == 3 for p in pf)
    assert all(p.patches == 0 and p.warmup == 3 for p in other)
    assert Plan(ulysses=4, warmup=3) in plans                           # patches stay 0: the plain U4 plan


def test_enumeration_defaults():
    plans = enumerate_plans(4, False)
    assert Plan(ulysses=4) in plans and Plan(pipefusion=4) in plans
    assert all(p.patches == 0 and p.warmup == 1 for p in plans)


def test_parse_order():
    assert parse_order(None) == DIMS
    assert parse_order("") == DIMS
    flipped = "dp,cfg,pipefusion,attn2d,kv_allgather,ring,ulysses,tp"
    assert parse_order(flipped) == tuple(flipped.split(","))
    # an order written before Attention2D was a form: attn2d goes right after kv_allgather
    assert parse_order(" ring , tp,ulysses,kv_allgather, pipefusion,cfg,dp,") == (
        "ring", "tp", "ulysses", "kv_allgather", "attn2d", "pipefusion", "cfg", "dp")
    with pytest.raises(InputError, match=r"--layout 'tp,ulysses': expected each of tp, ulysses, ring, "
                                         r"kv_allgather, attn2d, pipefusion, cfg, dp once \(innermost first\)"):
        parse_order("tp,ulysses")
    with pytest.raises(InputError, match="expected each of"):
        parse_order("tp,tp,ulysses,ring,kv_allgather,pipefusion,cfg")    # 7 names, one twice, dp missing


def test_layout_with_a_parsed_order():
    order = parse_order("cfg,ulysses,tp,ring,kv_allgather,pipefusion,dp")
    groups = layout(Plan(ulysses=2, cfg=2), order)
    assert groups["cfg"] == [[0, 1], [2, 3]]                            # cfg innermost: neighbours
    assert groups["ulysses"] == [[0, 2], [1, 3]]
    assert groups["tp"] == [[0], [1], [2], [3]]
