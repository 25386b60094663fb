"""plan.py's remembered work (framework checks, block work, kinds of rank groups) gives the answers it computes afresh."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import random

import pytest
from conftest import SCRIPTS
from ditpar.plan.cost import memo, plans, work
from ditpar.plan.inputs import presets


def _plan_module():
    spec = importlib.util.spec_from_file_location("plan_script_speed", SCRIPTS / "plan.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _answer(mod, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert mod.run_plan(mod.plan_parser().parse_args(argv)) == 0
    return out.getvalue()


QUESTIONS = [
    ["--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "6", "--objective", "throughput"],
    ["--model", "Wan2.2-T2V-A14B", "--hardware", "GB200-NVL72", "--devices", "16"],
    ["--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 800I A2, 2 nodes", "--devices", "16",
     "--framework", "xDiT", "--framework", "MindIE-SD"],
]


@pytest.mark.parametrize("argv", QUESTIONS, ids=["flux-h100-6", "wan22-gb200-16", "wan21-910b-2nodes-16"])
def test_remembered_answer_is_the_recomputed_one(argv):
    """--json and the text answer, asked twice with every memo on (the second time mostly from memory), equal the
    answer with every memo off; and the JSON is a real ranking (feasible plans, a leader)."""
    mod = _plan_module()
    with memo.off():
        work._GROUP_MEMO.clear()
        fresh = [_answer(mod, argv + ["--json"]), _answer(mod, argv)]
    first = [_answer(mod, argv + ["--json"]), _answer(mod, argv)]
    again = [_answer(mod, argv + ["--json"]), _answer(mod, argv)]
    assert first == fresh and again == fresh
    assert '"feasible": true' in fresh[0] and " 1 " in fresh[1]


def _machines():
    yield presets.resolve_hardware("Atlas 800 9000", None, 8)        # two 4-card islands
    yield presets.resolve_hardware("GB200", None, 72)                # one 72-GPU domain
    yield presets.resolve_hardware("H100", "NVLink, 2 nodes", 16)    # two nodes
    yield presets.resolve_hardware("L40S", None, 8)                  # shared PCIe across two sockets
    yield presets.resolve_hardware("Atlas 900 A3 SuperPoD", None, 64)


def test_group_kinds_choose_the_group_every_group_would():
    """The worst all-to-all group and the slowest ring, priced once per kind of group, are the very groups
    max()/min() over every group pick (the first on a tie), on random plans and layouts of five machines."""
    rng = random.Random(7)
    checked = 0
    for hw in _machines():
        n = hw.devices_per_node * hw.nodes
        for plan in rng.sample(plans.enumerate_plans(n, True), 12):
            order = tuple(rng.sample(plans.DIMS, len(plans.DIMS)))
            for groups in plans.layout(plan, order).values():
                flows = work.concurrent_ring_flows(hw, groups) or work.ring_flows(hw, groups[0])

                def bw(gr, flows=flows, hw=hw):
                    key = work.ring_link(hw, gr, flows)
                    return work.effective_bw(hw, key, len(gr), flows.get(key, 1))
                assert work._slowest_ring(hw, groups) == (work.ring_link(hw, min(groups, key=bw), flows), flows)
                t = rng.choice((1.0, 3.5e6, 12345.678))
                every = work.worst_group(hw, groups, lambda gr, t=t, hw=hw: work.alltoall_time_s(
                    hw, work.alltoall_split(hw, gr, t), len(gr), work.alltoall_flows(hw, gr)))
                assert work.worst_alltoall_group(hw, groups, t) is every
                checked += 1
    assert checked >= 5 * 12


def test_layout_groups_follow_the_stride_rule():
    """Rank groups built per stride block are the groups of 'every rank whose digit along the dimension is 0', in
    rank order (the rule the layout states), for random degrees and orders."""
    rng = random.Random(11)
    for _ in range(300):
        degrees = tuple(rng.choice((1, 1, 2, 3, 4)) for _ in plans.DIMS)
        order = tuple(rng.sample(plans.DIMS, len(plans.DIMS)))
        deg = dict(zip(plans.DIMS, degrees, strict=True))
        devices, stride, want = 1, 1, {}
        for d in degrees:
            devices *= d
        for dim in order:
            want[dim] = [list(range(b, b + deg[dim] * stride, stride)) for b in range(devices)
                         if (b // stride) % deg[dim] == 0]
            stride *= deg[dim]
        got = plans.layout(plans.Plan(**{d: deg[d] for d in plans.DIMS}), order)
        assert got == want and list(got) == list(want)


def test_ring_hops_from_the_rank_table_are_class_for():
    """Ring hops and peers counted from the per-layout (node, domain) table equal HardwarePreset.class_for of each
    pair, on two nodes of 8 and on two 4-card islands."""
    from collections import Counter

    rng = random.Random(5)
    for hw in list(_machines())[:3]:
        n = hw.devices_per_node * hw.nodes
        for _ in range(60):
            g = rng.sample(range(n), rng.randint(1, min(n, 12)))
            hops = dict(Counter(hw.class_for([g[i], g[(i + 1) % len(g)]]) for i in range(len(g))))
            assert work._ring_flows(hw, g) == hops
            peers = [dict(Counter(hw.class_for([r, q]) for q in g if q != r)) for r in g]
            assert [sorted(c.items()) for c in work._peer_classes(hw, g)] == [sorted(c.items()) for c in peers]
