"""Issue 23 acceptance checks, each on the shipped presets and cost model (frameworks as plan.py uses them)."""

from __future__ import annotations

import math

import pytest
from ditpar.plan.cost import Plan, Tunables, make_shape, predict
from ditpar.plan.cost.timing import host_device_s, slowest_stage_s, stage_split
from ditpar.plan.decide import shortlist, uncertainty
from ditpar.plan.decide.rank import rank_plans
from ditpar.plan.inputs import frameworks, presets


def ranked(model: str, hw: str, n: int) -> dict:
    m, h = presets.load_model(model), presets.load_hardware(hw, None, n)
    rs = rank_plans(m, h, make_shape(m), n, Tunables(), frameworks=frameworks.resolve_frameworks(None),
                    allow_approximate=True)
    shortlist.annotate(rs, frozenset())
    return {r.plan.name: r for r in rs if r.feasible}


def test_cogvideox5b_6xl40_cfg_has_ulysses3_cfg2_on_the_short_list():
    r = ranked("CogVideoX-5b", "L40", 6)
    assert r["cfg2 U3"].short_list


def test_a_3_card_group_does_not_take_the_4_card_all_to_all_figure():
    link = presets.load_hardware("L40", None, 8).links["intra_domain"]
    assert link.alltoall_GBps == ((4, 6.0),)
    assert link.alltoall_bus_GBps(4) == 6.0 and link.alltoall_bus_GBps(3) == 0.0 and link.alltoall_bus_GBps(8) == 6.0


def test_pcie_4_card_all_to_all_is_the_middle_of_the_two_nccl_transports():
    """Same-socket 4-card all-to-all on L20/L40: NCCL >= 2.23.4 (and any NCCL on Intel hosts) sends it through host
    memory (SHM, 18 GB/s busbw on 4 x RTX 4090, NVIDIA/nccl#1603); P2P through the CPU (older NCCL on AMD hosts, or
    NCCL_P2P_LEVEL=SYS) gives 2 GB/s on the same box. The preset does not know the stack: the geometric middle, and
    its band (other-class, x3 either way) reaches both measured ends."""
    for name in ("L20", "L40"):
        link = presets.load_hardware(name, None, 8).links["intra_domain"]
        assert link.alltoall_bus_GBps(4) == pytest.approx(math.sqrt(2.0 * 18.0))
        assert link.evidence == "other-class"
        f = uncertainty.EVIDENCE_FACTOR[link.evidence]
        assert (link.alltoall_bus_GBps(4) / f, link.alltoall_bus_GBps(4) * f) == pytest.approx((2.0, 18.0))


def test_flux_8xa100_pipefusion8_not_faster_than_ulysses8():
    r = ranked("FLUX.1-dev", "A100", 8)
    assert r["PF8"].latency_s >= r["U8"].latency_s


def test_hunyuanvideo_8x_atlas_ring8_at_least_15pct_behind_ulysses8():
    r = ranked("HunyuanVideo", "Atlas 800I A2", 8)
    assert r["R8"].latency_s >= 1.15 * r["U8"].latency_s


def test_ring_hop_on_a_full_mesh_uses_one_direct_link():
    """A ring hop sends to one neighbour: on the 910B HCCS mesh that is one link (per_peer 56 x 0.8 = 44.8 GB/s);
    a collective over 8 ranks spreads over 7 links but stops at the NPU's ceiling (112 x 0.8 = 89.6 GB/s)."""
    from ditpar.plan.cost.work import effective_bw
    hw = presets.load_hardware("Atlas 800I A2", None, 8)
    assert effective_bw(hw, "intra_domain", 8, 8, "p2p") == pytest.approx(44.8)
    assert effective_bw(hw, "intra_domain", 8, 8, "allreduce") == pytest.approx(89.6)


def test_flux_tp8_on_8_and_tp4_on_4_h100_differ():
    m, h8, h4 = presets.load_model("FLUX.1-dev"), presets.load_hardware("H100", None, 8), \
        presets.load_hardware("H100", None, 4)
    s = make_shape(m)
    tp8, tp4 = predict(m, h8, s, Plan(tp=8)), predict(m, h4, s, Plan(tp=4))
    assert tp8.latency_s < tp4.latency_s * 0.99


def test_wan14b_8x_atlas_tp8_at_least_15pct_behind_cfg2_tp4():
    """In-sample for MindIE-SD's quick-start table (it chose between two readings of the HCCS figures): the 8-rank
    all-reduce of the batch-2 activations moves 1.75 x 2 = 3.5 units at the NPU ceiling, the 4-rank one of batch 1
    moves 1.5 units at the same ceiling."""
    r = ranked("Wan2.1-T2V-14B", "Atlas 800I A2", 8)
    assert r["TP8"].latency_s >= 1.15 * r["cfg2 TP4"].latency_s


def test_host_device_p_norm_by_hand():
    assert host_device_s(1.0, 0.0) == 1.0
    assert host_device_s(3.0, 4.0) == pytest.approx((81 + 256) ** 0.25)
    assert host_device_s(1.0, 1.0) == pytest.approx(2 ** 0.25)


def test_pipefusion_stage_split_and_slowest_stage():
    assert stage_split(57, 8) == [8, 7, 7, 7, 7, 7, 7, 7]
    flux = presets.load_model("FLUX.1-dev")      # 19 joint then 38 single
    # per-stage average times per kind (count = blocks / stages): joint 2.0 s per block, single 1.0 s
    per_kind = {"joint": 2.0 * 19 / 8, "single": 1.0 * 38 / 8}
    assert slowest_stage_s(flux, per_kind, [19 / 8, 38 / 8], 8) == pytest.approx(8 * 2.0)


def test_band_widens_more_for_other_class_figures():
    from ditpar.plan.decide import uncertainty
    kw = dict(latency_s=10.0, exposed_by_link_s={"intra_domain": 2.0}, measured_links=frozenset(), half_width=0.0)
    meas = uncertainty.band(**kw, evidence={"intra_domain": "measured"})
    der = uncertainty.band(**kw, evidence={"intra_domain": "derived"})
    other = uncertainty.band(**kw, evidence={"intra_domain": "other-class"})
    assert (meas.low_s, meas.high_s) == pytest.approx((10 - 2 * (1 - 1 / 1.5), 10 + 2 * 0.5))
    assert (der.low_s, der.high_s) == pytest.approx((9.0, 12.0))
    assert (other.low_s, other.high_s) == pytest.approx((10 - 2 * (2 / 3), 14.0))
    pf = uncertainty.band(10.0, {}, frozenset(), 0.0, pipeline_s=1.0)
    assert (pf.low_s, pf.high_s) == pytest.approx((9.5, 11.0))


def _bd(latency: float, intra: float, pipeline: float = 0.0, evidence: str = "derived"):
    from types import SimpleNamespace
    return SimpleNamespace(latency_s=latency, exposed_by_link_s={"intra_domain": intra}, pipeline_s=pipeline,
                           link_evidence={"intra_domain": evidence})


def test_joint_short_list_moves_one_link_figure_for_every_plan():
    """Same link, same exposed comm, 10 s apart: no shared link speed closes the gap, so B is not a tie, although
    the per-plan bands overlap (A's high 100 e^0.025 + 30 = 132.5 s against B's low 110 e^-0.025 - 15 = 92.3 s).
    Worst corner for A, f = 1/2: A 85 -> 87.15 s high, B 95 -> 92.65 s low; f = 2: A 133.29 high, B 136.54 low."""
    from ditpar.plan.decide import uncertainty
    a, b = _bd(100.0, 30.0), _bd(110.0, 30.0)
    assert uncertainty.band_of(b, frozenset()).low_s <= uncertainty.band_of(a, frozenset()).high_s
    assert uncertainty.joint_short_list([a, b], frozenset()) == [0]


def test_joint_short_list_keeps_a_plan_that_a_faster_link_puts_ahead():
    """A 100 s with 10 s exposed, B 104 s with 30 s: at half the link time (f = 1/2) A is 95 s and B 89 s."""
    from ditpar.plan.decide import uncertainty
    a, b = _bd(100.0, 10.0), _bd(104.0, 30.0)
    assert uncertainty.joint_short_list([a, b], frozenset()) == [0, 1]
    # once the link is measured nothing moves it, and the model error alone decides: 104 e^-0.025 = 101.43 is under
    # 100 e^0.025 = 102.53 (a tie); 106 e^-0.025 = 103.38 is over it (no tie)
    assert uncertainty.joint_short_list([a, b], frozenset({"intra_domain"})) == [0, 1]
    assert uncertainty.joint_short_list([a, _bd(106.0, 30.0)], frozenset({"intra_domain"})) == [0]


def test_joint_short_list_corners_follow_the_evidence_factor():
    """An other-class figure moves x3: B (120 s, 40 s exposed) at f = 1/3 is 93.33 s, under A's 96.67 s; with a
    measured figure (x1.5, f = 2/3) B is 106.67 s low 104.03, over A's (100 - 10/3) e^0.025 = 99.11 s."""
    from ditpar.plan.decide import uncertainty
    assert uncertainty.joint_short_list([_bd(100.0, 10.0, evidence="other-class"),
                                         _bd(120.0, 40.0, evidence="other-class")], frozenset()) == [0, 1]
    assert uncertainty.joint_short_list([_bd(100.0, 10.0, evidence="measured"),
                                         _bd(120.0, 40.0, evidence="measured")], frozenset()) == [0]


def test_all_to_all_table_figure_moves_apart_from_the_ring_figure():
    """By hand: a link's exposed time splits into its all-to-all table part and the rest; each is its own corner."""
    from types import SimpleNamespace

    bd = SimpleNamespace(latency_s=20.0, exposed_by_link_s={"intra_domain": 5.0, "inter_domain": 0.0},
                         exposed_alltoall_by_link_s={"intra_domain": 3.0, "inter_domain": 0.0},
                         link_evidence={"intra_domain": "other-class"}, pipeline_s=0.0)
    assert uncertainty.exposed_parts(bd) == {"intra_domain": 2.0, "intra_domain:alltoall": 3.0, "inter_domain": 0.0}
    corners = uncertainty.link_corners([bd], frozenset())
    assert len(corners) == 1 + 4 and {"intra_domain": 3.0, "intra_domain:alltoall": 1 / 3} in corners
    # the all-to-all 3x faster, the ring part unchanged: 20 - 3 x 2/3 = 18
    assert uncertainty.latency_at(bd, {"intra_domain:alltoall": 1 / 3}) == pytest.approx(18.0)
    # the band moves both parts by the class's evidence (x3): low 20 e^-h - 5 x 2/3, high 20 e^h + 5 x 2
    b = uncertainty.band_of(bd, frozenset(), 0.0)
    assert (b.low_s, b.high_s) == pytest.approx((20.0 - 5.0 * 2 / 3, 20.0 + 5.0 * 2))
    # a measured link moves neither part
    assert uncertainty.link_corners([bd], frozenset({"intra_domain"})) == [{}]


def test_flux_4xl20_ulysses4_reaches_the_short_list_at_the_fast_all_to_all_corner():
    """diffusers' FLUX.1-dev on 4 x L20 (PR 12996): Ulysses-4 measured fastest (0.281 s/step) against U2 x AG2 (0.324)
    and AG4 (0.351). U4's exposed time is almost all all-to-all at the 4-card table figure; at its fast corner
    (18 GB/s) U4 comes within the model band of the fastest plan, while the AG plans' link figure stays."""
    from conftest import ROOT
    from ditpar.plan.judge import evaluate

    frame = evaluate.load_tables(ROOT / "benchmarks" / "published")["diffusers_distributed_inference.csv"]
    rows = frame[frame["hardware"] == "L20"]
    bds = {}
    for _, r in rows.iterrows():
        model, hw, shape, plan, _ = evaluate.row_context(r)
        bds[plan.name] = predict(model, hw, shape, plan, frameworks.tp_host_tunables(Tunables(), None, plan))
    u4 = bds["U4"]
    parts = uncertainty.exposed_parts(u4)
    assert parts["intra_domain:alltoall"] > 0.9 * u4.exposed_comm_s
    assert all("intra_domain:alltoall" not in uncertainty.exposed_parts(b) for n, b in bds.items() if n != "U4")
    names = list(bds)
    members = [names[i] for i in uncertainty.joint_short_list([bds[n] for n in names], frozenset())]
    assert "U4" in members


def test_measured_all_to_all_alone_is_a_measured_part():
    from ditpar.plan.inputs.calibration import measured_links

    recs = [{"link": "intra_domain", "figure": "all-to-all busbw, group 4", "measured": True},
            {"link": "intra_domain", "figure": "ring busbw (all-reduce/all-gather/P2P pattern)", "measured": False},
            {"link": "inter_domain", "figure": "all-to-all busbw, group 8", "measured": True},
            {"link": "inter_domain", "figure": "link bandwidth", "measured": True}]
    assert measured_links(recs, None) == frozenset({"intra_domain:alltoall", "inter_domain"})


def test_conclusion_names_the_nccl_transport_when_a_pcie_all_to_all_decides():
    """FLUX.1-dev on 4 x L20: Ulysses-4 is on the short list on the strength of the preset's 4-card all-to-all, which
    depends on NCCL's transport; the conclusion says how to tell and how to say it, and stops once it is said."""
    from conftest import run_script

    said = "NCCL_DEBUG=INFO prints 'via SHM' or 'via P2P/IPC'"
    text = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "L20", "--devices", "4").stdout
    assert said in text and "--set links.intra_domain.alltoall_GBps.4=18 (or =2)" in text
    told = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "L20", "--devices", "4",
                      "--set", "links.intra_domain.alltoall_GBps.4=18").stdout
    assert said not in told
    assert said not in run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8").stdout
