"""plan/cost/shape.py at its edges (issue 29): defaults filled from the preset, every size bound exactly at,
below and above its limit, the one-patch minimum, the token count with padding, the request description,
and the latent-frame arithmetic of a model that brings no visual_grid of its own. Expected values are worked
out by hand in the comments (tiny_model: VAE stride 8, patch 2 -> 16 px per token side)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from costmodel_fixtures import tiny_model
from ditpar import limits
from ditpar.errors import InputError
from ditpar.plan.cost.shape import latent_frames, make_shape


def test_defaults_come_from_the_preset():
    m = tiny_model(default_width=128, default_height=96, default_steps=25, cfg_default=True)
    s = make_shape(m)
    # 128 px / 16 = 8 tokens wide, 96 / 16 = 6 high -> 48 tokens per frame, one frame (image)
    assert (s.width, s.height, s.frames, s.steps, s.cfg) == (128, 96, 1, 25, True)
    assert (s.frames_tok, s.tokens_per_frame, s.tokens) == (1, 48, 48)
    assert s.batch == 2                                     # CFG doubles the batch
    # given values win over the defaults, cfg=False included (the default is on)
    g = make_shape(m, 64, 32, None, 7, cfg=False)
    assert (g.width, g.height, g.steps, g.cfg, g.batch) == (64, 32, 7, False, 1)
    assert g.tokens == 4 * 2                                 # 64/16 x 32/16


def test_image_model_ignores_a_default_frame_count_and_video_uses_it():
    image = tiny_model(default_frames=5)                     # an image preset: frames are 1 whatever the default
    assert make_shape(image).frames == 1
    video = tiny_model(kind="video", vae_stride=(4, 8, 8), vae_temporal_causal=True, default_frames=17)
    s = make_shape(video)
    assert s.frames == 17 and s.frames_tok == 1 + (17 - 1) // 4 == 5


def test_image_model_rejects_two_frames():
    with pytest.raises(InputError, match="--frames 2: tiny is an image model"):
        make_shape(tiny_model(), 64, 64, 2, 10)


@pytest.mark.parametrize("field", ["default_width", "default_height", "default_steps"])
def test_a_zero_default_size_is_rejected(field):
    # 0 given on the command line means "use the default"; a preset whose default is 0 is not a size
    with pytest.raises(InputError, match="every size must be positive"):
        make_shape(tiny_model(**{field: 0}))


def test_zero_default_frames_of_a_video_model_is_rejected():
    video = tiny_model(kind="video", default_frames=0)
    with pytest.raises(InputError, match=r"shape 64x64x0, 10 steps: every size must be positive"):
        make_shape(video)


@pytest.mark.parametrize("kw", [dict(width=-16), dict(height=-16), dict(frames=-1), dict(steps=-1)])
def test_negative_sizes_are_rejected(kw):
    args = dict(width=64, height=64, frames=1, steps=10) | kw
    with pytest.raises(InputError, match="every size must be positive"):
        make_shape(tiny_model(kind="video"), **args)


def test_one_pixel_one_step_is_the_smallest_shape():
    # stride 1, patch 1: a 1x1 px image is one token; every size exactly 1 must pass the positivity check
    m = tiny_model(vae_stride=(1, 1, 1), patch=(1, 1, 1), kind="video")
    s = make_shape(m, 1, 1, 1, 1)
    assert (s.width, s.height, s.frames, s.steps, s.tokens) == (1, 1, 1, 1, 1)


@pytest.mark.parametrize("name,kw,top", [("width", dict(width=limits.MAX_PIXELS_SIDE), 16_384),
                                         ("height", dict(height=limits.MAX_PIXELS_SIDE), 16_384),
                                         ("frames", dict(frames=limits.MAX_FRAMES), 10_000),
                                         ("steps", dict(steps=limits.MAX_STEPS), 10_000)])
def test_every_size_bound_is_inclusive(name, kw, top):
    m = tiny_model(kind="video")
    args = dict(width=64, height=64, frames=1, steps=10) | kw
    assert getattr(make_shape(m, **args), name) == top                      # exactly at the bound: fine
    over = args | {name: top + 1}
    with pytest.raises(InputError, match=rf"{name} {top + 1} is out of range 1\.\.{top}"):
        make_shape(m, **over)


def test_one_patch_is_the_minimum_along_each_side():
    m = tiny_model()
    s = make_shape(m, 16, 16, 1, 10)                        # 16 px = 2 latent = exactly one patch: 1 token
    assert s.tokens == 1
    with pytest.raises(InputError, match="64x15: smaller than one patch of tiny"):
        make_shape(m, 64, 15, 1, 10)                        # 15 // 8 = 1 latent row < patch 2 (width is fine)
    with pytest.raises(InputError, match="15x64: smaller than one patch of tiny"):
        make_shape(m, 15, 64, 1, 10)


def test_tokens_include_padding_and_batch_follows_cfg():
    s = make_shape(tiny_model(), 64, 64, 1, 10, cfg=False)
    assert s.batch == 1
    padded = dataclasses.replace(s, pad_tokens=3)
    assert padded.tokens == 16 + 3                          # 1 x 16 grid + 3 padding tokens


def test_shape_is_frozen_and_hashable():
    s = make_shape(tiny_model(), 64, 64, 1, 10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.steps = 20                                        # shared by every plan's prediction: never edited
    assert hash(s) == hash(make_shape(tiny_model(), 64, 64, 1, 10))


def test_describe_by_hand():
    s = make_shape(tiny_model(), 64, 64, 1, 10)
    assert s.describe() == "64x64, 10 steps, cfg=off: 16 tokens (1x16)"
    two = make_shape(tiny_model(kind="video", vae_stride=(4, 8, 8), vae_temporal_causal=True), 64, 64, 2, 10)
    assert two.describe() == "64x64x2f, 10 steps, cfg=off: 16 tokens (1x16)"   # 1 + 1 // 4 = 1 latent frame
    v = make_shape(tiny_model(kind="video", vae_stride=(4, 8, 8), vae_temporal_causal=True,
                              text_joint_tokens=77, text_cross_tokens=12), 64, 32, 9, 5, cfg=True)
    v = dataclasses.replace(v, pad_tokens=2)
    # 9 frames causal stride 4 -> 1 + 8 // 4 = 3 latent frames; 64x32 px -> 4 x 2 = 8 per frame; 24 + 2 pad
    assert v.describe() == ("64x32x9f, 5 steps, cfg=on: 26 tokens (3x8) incl. 2 padding + 77 joint text, "
                            "12 cross-attn text")


def _plain(**kw):
    """A model description without visual_grid (make_shape's own rounding: floor per side)."""
    base = dict(name="plain", kind="video", default_width=64, default_height=64, default_frames=1,
                default_steps=10, cfg_default=False, patch=(1, 2, 2), vae_stride=(4, 8, 8),
                text_joint_tokens=0, text_cross_tokens=0)
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize("frames,causal,expected", [
    (81, True, 21),    # 1 + 80 // 4
    (81, False, 20),   # 81 // 4
    (2, True, 1),      # 1 + 1 // 4: a second frame does not start a latent frame yet
    (5, True, 2),      # 1 + 4 // 4
    (4, True, 1),      # 1 + 3 // 4: the 4th frame still belongs to the first group after frame 0
    (8, True, 2),      # 1 + 7 // 4
    (4, False, 1),     # 4 // 4
    (6, False, 1),     # 6 // 4 (whole latent frames only)
    (3, False, 1),     # 3 // 4 = 0, at least one latent frame
    (1, True, 1), (1, False, 1),
])
def test_latent_frames_by_hand(frames, causal, expected):
    assert latent_frames(_plain(vae_temporal_causal=causal), frames) == expected


def test_latent_frames_edges():
    assert latent_frames(_plain(), 0) == 1                              # no frames still decode one latent frame
    assert latent_frames(_plain(vae_temporal_causal=True), 0) == 1      # (not 1 + (0 - 1) // 4 = 0)
    assert latent_frames(_plain(vae_stride=(1, 8, 8)), 7) == 7          # no temporal stride: frames as given
    assert latent_frames(_plain(vae_stride=(2, 8, 8), vae_temporal_causal=True), 5) == 3   # 1 + 4 // 2
    assert latent_frames(_plain(vae_stride=(2, 8, 8)), 5) == 2                               # 5 // 2
    assert latent_frames(_plain(), 17) == 4                             # no causal attribute: 17 // 4
    assert latent_frames(_plain(vae_stride=(4, 16, 16), vae_temporal_causal=True), 81) == 21  # stride[0] only


def test_make_shape_without_visual_grid_rounds_down():
    # 81 frames causal -> 21 latent frames, temporal patch 2 -> 21 // 2 = 10
    s = make_shape(_plain(patch=(2, 2, 2), vae_temporal_causal=True), 24, 40, 81, 10)
    assert (s.frames_tok, s.tokens_per_frame) == (10, 1 * 2)            # 24 / 8 = 3 -> 1 wide; 40 / 8 = 5 -> 2 high
    # no partial patch: 32x24 px -> 4 x 3 latent -> 2 x 1 tokens; 24x32 -> 1 x 2
    assert make_shape(_plain(), 32, 24, 1, 10).tokens_per_frame == 2
    assert make_shape(_plain(), 24, 32, 1, 10).tokens_per_frame == 2
    one = make_shape(_plain(patch=(2, 2, 2), vae_temporal_causal=True), 64, 64, 1, 10)
    assert one.frames_tok == 1                                          # 1 latent frame // 2 = 0 -> at least 1
    t1 = make_shape(_plain(patch=(1, 2, 2)), 64, 64, 20, 10)
    assert t1.frames_tok == 5                                           # 20 // 4 = 5, temporal patch 1
    t0 = make_shape(_plain(patch=(0, 2, 2)), 64, 64, 20, 10)
    assert t0.frames_tok == 5                                           # a temporal patch of 0 counts as 1
