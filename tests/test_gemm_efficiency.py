"""GEMM-shape compute efficiency (ditpar.plan.cost.efficiency) against values computed by hand from
templates/gemm_efficiency.toml (figures of openxla/xla's sm_90 matmul table, TFLOP/s)."""

from __future__ import annotations

import pytest
from ditpar.errors import InputError
from ditpar.plan.cost import Plan, make_shape, predict
from ditpar.plan.cost import efficiency as eff
from ditpar.plan.cost.work import block_gemms
from ditpar.plan.inputs import presets

BEST = 780.2   # m = n = k = 4096, the largest figure of the sm_90 grid


@pytest.fixture(scope="module")
def hopper():
    curve = eff.curve_for(presets.resolve_hardware("H100"))
    assert curve is not None and curve.family == "hopper-sm90"
    return curve


def test_grid_points_are_the_table_figures(hopper):
    assert hopper.best_tflops == BEST
    assert hopper.achieved_tflops(1024, 1024, 1024) == pytest.approx(252.8)
    assert hopper.relative(1024, 1024, 1024) == pytest.approx(252.8 / BEST)
    assert hopper.fraction_of_peak(4096, 4096, 4096) == pytest.approx(780.2 / 989.0)


def test_interpolation_is_linear_in_log2(hopper):
    # halfway (in log2) between m = 1024 and m = 2048 at n = k = 1024: mean of 252.8 and 386.8
    assert hopper.achieved_tflops(2 ** 10.5, 1024, 1024) == pytest.approx((252.8 + 386.8) / 2)
    # centre of the 1024..2048 cube: mean of its eight corners
    corners = (252.8, 359.8, 384.0, 529.5, 386.8, 535.3, 498.0, 641.0)
    assert hopper.achieved_tflops(2 ** 10.5, 2 ** 10.5, 2 ** 10.5) == pytest.approx(sum(corners) / 8)


def test_held_at_the_grid_edges(hopper):
    assert hopper.relative(8192, 16384, 5000) == pytest.approx(1.0)
    assert hopper.achieved_tflops(100, 64, 32) == pytest.approx(6.7)


def test_attention_relative_to_a_large_attention(hopper):
    # head_dim 128 sits below the grid: held at k = 256. Q K^T (1024 x 1024, inner 256) = 80.9,
    # P V (1024 x 256, inner 1024) = 69.8; large: 398.6 and 398.9 TFLOP/s; equal FLOPs -> harmonic means
    small = 2 / (1 / 80.9 + 1 / 69.8)
    large = 2 / (1 / 398.6 + 1 / 398.9)
    assert eff.attention_efficiency(hopper, 1024, 1024, 128) == pytest.approx(small / large)
    assert eff.attention_efficiency(hopper, 24 * 4608, 4608, 128) == pytest.approx(1.0)
    assert eff.attention_efficiency(None, 1024, 1024, 128) == 1.0


def test_linear_efficiency_is_flop_weighted_harmonic(hopper):
    gemms = (eff.Gemm(1024, 1024, 1024), eff.Gemm(4096, 4096, 4096))
    f1, f2 = 2 * 1024 ** 3, 2 * 4096 ** 3
    want = (f1 + f2) / (f1 / (252.8 / BEST) + f2 / 1.0)
    assert eff.linear_efficiency(hopper, gemms) == pytest.approx(want)
    # a PipeFusion patch of a quarter of the rows: m = 1024 instead of 4096 for the second GEMM
    g = (eff.Gemm(4096, 1024, 1024),)
    assert eff.linear_efficiency(hopper, g, 0.25) == pytest.approx(252.8 / BEST)


def test_tp_shards_n_of_column_and_k_of_row_parallel_gemms():
    flux = presets.resolve_model("FLUX.1-dev")      # hidden 3072, 24 heads x 128, ffn 12288
    joint = block_gemms(flux, "joint", 4608, 8)
    assert [(g.n, g.k) for g in joint] == [(1152, 3072), (3072, 384), (1536, 3072), (3072, 1536)]
    single = block_gemms(flux, "single", 4608, 8)
    assert [(g.n, g.k) for g in single] == [((3 * 3072 + 12288) / 8, 3072), (3072, (3072 + 12288) / 8)]
    # the GEMMs carry exactly the FLOPs of linear_flops_per_token
    from ditpar.plan.cost.work import linear_flops_per_token
    for base in ("joint", "single", "cross", "self"):
        assert sum(g.flops for g in block_gemms(flux, base, 1.0, 1)) == pytest.approx(
            linear_flops_per_token(flux, base))


def test_family_without_a_curve_is_said_and_priced_at_mfu():
    import dataclasses
    a100 = presets.resolve_hardware("A100", "NVLink")
    other = dataclasses.replace(a100, accelerator="MI300X")     # listed nowhere in the table
    assert eff.curve_for(other) is None
    d = eff.describe(other)
    assert d["family"] is None and "no sourced GEMM curve" in d["source"]
    sd3 = presets.resolve_model("SD3-medium")
    shape = make_shape(sd3, 1024, 1024, 1, 28, cfg=None)
    bd = predict(sd3, other, shape, Plan(tp=8))
    assert bd.compute_efficiency == 1.0


def test_derived_curve_is_the_equal_time_scaling_of_hopper():
    """A100 (312 TFLOPS) has no public curve: its relative efficiency at (m, n, k) is Hopper's at s x (m, n, k),
    s = (989 / 312)^(1/3), and describe() says it is derived."""
    a100 = presets.resolve_hardware("A100", "NVLink")
    curve = eff.curve_for(a100)
    hopper = eff.curve_for(presets.resolve_hardware("H100"))
    s = (989.0 / 312.0) ** (1.0 / 3.0)
    assert curve.scale == pytest.approx(s)
    assert curve.relative(512, 640, 3072) == pytest.approx(hopper.relative(512 * s, 640 * s, 3072 * s))
    d = eff.describe(a100)
    assert d["derived"] is True and d["verified"] is False and "equal-time" in d["family"]


def test_small_per_card_gemms_cost_more_on_hopper():
    """FLUX.1-dev at 1024px on H100: Ulysses-8 leaves 576 rows per card, TP8 an N of 1152 and a K of 384;
    the measured curve prices both below a large GEMM (and M = 576 lower than TP8's shapes)."""
    flux = presets.resolve_model("FLUX.1-dev")
    h100 = presets.resolve_hardware("H100")
    shape = make_shape(flux, 1024, 1024, 1, 28, cfg=None)
    single = predict(flux, h100, shape, Plan())
    u8, tp8 = predict(flux, h100, shape, Plan(ulysses=8)), predict(flux, h100, shape, Plan(tp=8))
    assert single.compute_efficiency > 0.95
    assert u8.compute_efficiency < tp8.compute_efficiency < single.compute_efficiency
    # compute time = FLOPs / (rate x efficiency): recompute U8's from its FLOPs by hand
    rate = h100.peak_tflops_bf16 * 1e12 * h100.mfu
    flops = u8.flops_per_step * shape.steps
    relayout = u8.compute_s - flops / (rate * u8.compute_efficiency)
    assert 0 <= relayout < 0.05 * u8.compute_s   # the rest is the USP layout copies (HBM-bound)


def test_bad_table_is_one_clear_error(tmp_path):
    bad = tmp_path / "gemm_efficiency.toml"
    bad.write_text('[families.x]\naccelerators = ["H100"]\npeak_tflops_bf16 = 989.0\nsource = "s"\n'
                   'dims = [256, 512]\ngrid = [{ m = 256, n = 256, tflops = [1.0, 2.0] }]\n')
    with pytest.raises(InputError, match=r"families\.x: missing key or grid row \(256, 512\)"):
        eff.load_curves(str(bad))


def test_a_one_size_table_is_refused(tmp_path):
    """One dimension is no curve to interpolate on: refused, naming the family."""
    one = tmp_path / "gemm_efficiency.toml"
    one.write_text('[families.x]\naccelerators = ["H100"]\npeak_tflops_bf16 = 989.0\nsource = "s"\n'
                   'dims = [256]\ngrid = [{ m = 256, n = 256, tflops = [1.0] }]\n')
    with pytest.raises(InputError, match=r"families\.x: dims must be >= 2 increasing sizes"):
        eff.load_curves(str(one))
    two = tmp_path / "two.toml"
    two.write_text('[families.x]\naccelerators = ["H100"]\npeak_tflops_bf16 = 989.0\nsource = "s"\n'
                   'dims = [256, 512]\ngrid = [{ m = 256, n = 256, tflops = [1.0, 2.0] },'
                   ' { m = 256, n = 512, tflops = [1.0, 2.0] }, { m = 512, n = 256, tflops = [1.0, 2.0] },'
                   ' { m = 512, n = 512, tflops = [1.0, 2.0] }]\n')
    assert [c.dims for c in eff.load_curves(str(two))] == [(256, 512)]


def test_describe_rounds_the_best_fraction_to_three_digits():
    """XLA's sm_90 table peaks at 780.2 TFLOP/s against the 989 TFLOPS dense peak: 780.2 / 989 = 0.78887 -> 0.789;
    the L20's equal-time derivation keeps the base family's fraction."""
    h100, l20 = presets.load_hardware("H100", None, 8), presets.load_hardware("L20", None, 8)
    assert eff.curve_for(h100).best_tflops == 780.2
    assert eff.describe(h100)["best_fraction_of_peak"] == 0.789
    assert eff.describe(l20)["best_fraction_of_peak"] == 0.789 and eff.describe(l20)["derived"] is True


def test_no_derived_curve_without_a_peak():
    """The equal-time rule scales by (989 / peak)^(1/3): a device with no peak figure gets no curve, not a crash."""
    from types import SimpleNamespace
    assert eff.curve_for(SimpleNamespace(accelerator="L20", peak_tflops_bf16=0.0)) is None
    assert eff.curve_for(SimpleNamespace(accelerator="L20")) is None
    assert eff.curve_for(SimpleNamespace(accelerator="L20", peak_tflops_bf16=119.5)) is not None


def test_interpolation_between_grid_points_that_are_not_a_doubling_apart(tmp_path):
    """dims 256 and 1024 are two octaves apart: 512 sits halfway in log2, so its throughput is the mean of the
    two grid values along that axis (10 and 30 -> 20)."""
    t = tmp_path / "gemm_efficiency.toml"
    rows = []
    for mm in (256, 1024):
        for n in (256, 1024):
            rows.append(f"{{ m = {mm}, n = {n}, tflops = [{10.0 if mm == 256 else 30.0}, "
                        f"{10.0 if mm == 256 else 30.0}] }}")
    t.write_text('[families.x]\naccelerators = ["H100"]\npeak_tflops_bf16 = 989.0\nsource = "s"\n'
                 f'dims = [256, 1024]\ngrid = [{", ".join(rows)}]\n')
    (curve,) = eff.load_curves(str(t))
    assert curve.achieved_tflops(512, 256, 256) == pytest.approx(20.0)
    assert curve.achieved_tflops(256, 512, 1024) == pytest.approx(10.0)


def test_a_zero_throughput_figure_is_refused_and_a_missing_table_is_no_curve(tmp_path):
    zero = tmp_path / "zero.toml"
    zero.write_text('[families.x]\naccelerators = ["H100"]\npeak_tflops_bf16 = 989.0\nsource = "s"\n'
                    'dims = [256, 512]\ngrid = [{ m = 256, n = 256, tflops = [1.0, 0.0] },'
                    ' { m = 256, n = 512, tflops = [1.0, 2.0] }, { m = 512, n = 256, tflops = [1.0, 2.0] },'
                    ' { m = 512, n = 512, tflops = [1.0, 2.0] }]\n')
    with pytest.raises(InputError, match=r"families\.x: throughput figures and peak_tflops_bf16 must be positive"):
        eff.load_curves(str(zero))
    assert eff.load_curves(str(tmp_path / "absent.toml")) == ()


def test_a_gemm_shape_is_a_hashable_value():
    from dataclasses import FrozenInstanceError

    from ditpar.plan.cost.efficiency import Gemm
    g = Gemm(4096.0, 3072.0, 3072.0)
    assert hash(g) == hash(Gemm(4096.0, 3072.0, 3072.0)) and {g, Gemm(4096.0, 3072.0, 3072.0)} == {g}
    with pytest.raises(FrozenInstanceError):
        g.m = 1.0


def test_attention_with_no_rows_or_keys_is_not_priced():
    curve = eff.curve_for(presets.load_hardware("H100", None, 8))
    assert eff.attention_efficiency(curve, 0, 4096, 128) == 1.0
    assert eff.attention_efficiency(curve, 4096, 0, 128) == 1.0
    assert eff.attention_efficiency(None, 64, 64, 128) == 1.0
    assert eff.attention_efficiency(curve, 64, 64, 128) < 1.0


def test_a_curve_is_immutable():
    from dataclasses import FrozenInstanceError
    curve = eff.curve_for(presets.load_hardware("H100", None, 8))
    with pytest.raises(FrozenInstanceError):
        curve.peak_tflops = 1.0


def test_curves_compare_by_their_figures_not_their_memo(tmp_path):
    t = tmp_path / "gemm_efficiency.toml"
    t.write_text('[families.x]\naccelerators = ["H100"]\npeak_tflops_bf16 = 0.5\nsource = "s"\n'
                 'dims = [256, 512]\ngrid = [{ m = 256, n = 256, tflops = [0.1, 0.2] },'
                 ' { m = 256, n = 512, tflops = [0.1, 0.2] }, { m = 512, n = 256, tflops = [0.1, 0.2] },'
                 ' { m = 512, n = 512, tflops = [0.1, 0.2] }]\n')
    (a,), (b,) = eff.load_curves(str(t)), eff.load_curves(str(t))   # a peak under 1 TFLOPS is a peak
    assert a.peak_tflops == 0.5
    a.achieved_tflops(300, 300, 300)
    assert a == b


def test_zero_flop_gemms_are_not_priced():
    from ditpar.plan.cost.efficiency import Gemm
    curve = eff.curve_for(presets.load_hardware("H100", None, 8))
    assert eff.linear_efficiency(curve, (Gemm(0.0, 3072.0, 3072.0),)) == 1.0


def _tiny_curve(tflops, peak: float = 10.0) -> eff.GemmCurve:
    """A two-size (1, 2) grid built directly (not through the cached loader); tflops[m][n][k] by index."""
    return eff.GemmCurve("tiny", ("TINY",), peak, (1, 2), tflops, "by hand", False)


#: t[m][n][k] = 1 + m + n + k over the indices: 1 at the small corner, 4 at the large one
RAMP = tuple(tuple(tuple(1.0 + m + n + k for k in (0, 1)) for n in (0, 1)) for m in (0, 1))


def test_one_row_or_one_key_is_priced_not_waved_through():
    """Attention of 1 row or 1 key is real work below the large attention: on the ramp grid the large
    attention (held at the 2-corner) runs t[1][1][0] = t[1][0][1] = 3; Q K^T and P V of 1 row x 2 keys
    (head 1) run t[0][1][0] = t[0][0][1] = 2 -> 2/3; 2 rows x 1 key t[1][0][0] = 2 -> 2/3; 1 x 1 -> 1/3."""
    curve = _tiny_curve(RAMP)
    assert eff.attention_efficiency(curve, 1, 2, 1) == pytest.approx(2 / 3)
    assert eff.attention_efficiency(curve, 2, 1, 1) == pytest.approx(2 / 3)
    assert eff.attention_efficiency(curve, 1, 1, 1) == pytest.approx(1 / 3)


def test_attention_faster_than_the_large_one_is_held_at_one():
    """A grid whose small corner (10) beats the large shapes (5): the ratio 10/5 = 2 is capped at 1."""
    t = tuple(tuple(tuple(10.0 if (m, n, k) == (0, 0, 0) else 5.0 for k in (0, 1)) for n in (0, 1))
              for m in (0, 1))
    assert eff.attention_efficiency(_tiny_curve(t), 1, 1, 1) == 1.0


def test_one_tiny_gemm_runs_at_its_relative_throughput():
    """A single GEMM's FLOP-weighted efficiency is its own relative throughput: (1, 1, 1) on the ramp
    grid runs 1 TFLOP/s of a best 4 -> 0.25 (its 2 FLOPs must not be diluted by a non-zero start)."""
    assert eff.linear_efficiency(_tiny_curve(RAMP), (eff.Gemm(1.0, 1.0, 1.0),)) == pytest.approx(0.25)


def test_a_queried_curve_equals_hashes_and_prints_as_a_fresh_one():
    a, b = _tiny_curve(RAMP), _tiny_curve(RAMP)
    assert a.achieved_tflops(2 ** 0.5, 1.0, 1.0) == pytest.approx(1.5)   # halfway in log2: t000 = 1, t100 = 2
    assert a == b and hash(a) == hash(b) and {a, b} == {a}
    assert repr(a) == repr(b)


def test_a_derived_curve_is_immutable_and_its_fraction_of_peak_is_the_base_one():
    """fraction_of_peak of the equal-time curve = achieved / own peak = the base's fraction at s x (m, n, k)."""
    from dataclasses import FrozenInstanceError
    a100 = eff.curve_for(presets.resolve_hardware("A100", "NVLink"))
    hopper = eff.curve_for(presets.resolve_hardware("H100"))
    s = (989.0 / 312.0) ** (1.0 / 3.0)
    assert a100.fraction_of_peak(512, 640, 3072) == pytest.approx(hopper.fraction_of_peak(512 * s, 640 * s, 3072 * s))
    assert 0 < a100.fraction_of_peak(512, 640, 3072) < 1
    with pytest.raises(FrozenInstanceError):
        a100.scale = 1.0
    assert hash(a100) == hash(eff.curve_for(presets.resolve_hardware("A100", "NVLink")))


def test_a_derived_device_under_one_tflops_still_gets_its_curve():
    from types import SimpleNamespace
    curve = eff.curve_for(SimpleNamespace(accelerator="L20", peak_tflops_bf16=0.5))
    assert isinstance(curve, eff.ScaledCurve) and curve.scale == pytest.approx((989.0 / 0.5) ** (1.0 / 3.0))


def test_a_device_without_a_curve_is_described_unverified():
    from types import SimpleNamespace
    d = eff.describe(SimpleNamespace(accelerator="MI300X", peak_tflops_bf16=1307.0))
    assert d["family"] is None and d["verified"] is False


_GRID = ('dims = [256, 512]\ngrid = [{ m = 256, n = 256, tflops = [1.0, 2.0] },'
         ' { m = 256, n = 512, tflops = [1.0, 2.0] }, { m = 512, n = 256, tflops = [1.0, 2.0] },'
         ' { m = 512, n = 512, tflops = [1.0, 2.0] }]\n')


def test_a_zero_peak_is_refused_and_verified_defaults_to_false(tmp_path):
    zero = tmp_path / "zero_peak.toml"
    zero.write_text('[families.x]\naccelerators = ["H100"]\npeak_tflops_bf16 = 0.0\nsource = "s"\n' + _GRID)
    with pytest.raises(InputError, match=r"families\.x: throughput figures and peak_tflops_bf16 must be positive"):
        eff.load_curves(str(zero))
    plain = tmp_path / "plain.toml"
    plain.write_text('[families.x]\naccelerators = ["H100"]\npeak_tflops_bf16 = 9.0\nsource = "s"\n' + _GRID)
    assert [c.verified for c in eff.load_curves(str(plain))] == [False]
    checked = tmp_path / "checked.toml"
    checked.write_text('[families.x]\naccelerators = ["H100"]\npeak_tflops_bf16 = 9.0\nsource = "s"\n'
                       'verified = true\n' + _GRID)
    assert [c.verified for c in eff.load_curves(str(checked))] == [True]


def test_malformed_figures_and_derived_entries_are_one_clear_error(tmp_path):
    bad = tmp_path / "bad_dims.toml"
    bad.write_text('[families.x]\naccelerators = ["H100"]\npeak_tflops_bf16 = 9.0\nsource = "s"\n'
                   'dims = ["big", 512]\ngrid = []\n')
    with pytest.raises(InputError, match=r"families\.x: invalid literal"):
        eff.load_curves(str(bad))
    derived = tmp_path / "derived.toml"
    derived.write_text('[derived.y]\nfrom = "hopper-sm90"\naccelerators = ["L20"]\n')
    with pytest.raises(InputError, match=r"derived\.y: missing or malformed key 'rule'"):
        eff.load_derived(str(derived))
    assert eff.load_derived(str(tmp_path / "absent.toml")) == {}
