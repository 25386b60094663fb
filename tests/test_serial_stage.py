"""Serial stages (issue 23): VAE decode FLOPs counted from the decoder's structure, text-encode FLOPs, and the
decode time from a published measurement. Expected figures are worked out by hand below, not by the module."""

from __future__ import annotations

import dataclasses

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
    m = load_model("Mochi-1")
    assert m.vae is None
    with pytest.raises(serial.NotPriced, match="not priced"):
        serial.vae_decode_flops(m, 848, 480, 163)
    no_te = dataclasses.replace(load_model("FLUX.1-dev"), text_encoder_params_b=0.0)
    with pytest.raises(serial.NotPriced, match="text encoding not priced"):
        serial.text_encode_flops(no_te, 512)


def test_text_encode_is_two_flops_per_parameter_and_token():
    m = load_model("FLUX.1-dev")   # T5-XXL + CLIP-L = 4.88 B parameters
    assert serial.text_encode_flops(m, 512) == pytest.approx(2 * 4.88e9 * 512)
