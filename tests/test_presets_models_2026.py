"""The 2026 model presets (issue 39, reach: any DiT from its own config): each resolves by its Hugging Face id, its
key figures equal the cited configuration (typed here by hand from the source named in each comment, not read from
the preset), its family is the one the framework profiles know it by, and plan.py answers on 8 x H100."""

from __future__ import annotations

import json

import pytest
from conftest import run_script
from ditpar.plan.inputs import presets

D = "huggingface/diffusers@58eb52c0803ea9af3abec60841c2a093bdf1f951:"

# HF id -> (name, family, hidden, heads, kv_heads, head_dim, ffn, ffn_matrices, blocks, patch, vae_stride,
#           latent_channels, text joint, text cross, cfg, steps, (width, height, frames))
CASES = {
    # Tongyi-MAI/Z-Image-Turbo transformer/config.json: dim 3840, n_heads 30, n_kv_heads 30, n_layers 30,
    # n_refiner_layers 2, all_patch_size [2], in_channels 16; D src/.../transformer_z_image.py FeedForward
    # hidden_dim int(dim / 3 * 8) with w1/w2/w3; D src/.../pipelines/z_image/pipeline_z_image.py example: 1024^2, 8 steps,
    # guidance 0.0, max_sequence_length 512
    "Tongyi-MAI/Z-Image-Turbo": ("Z-Image-Turbo", "z-image", 3840, 30, 30, 128, 10240, 3, {"single": 30, "self": 2},
                                 (1, 2, 2), (1, 8, 8), 16, 512, 0, False, 8, (1024, 1024, 1)),
    # D scripts/convert_flux2_to_diffusers.py klein-4b: num_layers 5, num_single_layers 20, num_attention_heads 24,
    # attention_head_dim 128, mlp_ratio 3.0 (SwiGLU), in_channels 128 (32 x 2 x 2), guidance_embeds false
    "black-forest-labs/FLUX.2-klein-4B": ("FLUX.2-klein-4B", "flux", 3072, 24, 24, 128, 9216, 3,
                                          {"joint": 5, "single": 20}, (1, 2, 2), (1, 8, 8), 32, 512, 0, False, 4,
                                          (1024, 1024, 1)),
    # D scripts/convert_flux2_to_diffusers.py klein-9b: num_layers 8, num_single_layers 24, num_attention_heads 32
    "black-forest-labs/FLUX.2-klein-9B": ("FLUX.2-klein-9B", "flux", 4096, 32, 32, 128, 12288, 3,
                                          {"joint": 8, "single": 24}, (1, 2, 2), (1, 8, 8), 32, 512, 0, False, 4,
                                          (1024, 1024, 1)),
    # D src/.../transformer_qwenimage.py defaults (num_layers 60, 24 heads x 128, FeedForward 4x); edit pipeline:
    # 512 prompt tokens + 64 x 64 reference-image tokens (calculate_dimensions(1024 * 1024)), true_cfg_scale 4.0, 50 steps
    "Qwen/Qwen-Image-Edit": ("Qwen-Image-Edit", "qwen-image", 3072, 24, 24, 128, 12288, 2, {"joint": 60},
                             (1, 2, 2), (1, 8, 8), 16, 512 + 4096, 0, True, 50, (1024, 1024, 1)),
    "Qwen/Qwen-Image-Edit-2509": ("Qwen-Image-Edit", "qwen-image", 3072, 24, 24, 128, 12288, 2, {"joint": 60},
                                  (1, 2, 2), (1, 8, 8), 16, 512 + 4096, 0, True, 50, (1024, 1024, 1)),
    # D src/.../transformer_hunyuan_video15.py defaults: 16 heads x 128, num_layers 54, mlp_ratio 4, patch 1 x 1 x 1;
    # autoencoder_kl_hunyuanvideo15.py: latent_channels 32, 16x spatial, 4x temporal; pipeline: 121 frames, 50 steps,
    # tokenizer_max_length 1000
    "tencent/HunyuanVideo-1.5": ("HunyuanVideo-1.5", "hunyuanvideo-1.5", 2048, 16, 16, 128, 8192, 2, {"joint": 54},
                                 (1, 1, 1), (4, 16, 16), 32, 1000, 0, True, 50, (1280, 720, 121)),
    # D scripts/convert_cosmos_to_diffusers.py Cosmos-2.5-Predict-Base-2B: 16 heads x 128, num_layers 28, mlp_ratio 4,
    # patch (1, 2, 2), Wan 2.1 VAE; pipeline_cosmos2_5_predict.py: 1280x704, 93 frames, 36 steps, guidance 7.0, 512 tokens
    "nvidia/Cosmos-Predict2.5-2B": ("Cosmos-Predict2.5-2B", "custom", 2048, 16, 16, 128, 8192, 2, {"cross": 28},
                                    (1, 2, 2), (4, 8, 8), 16, 0, 512, True, 36, (1280, 704, 93)),
    # ... Cosmos-2.5-Predict-Base-14B: 40 heads x 128, num_layers 36
    "nvidia/Cosmos-Predict2.5-14B": ("Cosmos-Predict2.5-14B", "custom", 5120, 40, 40, 128, 20480, 2, {"cross": 36},
                                     (1, 2, 2), (4, 8, 8), 16, 0, 512, True, 36, (1280, 704, 93)),
    # ModelTC/LightX2V@29c8504c:lightx2v/models/networks/longcat_image/weights/transformer_weights.py (10 double, 20
    # single); D src/.../transformer_longcat_image.py (24 heads x 128, FeedForward 4x); pipeline_longcat_image.py
    # (2x2 packing, tokenizer_max_length 512, 50 steps, guidance 4.5)
    "meituan-longcat/LongCat-Image": ("LongCat-Image", "longcat-image", 3072, 24, 24, 128, 12288, 2,
                                      {"joint": 10, "single": 20}, (1, 2, 2), (1, 8, 8), 16, 512, 0, True, 50,
                                      (1024, 1024, 1)),
    # D src/.../transformer_ltx2.py defaults: num_layers 48, 32 heads x 128 (video stream), FeedForward 4x,
    # vae_scale_factors (8, 32, 32), in_channels 128; pipeline_ltx2.py: 768x512, 121 frames, 30 steps, guidance 3.0,
    # max_sequence_length 1024
    "Lightricks/LTX-2": ("LTX-2", "ltx", 4096, 32, 32, 128, 16384, 2, {"cross": 48}, (1, 1, 1), (8, 32, 32), 128,
                         0, 1024, True, 30, (768, 512, 121)),
}


@pytest.mark.parametrize("hf_id", sorted(CASES))
def test_preset_resolves_by_its_hf_id_and_matches_the_cited_config(hf_id):
    (name, family, hidden, heads, kv, head_dim, ffn, mats, blocks, patch, stride, latent, joint, cross, cfg, steps,
     shape) = CASES[hf_id]
    m = presets.load_model(hf_id)
    assert m.name == name and m.family == family
    assert (m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn, m.ffn_matrices) == (hidden, heads, kv, head_dim, ffn, mats)
    assert dict(m.blocks) == blocks
    assert tuple(m.patch) == patch and tuple(m.vae_stride) == stride and m.latent_channels == latent
    assert (m.text_joint_tokens, m.text_cross_tokens, m.cfg_default, m.default_steps) == (joint, cross, cfg, steps)
    assert (m.default_width, m.default_height, m.default_frames) == shape
    for key in ("hidden", "heads", "blocks", "ffn", "params_b"):
        assert m.sources[key]


def test_token_counts_follow_the_vae_and_patch():
    # HunyuanVideo-1.5 at 1280x720x121: 1 + 120 // 4 = 31 latent frames, 720 / 16 = 45, 1280 / 16 = 80
    assert presets.load_model("HunyuanVideo-1.5").default_visual_tokens == 31 * 45 * 80
    # Cosmos-Predict2.5 at 1280x704x93: 1 + 92 // 4 = 24 frames, 704 / 16 = 44, 1280 / 16 = 80
    assert presets.load_model("Cosmos-Predict2.5-2B").default_visual_tokens == 24 * 44 * 80
    # LTX-2 at 768x512x121: 1 + 120 // 8 = 16 frames, 512 / 32 = 16, 768 / 32 = 24
    assert presets.load_model("LTX-2").default_visual_tokens == 16 * 16 * 24
    for name in ("Z-Image-Turbo", "FLUX.2-klein-4B", "LongCat-Image", "Qwen-Image-Edit"):
        assert presets.load_model(name).default_visual_tokens == 64 * 64   # 1024 px / 16


def test_none_of_the_2026_presets_is_gqa_or_moe():
    # the configs say so: Z-Image's n_kv_heads equals n_heads, the others have no K/V-head key; no routed experts
    for hf_id in CASES:
        m = presets.load_model(hf_id)
        assert m.kv_heads == m.heads and m.experts == 1


@pytest.mark.parametrize("hf_id", sorted(set(CASES) - {"Qwen/Qwen-Image-Edit-2509"}))
def test_plan_answers_on_8_h100(hf_id):
    doc = json.loads(run_script("plan.py", "--model", hf_id, "--hardware", "H100", "--devices", "8", "--json",
                                check=0).stdout)
    assert doc["model"] == CASES[hf_id][0]
    assert any(p["feasible"] for p in doc["plans"])
