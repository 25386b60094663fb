"""Serial stages (issue 23): VAE decode FLOPs counted from the decoder's structure, text-encode FLOPs, and the
decode time from a published measurement. Expected figures are worked out by hand below, not by the module."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from ditpar.plan.cost import serial
from ditpar.plan.inputs.presets import load_model


def sd_decoder_flops_by_hand(side: int, latent_channels: int) -> float:
    """The SD AutoencoderKL decoder (widths 512/512/256/128 from the latent up, 3 resnets per up block,
    single-head attention in the mid block), counted layer by layer for a side x side image."""
    def conv(k, cin, cout, px):      # 2 x kernel x C_in x C_out x output positions
        return 2 * k * cin * cout * px

    def resnet(cin, cout, px):       # two 3x3 convs, a 1x1 shortcut when the width changes
        return conv(9, cin, cout, px) + conv(9, cout, cout, px) + (conv(1, cin, cout, px) if cin != cout else 0)

    n8, n4, n2, n1 = (side // 8) ** 2, (side // 4) ** 2, (side // 2) ** 2, side ** 2
    total = conv(9, latent_channels, 512, n8)                                  # conv_in
    total += 2 * resnet(512, 512, n8)                                          # mid resnets
    total += 4 * 2 * n8 * 512 * 512 + 4 * n8 * n8 * 512                        # mid attention: q k v o + QK^T, PV
    total += 3 * resnet(512, 512, n8) + conv(9, 512, 512, n4)                  # up 0 at 1/8, up-sampler conv at 1/4
    total += 3 * resnet(512, 512, n4) + conv(9, 512, 512, n2)                  # up 1 at 1/4
    total += resnet(512, 256, n2) + 2 * resnet(256, 256, n2) + conv(9, 256, 256, n1)   # up 2 at 1/2
    total += resnet(256, 128, n1) + 2 * resnet(128, 128, n1)                   # up 3 at full size
    total += conv(9, 128, 3, n1)                                               # conv_out
    return total


def test_sd_decoder_at_512_matches_the_hand_count():
    # 512x512: conv_in 0.151 G, mid 77.3 + 43.0 G, up0 116.0 + 77.3, up1 463.8 + 309.2,
    # up2 249.1 + 309.2 + 309.2, up3 249.1 + 309.2, conv_out 1.8 -> 2,514 GFLOPs
    m = load_model("FLUX.1-dev")   # 16 latent channels, no post-quant conv
    expected = sd_decoder_flops_by_hand(512, 16)
    assert expected == pytest.approx(2.514e12, rel=1e-3)
    assert serial.vae_decode_flops(m, 512, 512) == pytest.approx(expected, rel=1e-12)


def test_sd_decoder_at_1024_matches_the_hand_count():
    m = load_model("SD3-medium")
    expected = sd_decoder_flops_by_hand(1024, 16)
    assert serial.vae_decode_flops(m, 1024, 1024) == pytest.approx(expected, rel=1e-12)
    # 4 latent channels and a 1x1 post-quant conv (2 x 4 x 4 x 128^2): the SD/SDXL VAE of PixArt
    pix = load_model("PixArt-alpha")
    assert serial.vae_decode_flops(pix, 1024, 1024) == pytest.approx(
        sd_decoder_flops_by_hand(1024, 4) + 2 * 4 * 4 * 128 ** 2, rel=1e-12)


def test_four_times_the_pixels_is_four_times_the_conv_flops():
    m = load_model("FLUX.1-dev")
    w1, w2 = serial.vae_decode_work(m, 512, 512), serial.vae_decode_work(m, 1024, 1024)
    conv1 = w1.flops - w1.parts["mid_attention"]
    conv2 = w2.flops - w2.parts["mid_attention"]
    assert conv2 == pytest.approx(4 * conv1, rel=1e-12)
    # attention grows with the square of the latent tokens: x16
    assert w2.parts["mid_attention"] - 4 * 2 * 128 ** 2 * 512 ** 2 == pytest.approx(
        16 * (w1.parts["mid_attention"] - 4 * 2 * 64 ** 2 * 512 ** 2), rel=1e-12)
    assert w2.bytes > 3.9 * w1.bytes


def test_frames_scale_the_video_decoders():
    latte = load_model("Latte-1")       # a 2D VAE: every frame is an image
    assert serial.vae_decode_flops(latte, 512, 512, 16) == pytest.approx(
        16 * serial.vae_decode_flops(latte, 512, 512, 1), rel=1e-12)
    wan = load_model("Wan2.1-T2V-14B")  # causal: 1 + 4 k frames -> k + 1 latent frames
    f81, f41 = (serial.vae_decode_work(wan, 832, 480, f) for f in (81, 41))
    # every full-resolution part (up blocks 2 and 3) runs on the output frames: 81 vs 41
    for part in ("up2", "up3"):
        assert f81.parts[part] == pytest.approx(81 / 41 * f41.parts[part], rel=1e-12)
    # conv_in and the mid block run on latent frames: 21 vs 11
    assert f81.parts["conv_in"] == pytest.approx(21 / 11 * f41.parts["conv_in"], rel=1e-12)


def test_cogvideox_frame_batches_follow_diffusers():
    # 13 latent frames in batches of 2, the first takes the remainder: 3 + 2 x 5
    assert serial._frame_batches(13, 2) == [3, 2, 2, 2, 2, 2]
    # time up-sampling of each batch twice: 3 -> 5 -> 9, 2 -> 4 -> 8; 9 + 5 x 8 = 49 output frames
    ups = [serial._cogvideox_time_up(serial._cogvideox_time_up(f)) for f in serial._frame_batches(13, 2)]
    assert sum(ups) == 49
    # HunyuanVideo: 33 latent frames, tiles of 5 every 3 -> 11 tiles, the last of 3
    tiles = serial._temporal_tiles(33, 5, 3)
    assert len(tiles) == 11 and tiles[-1] == 3 and sum(tiles) == 10 * 5 + 3


def test_a_model_without_vae_table_is_not_priced():
    m = load_model("Example-MHA-56H-50L")     # an illustrative model: no VAE to read, no [vae]
    assert m.vae is None
    with pytest.raises(serial.NotPriced, match="not priced"):
        serial.vae_decode_flops(m, 1280, 704, 121)
    unknown = dataclasses.replace(load_model("FLUX.1-dev"),
                                  vae=dataclasses.replace(load_model("FLUX.1-dev").vae, decoder="vq"))
    with pytest.raises(serial.NotPriced, match="not walked"):
        serial.vae_decode_flops(unknown, 1024, 1024)
    no_te = dataclasses.replace(load_model("FLUX.1-dev"), text_encoder_params_b=0.0)
    with pytest.raises(serial.NotPriced, match="text encoding not priced"):
        serial.text_encode_flops(no_te, 512)


def test_text_encode_is_two_flops_per_parameter_and_token():
    m = load_model("FLUX.1-dev")   # T5-XXL + CLIP-L = 4.88 B parameters
    assert serial.text_encode_flops(m, 512) == pytest.approx(2 * 4.88e9 * 512)


# ---------------------------------------------------------------- every family against an independent counter
# torch.utils.flop_counter.FlopCounterMode (torch 2.13) around `vae.decode(z)` of diffusers 0.42.1's own classes,
# built on the meta device with each preset's config (AutoencoderKL(latent_channels=16, block_out_channels=(128,
# 256, 512, 512), layers_per_block=2, use_post_quant_conv=False), AutoencoderKLCogVideoX(), AutoencoderKLHunyuanVideo(),
# AutoencoderKLWan(), AutoencoderKLWan(**vae22 config), AutoencoderDC(sana-1.0 config), AutoencoderKLMochi()) and
# a latent of the shape the pipeline makes; the figures below are its totals (it counts convolutions, linears,
# matmuls and SDPA, as serial.py does). benchmarks/vae_flops_crosscheck.py reruns it where diffusers is installed.
FLOP_COUNTER = [
    ("FLUX.1-dev", 512, 512, 1, 2_514_971_787_264),
    ("FLUX.1-dev", 1024, 1024, 1, 10_472_204_009_472),
    ("PixArt-alpha", 1024, 1024, 1, 10_470_392_594_432),
    ("CogVideoX-5b", 720, 480, 49, 315_027_947_520_000),
    ("CogVideoX1.5-5B", 1360, 768, 81, 1_571_701_150_187_520),
    ("Wan2.1-T2V-14B", 1280, 720, 81, 639_218_375_884_800),
    ("Wan2.1-T2V-14B", 832, 480, 81, 275_352_205_639_680),
    ("Wan2.2-TI2V-5B", 1280, 704, 121, 2_011_137_824_030_720),
    ("HunyuanVideo", 1280, 720, 129, 2_999_972_184_883_200),
    ("SANA-1.6B-4K", 1024, 1024, 1, 8_368_611_655_680),
    ("SANA-1.6B-4K", 4096, 4096, 1, 133_897_786_490_880),
    ("Mochi-1", 848, 480, 163, 1_080_804_754_391_040),
    ("Qwen-Image", 1328, 1328, 1, 20_121_632_811_008),
    # Step-Video-T2V's VAE is not in diffusers: the same counter around stepfun-ai/Step-Video-T2V@675e08c
    # stepvideo/vae/vae.py AutoencoderKL(z_channels=64, version=2), decode_naive on each chunk of 3 latent frames
    ("Step-Video-T2V", 992, 544, 17, 275_248_455_352_320),
    ("Step-Video-T2V", 992, 544, 204, 3_302_981_464_227_840),
]


# the same counter with `vae.enable_tiling()` called first (diffusers' default tiles and strides)
FLOP_COUNTER_TILED = [
    ("CogVideoX-5b", 720, 480, 49, 441_039_126_528_000),
    ("HunyuanVideo", 1280, 720, 129, 4_770_365_327_425_536),
    ("Wan2.1-T2V-14B", 1280, 720, 81, 1_042_266_755_579_904),
    ("Wan2.2-TI2V-5B", 1280, 704, 121, 3_325_084_906_717_184),
    ("Mochi-1", 848, 480, 163, 1_782_308_217_618_432),
]


@pytest.mark.parametrize("name,width,height,frames,expected", FLOP_COUNTER_TILED)
def test_tiled_decoder_flops_match_torch_flop_counter(name, width, height, frames, expected):
    assert serial.vae_decode_flops(load_model(name), width, height, frames, tiled=True) == pytest.approx(
        expected, rel=1e-12)


def test_tiles_follow_diffusers_and_small_latents_are_not_tiled():
    # HunyuanVideo 1280x720: latent 90 x 160, tiles of 32 every 24 -> rows 32, 32, 32, 18; columns 6 x 32 + 16
    assert serial._spatial_tiles(90, 32, 24) == [32, 32, 32, 18]
    assert serial._spatial_tiles(160, 32, 24) == [32] * 6 + [16]
    wan = load_model("Wan2.1-T2V-1.3B")      # 256 x 256 px is one 32 x 32 latent tile: decoded whole
    assert serial.vae_decode_flops(wan, 256, 256, 17, tiled=True) == serial.vae_decode_flops(wan, 256, 256, 17)
    flux = load_model("FLUX.1-dev")          # no tiles described: asking for them is not priced
    with pytest.raises(serial.NotPriced, match="tiled VAE decode not priced"):
        serial.vae_decode_flops(flux, 2048, 2048, tiled=True)


@pytest.mark.parametrize("name,width,height,frames,expected", FLOP_COUNTER)
def test_decoder_flops_match_torch_flop_counter_on_diffusers(name, width, height, frames, expected):
    assert serial.vae_decode_flops(load_model(name), width, height, frames) == pytest.approx(expected, rel=1e-12)


def test_every_preset_with_a_vae_table_is_priced_and_the_rest_say_not_priced():
    from ditpar.plan.inputs.presets import list_models

    priced, unpriced = [], []
    for name in list_models():
        m = load_model(name)
        try:
            work = serial.vae_decode_work(m, m.default_width, m.default_height, m.default_frames)
        except serial.NotPriced as exc:
            assert m.vae is None and "not priced" in str(exc)
            unpriced.append(m.name)
            continue
        assert work.flops > 0 and work.bytes > 0
        priced.append(m.name)
    # the 2026 presets whose VAE config is not read (their notes say so): decode is named not priced
    assert sorted(unpriced) == ["Example-GQA-56Q-8KV", "Example-MHA-56H-50L", "HunyuanVideo-1.5", "LTX-2",
                                "LongCat-Image", "Z-Image-Turbo"] and len(priced) == 31   # 29 + Lumina-Image-2.0 and HiDream-I1-Full


def test_opensora2_decoder_is_hunyuanvideos_run_on_the_whole_clip():
    """Open-Sora 2.0 ships its own copy of HunyuanVideo's causal 3D VAE (same widths, layers, latent channels,
    post_quant_conv) with temporal tiling off: its decode is HunyuanVideo's decoder on all 33 latent frames at once."""
    os2, hv = load_model("Open-Sora 2.0 (11B)"), load_model("HunyuanVideo")
    whole = dataclasses.replace(hv, vae=dataclasses.replace(hv.vae, frame_tile=0, frame_tile_stride=0))
    assert os2.latent_frames(129) == 33
    assert serial.vae_decode_flops(os2, 1024, 576, 129) == serial.vae_decode_flops(whole, 1024, 576, 129)
    assert serial.vae_decode_flops(hv, 1024, 576, 129) != serial.vae_decode_flops(whole, 1024, 576, 129)  # tiles overlap


def test_flux2_decoder_is_flux1s_with_a_32_channel_latent():
    """AutoencoderKLFlux2 builds the same vae.Decoder as FLUX.1's AutoencoderKL; only the latent width (32 against
    16) and its 1x1 post_quant_conv differ: the extra FLOPs are conv_in's 9 x 16 x 512 more MACs and the 32 x 32
    post_quant_conv, per latent position (128 x 128 at 1024 px), at 2 FLOPs a MAC."""
    pos = 128 * 128
    one = serial.vae_decode_flops(load_model("FLUX.1-dev"), 1024, 1024, 1)
    two = serial.vae_decode_flops(load_model("FLUX.2-dev"), 1024, 1024, 1)
    assert two - one == pytest.approx(2 * pos * (9 * (32 - 16) * 512 + 32 * 32), rel=1e-12)


def test_fp32_doubles_the_bytes_not_the_flops():
    m = load_model("Wan2.1-T2V-1.3B")            # fp32, as diffusers' Wan examples load the VAE
    bf16 = dataclasses.replace(m, vae=dataclasses.replace(m.vae, dtype="bf16"))
    a, b = serial.vae_decode_work(m, 832, 480, 81), serial.vae_decode_work(bf16, 832, 480, 81)
    assert a.flops == b.flops and a.bytes == pytest.approx(2 * b.bytes)


# ---------------------------------------------------------------- efficiency from the published measurements
def test_efficiency_reproduces_the_published_sd_decode_time():
    from ditpar.plan.cost import serial_time as st

    row = next(m for m in st.MEASUREMENTS if m.label == "SD v1.5 VAE 1024px, RTX 4090")
    # hand count of the SD v1.5 VAE (4 latent channels + the 1x1 post-quant conv) at 1024^2, over 0.148 s
    flops = sd_decoder_flops_by_hand(1024, 4) + 2 * 4 * 4 * 128 ** 2
    assert row.achieved_tflops == pytest.approx(flops / 0.148 / 1e12, rel=1e-12)      # 70.75 TFLOP/s
    assert row.fraction == pytest.approx(flops / 0.148 / 165.2e12, rel=1e-12)         # 0.428 of 165.2
    assert row.fraction == pytest.approx(0.428, abs=5e-4)
    # the time model fed that one measurement gives back the measured 0.148 s on the measured card
    eff = st.decode_efficiency("autoencoderkl", "RTX 4090", measurements=(row,))
    assert eff.fraction == row.fraction and "measured on RTX 4090" in eff.basis
    assert st.vae_decode_s(flops, 0.0, 165.2, eff.fraction) == pytest.approx(0.148, rel=1e-12)


def test_wan_rows_reproduce_their_sources():
    from ditpar.plan.cost import serial_time as st

    rows = {m.label: m for m in st.MEASUREMENTS}
    h20 = rows["Wan 2.1 VAE 720p x81, H20"]      # 639.2 TFLOP in 26.2795 s on a 148 TFLOPS card
    assert h20.flops == pytest.approx(639_218_375_884_800, rel=1e-12)
    assert h20.fraction == pytest.approx(639.218375884800 / 26.2795 / 148, rel=1e-9)
    npu = rows["Wan 2.1 VAE 720p x160, Ascend 910B3"]   # 160 frames -> 40 latent frames
    assert load_model("Wan2.1-T2V-1.3B").latent_frames(160) == 40
    assert npu.fraction == pytest.approx(npu.flops / 48.8579 / 313e12, rel=1e-12)


def test_a_class_without_measurement_says_which_figure_it_borrows():
    from ditpar.plan.cost import serial_time as st

    l40 = st.decode_efficiency("cogvideox", "L40")
    assert "no 3d measurement on L40 or its die: the global 3d figure" in l40.basis
    threed = sorted(m.fraction for m in st.MEASUREMENTS if m.kind == "3d")
    assert len(threed) == 6 and l40.fraction == pytest.approx((threed[2] + threed[3]) / 2)   # median of six
    h100 = st.decode_efficiency("wan", "H100")
    assert "same die (GH100)" in h100.basis and h100.measurements == (
        "Wan 2.1 VAE 480p x81, H200", "HunyuanVideo VAE 480p x77 tiled, H200")
    hy = next(m for m in st.MEASUREMENTS if m.tiled)        # a tiled run is counted tiled
    assert hy.flops == serial.vae_decode_flops(load_model("HunyuanVideo"), 848, 480, 77, tiled=True)
    npu = st.decode_efficiency("wan", "910B")
    assert npu.basis.startswith("measured on 910B")
    with pytest.raises(serial.NotPriced):
        st.decode_efficiency("vq", "H100")


def test_decode_time_is_never_faster_than_its_bytes():
    from ditpar.plan.cost import serial_time as st

    assert st.vae_decode_s(1e12, 4e9, 1000.0, 0.5, hbm_GBps=1000.0) == pytest.approx(4e-3)   # bytes bound
    assert st.vae_decode_s(1e12, 1e9, 1000.0, 0.5, hbm_GBps=1000.0) == pytest.approx(2e-3)   # compute bound


def test_predicted_decode_on_presets():
    from ditpar.plan.cost import serial_time as st
    from ditpar.plan.inputs.presets import load_hardware

    h100 = load_hardware("H100-SXM NVLink x8")
    m = load_model("Wan2.1-T2V-1.3B")            # its preset decodes in fp32
    t = st.predict_decode(m, h100, 832, 480, 81)
    # the two H200 rows (same die): the median of their traffic multipliers prices the H100, at its 3,350 GB/s
    h200 = [r for r in st.MEASUREMENTS if r.accelerator == "H200" and r.kind == "3d"]
    mult = (h200[0].traffic + h200[1].traffic) / 2
    assert t.traffic == pytest.approx(mult) and "same die (GH100)" in t.basis
    nbytes = serial.vae_decode_work(m, 832, 480, 81).bytes
    assert t.seconds == pytest.approx(nbytes * mult / 3350e9, rel=1e-9)
    te = st.text_encode_s(serial.text_encode_flops(m, 512), h100)
    assert te == pytest.approx(2 * m.text_encoder_params_b * 1e9 * 512 / (989e12 * h100.mfu))
    assert te < 0.05 * t.seconds


def test_traffic_multiplier_reproduces_the_published_wan_decode_on_h200():
    """sglang PR 27875: Wan2.1 VAE, 832x480x81, bf16, one H200 (4.8 TB/s): 2.6314 s. The multiplier is that time at
    HBM speed over the counted bf16 bytes; fed back alone, the model returns the 2.6314 s."""
    from ditpar.plan.cost import serial_time as st
    from ditpar.plan.inputs.presets import load_hardware

    row = next(r for r in st.MEASUREMENTS if r.label == "Wan 2.1 VAE 480p x81, H200")
    m = load_model("Wan2.1-T2V-1.3B")
    bf16 = dataclasses.replace(m, vae=dataclasses.replace(m.vae, dtype="bf16"))
    nbytes = serial.vae_decode_work(bf16, 832, 480, 81).bytes
    assert row.bytes == nbytes and row.traffic == pytest.approx(2.6314 * 4800e9 / nbytes, rel=1e-12)
    tr = st.decode_traffic("wan", "H200", measurements=(row,))
    h200 = load_hardware("H200 NVLink x8")
    sec = st.vae_decode_s(0.0, nbytes * tr.multiplier, 989.0, tr.ceiling, h200.hbm_bandwidth_GBps)
    assert sec == pytest.approx(2.6314, rel=1e-12)


@pytest.mark.parametrize("label", [
    "Wan 2.1 VAE 720p, A800", "Wan 2.2 VAE 720p, A800", "Wan 2.1 VAE 720p x81, H20", "Wan 2.1 VAE 480p x81, H200",
    "Wan 2.1 VAE 720p x160, Ascend 910B3", "HunyuanVideo VAE 480p x77 tiled, H200", "FLUX.2 VAE 1024px, H200",
    "FLUX.2 VAE 2048px, H200"])
def test_video_and_high_resolution_decodes_are_priced_within_25_percent_of_their_published_times(label):
    """Every published video decode (Wan 2.1 / 2.2, HunyuanVideo) and the FLUX.2 VAE at 1024 and 2048 px, each on its
    own card and in its own precision, priced by the model shipped (the older compute-fraction model priced the
    H200 Wan decode at 0.64 and the A800 Wan 2.1 decode at 0.68 of the measured time)."""
    from ditpar.plan.cost import serial_time as st
    from ditpar.plan.inputs.presets import load_hardware

    row = next(r for r in st.MEASUREMENTS if r.label == label)
    hw_name = {"A100": "A800-SXM-80GB NVLink x8", "H20": "H20 NVLink x8", "H200": "H200 NVLink x8",
               "910B": "Atlas 800I A2 (910B x8, HCCS)"}[row.accelerator]
    m = load_model(row.model)
    run = dataclasses.replace(m, vae=dataclasses.replace(m.vae, dtype=row.dtype))
    t = st.predict_decode(run, load_hardware(hw_name), row.width, row.height, row.frames, row.tiled)
    assert 0.75 <= t.seconds / row.seconds <= 1.25, (label, t.seconds, row.seconds)


def test_the_same_decoder_measured_twice_on_one_card_spreads_past_25_percent():
    """The SD v1.5 and SDXL-fp16-fix VAEs are one decoder; the diffusers doc times them 0.148 s and 0.256 s at 1024 px
    on one RTX 4090: no single figure prices both within 25 % (the limit of the 2D evidence, said in the reference)."""
    from ditpar.plan.cost import serial_time as st

    rows = {r.label: r for r in st.MEASUREMENTS}
    a, b = rows["SD v1.5 VAE 1024px, RTX 4090"], rows["SDXL VAE 1024px, RTX 4090"]
    assert a.bytes == b.bytes and b.seconds / a.seconds == pytest.approx(0.256 / 0.148)
    assert b.traffic / a.traffic > 1.25 ** 2


# ---------------------------------------------------------------- the [vae] table is checked like every preset key
WAN_TOML = (Path(__file__).resolve().parents[1] / "templates" / "models" / "wan2.1-t2v-14b.toml").read_text(
    encoding="utf-8")


@pytest.mark.parametrize("old, new, phrase", [
    ("frame_batch = 1", "frame_batchs = 1", "unknown key 'vae.frame_batchs'; did you mean 'vae.frame_batch'?"),
    ('decoder = "wan"', 'decoder = "wan3"', "key 'vae.decoder' must be one of"),
    ("block_out_channels = [96, 192, 384, 384]", "block_out_channels = [96, 0, 384, 384]",
     "key 'vae.block_out_channels' must be a non-empty list of integers in [1, 65536]"),
    ('dtype = "fp32"', 'dtype = "float32"', "key 'vae.dtype' must be one of 'bf16', 'fp16', 'fp32'"),
    ("layers_per_block = [2]", "layers_per_block = [2, 2]", "key 'vae.layers_per_block' has 2 entries; expected 1 or 4"),
    ("tile_latent_stride = [24, 24]\n", "", "'vae.tile_latent' and 'vae.tile_latent_stride' go together"),
    ("\nvae_frame_batch = ", "\nvae_frame_batch_src = ", "sources has no entry for vae_frame_batch"),
])
def test_a_vae_table_outside_the_schema_is_refused(tmp_path, old, new, phrase):
    from ditpar.errors import InputError
    from ditpar.plan.inputs import presets

    assert old in WAN_TOML
    path = tmp_path / "m.toml"
    path.write_text(WAN_TOML.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(InputError) as err:
        presets.resolve_model(str(path))
    assert phrase in str(err.value)
