"""plan.py --model-config: a model read from its own diffusers config (plan/inputs/model_config.py).

Fixtures under tests/data/model_configs/ are written from public configs (sources in its README.md, one row per
fixture): FLUX.1-dev (black-forest-labs/FLUX.1-dev: model_index, transformer, vae, text_encoder, text_encoder_2),
Wan2.1-T2V-14B (Wan-AI/Wan2.1-T2V-14B-Diffusers: model_index, transformer, vae, text_encoder), a synthetic GQA
variant of Tongyi-MAI/Z-Image-Turbo's transformer config (32 query / 4 K/V heads), the UNet of
stable-diffusion-v1-5 and meta-llama/Llama-3.1-8B's config.json. Expected values come from the preset TOML files,
which cite the same public configs, not from the module under test.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys

import pytest
from conftest import ROOT, run_script

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = ROOT / "tests" / "data" / "model_configs"
FLUX = DATA / "FLUX.1-dev"
WAN = DATA / "Wan2.1-T2V-14B-Diffusers"
GQA = DATA / "zimage-gqa-32q4kv.json"
BOX = ["--hardware", "H100", "--devices", "8"]


def _plan(*args: str, check: int | None = 0) -> tuple[dict, str]:
    proc = run_script("plan.py", *args, *BOX, "--json", check=check)
    return json.loads(proc.stdout), proc.stderr


def _preset(stem: str) -> dict:
    with (ROOT / "templates" / "models" / f"{stem}.toml").open("rb") as fh:
        return tomllib.load(fh)


@pytest.mark.parametrize("folder, preset, stem", [(FLUX, "FLUX.1-dev", "flux1-dev"),
                                                  (WAN, "Wan2.1-T2V-14B", "wan2.1-t2v-14b")])
def test_config_folder_prices_as_the_preset(folder, preset, stem):
    """Every plan on 8 x H100 within 2 % of the preset's prediction (DiT loop and end to end)."""
    got, err = _plan("--model-config", str(folder))
    want, _ = _plan("--model", preset)
    assert err == ""          # a complete folder leaves nothing to guess
    by_name = {(p["name"], p["framework"]): p for p in got["plans"]}
    assert set(by_name) == {(p["name"], p["framework"]) for p in want["plans"]}
    for p in want["plans"]:
        q = by_name[(p["name"], p["framework"])]
        assert q["feasible"] == p["feasible"], p["name"]
        if p["predicted_latency_s"] is None:
            assert q["predicted_latency_s"] is None
            continue
        assert q["predicted_latency_s"] == pytest.approx(p["predicted_latency_s"], rel=0.02), p["name"]
        assert q["bytes_per_step_by_link"] == pytest.approx(p["bytes_per_step_by_link"], rel=0.02), p["name"]
    e2e_got, e2e_want = got["serial_stages"]["end_to_end_s"], want["serial_stages"]["end_to_end_s"]
    assert set(e2e_got) == set(e2e_want)
    for name, s in e2e_want.items():
        assert e2e_got[name] == pytest.approx(s, rel=0.02), name
    # what it read, against the preset written from the same public config
    toml = _preset(stem)
    fields = got["model_fields"]
    for key in ("hidden", "heads", "kv_heads", "head_dim", "ffn", "latent_channels", "patch", "vae_stride",
                "vae_temporal_causal", "cfg_default", "text_joint_tokens", "text_cross_tokens", "kind",
                "default_width", "default_height", "default_frames", "default_steps"):
        assert fields[key] == toml[key], key
    assert fields["blocks"] == toml["blocks"]
    assert fields["params_b"] == pytest.approx(toml["params_b"], rel=0.02)
    assert fields["text_encoder_params_b"] == pytest.approx(toml["text_encoder_params_b"], rel=0.01)
    assert fields["vae"]["decoder"] == toml["vae"]["decoder"]
    assert fields["vae"]["block_out_channels"] == toml["vae"]["block_out_channels"]


def test_one_transformer_config_with_its_vae_beside_it():
    """transformer/config.json alone: the vae/ beside it is read; the text encoder is not (not priced)."""
    got, err = _plan("--model-config", str(FLUX / "transformer" / "config.json"))
    want, _ = _plan("--model", "FLUX.1-dev")
    assert err == ""
    assert got["model"] == "FLUX.1-dev"
    lat = {p["name"]: p["predicted_latency_s"] for p in want["plans"]}
    for p in got["plans"]:
        if p["predicted_latency_s"] is not None:
            assert p["predicted_latency_s"] == pytest.approx(lat[p["name"]], rel=0.02)
    assert got["model_fields"]["text_encoder_params_b"] == 0


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def _preset_from_fields(fields: dict, path) -> None:
    """templates/PRESETS.md 'From a config': model_fields as a preset file, the steps a user takes."""
    lines = []
    skip = {"blocks", "vae", "sources", "family"}
    for k, v in fields.items():
        if k not in skip and v is not None and not (k == "text_encoder_params_b" and v == 0):
            lines.append(f"{k} = {_toml_value(v)}")
    lines.append("[blocks]")
    lines += [f"{k} = {v}" for k, v in fields["blocks"].items()]
    lines.append("[sources]")
    lines += [f'{k} = "tests/data/model_configs/zimage-gqa-32q4kv.json"' for k in
              ("hidden", "heads", "blocks", "ffn", "params_b")]
    path.write_text("\n".join(lines) + "\n")


def test_gqa_config_prices_gqa_as_the_preset_path(tmp_path):
    gqa, err = _plan("--model-config", str(GQA))
    assert gqa["model_fields"]["heads"] == 32 and gqa["model_fields"]["kv_heads"] == 4
    assert "(GQA)" in gqa["conclusion"]
    assert "no vae/config.json" in err   # a lone config: the VAE the class uses is assumed, and said
    mha_cfg = tmp_path / "zimage-mha-32q32kv.json"
    mha_cfg.write_text(GQA.read_text().replace('"n_kv_heads": 4', '"n_kv_heads": 32'))
    mha, _ = _plan("--model-config", str(mha_cfg))
    assert mha["model_fields"]["kv_heads"] == 32
    a = {p["name"]: p for p in gqa["plans"] if p["predicted_latency_s"] is not None}
    b = {p["name"]: p for p in mha["plans"] if p["predicted_latency_s"] is not None}
    # ring passes K and V only: kv_heads / heads of the bytes; Ulysses-4 moves Q, O whole and K, V at 4/32
    assert a["R8"]["bytes_per_layer_by_link"]["intra_domain"] == pytest.approx(
        b["R8"]["bytes_per_layer_by_link"]["intra_domain"] * 4 / 32)
    assert a["cfg2 U4"]["bytes_per_layer_by_link"]["intra_domain"] == pytest.approx(
        b["cfg2 U4"]["bytes_per_layer_by_link"]["intra_domain"] * (2 * 32 + 2 * 4) / (4 * 32))
    # the preset path with the same figures gives the same bytes and times, plan by plan
    toml = tmp_path / "zimage-gqa.toml"
    _preset_from_fields(gqa["model_fields"], toml)
    via_preset, _ = _plan("--model", str(toml))
    assert via_preset["model"] == gqa["model"]
    c = {p["name"]: p for p in via_preset["plans"] if p["predicted_latency_s"] is not None}
    assert set(c) == set(a)
    for name, p in a.items():
        assert p["bytes_per_layer_by_link"] == c[name]["bytes_per_layer_by_link"], name
        assert p["predicted_latency_s"] == pytest.approx(c[name]["predicted_latency_s"], rel=1e-9), name


def test_cli_overrides_still_apply():
    got, _ = _plan("--model-config", str(GQA), "--kv-heads", "8")
    assert got["model_fields"]["kv_heads"] == 8


def _copy_flux(tmp_path, drop: str):
    folder = tmp_path / "my-flux"
    shutil.copytree(FLUX, folder)
    cfg = folder / "transformer" / "config.json"
    data = json.loads(cfg.read_text())
    del data[drop]
    cfg.write_text(json.dumps(data))
    return folder, cfg


def test_missing_key_is_one_line_naming_key_file_and_flag(tmp_path):
    folder, cfg = _copy_flux(tmp_path, "num_attention_heads")
    proc = run_script("plan.py", "--model-config", str(folder), *BOX, check=2)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "'num_attention_heads'" in lines[0] and str(cfg) in lines[0] and "--heads" in lines[0]
    # the flag supplies it
    got, _ = _plan("--model-config", str(folder), "--heads", "24")
    assert got["model_fields"]["heads"] == 24


def test_missing_layers_names_layers_flag(tmp_path):
    folder, _ = _copy_flux(tmp_path, "num_layers")
    proc = run_script("plan.py", "--model-config", str(folder), *BOX, check=2)
    assert len(proc.stderr.strip().splitlines()) == 1 and "'num_layers'" in proc.stderr and "--layers" in proc.stderr


@pytest.mark.parametrize("path, why", [(DATA / "sd15-unet", "UNet"),
                                       (DATA / "sd15-unet" / "config.json", "UNet"),
                                       (DATA / "llama-3.1-8b.json", "LlamaForCausalLM")])
def test_not_a_diffusion_transformer_is_refused(path, why):
    proc = run_script("plan.py", "--model-config", str(path), *BOX, check=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0] and "not a diffusion transformer" in lines[0]


def _bagel_folder(tmp_path):
    """BAGEL-7B-MoT's checkpoint layout as ByteDance-Seed/Bagel@a384f612:app.py reads it: llm_config.json
    (a Qwen2Config), vit_config.json (a SiglipVisionConfig), ae.safetensors; no model_index.json. Only the file
    names matter here; the contents are the model_type each config class writes."""
    folder = tmp_path / "BAGEL-7B-MoT"
    folder.mkdir()
    (folder / "llm_config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (folder / "vit_config.json").write_text(json.dumps({"model_type": "siglip_vision_model"}))
    (folder / "ae.safetensors").write_bytes(b"")
    return folder


def _assert_bagel_refusal(stderr: str, where: str):
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"plan.py: error: {where}: BAGEL-7B-MoT is a unified autoregressive + flow-matching model")
    assert "Mixture-of-Transformers" in line and "not a diffusion transformer" in line
    assert "--model-file FILE.toml" in line and "thinker stage and a DiT stage" in line


@pytest.mark.parametrize("name", ["BAGEL-7B-MoT", "ByteDance-Seed/BAGEL-7B-MoT", "bagel"])
def test_bagel_by_name_is_refused_with_what_it_is(name):
    proc = run_script("plan.py", "--model", name, *BOX, check=2)
    _assert_bagel_refusal(proc.stderr, f"--model {name}")


def test_bagel_checkpoint_folder_and_its_llm_config_are_refused(tmp_path):
    folder = _bagel_folder(tmp_path)
    for path in (folder, folder / "llm_config.json"):
        proc = run_script("plan.py", "--model-config", str(path), *BOX, check=2)
        _assert_bagel_refusal(proc.stderr, str(path))


def test_bagel_config_json_is_refused(tmp_path):
    """vLLM-Omni resolves BAGEL by model_type 'bagel' or architectures BagelForConditionalGeneration
    (vllm-project/vllm-omni:vllm_omni/config/stage_config.py, StageConfigFactory.ARCH_MAPPING)."""
    for data in ({"model_type": "bagel"}, {"architectures": ["BagelForConditionalGeneration"]}):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(data))
        proc = run_script("plan.py", "--model-config", str(path), *BOX, check=2)
        _assert_bagel_refusal(proc.stderr, str(path))


def test_a_diffusers_folder_holding_an_llm_config_is_not_bagel(tmp_path):
    folder = tmp_path / "flux"
    shutil.copytree(FLUX, folder)
    (folder / "llm_config.json").write_text("{}")
    (folder / "vit_config.json").write_text("{}")
    doc, _ = _plan("--model-config", str(folder))
    assert doc["plans"]


def test_unet_pipeline_folder_is_refused(tmp_path):
    (tmp_path / "model_index.json").write_text(json.dumps({
        "_class_name": "StableDiffusionPipeline", "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"]}))
    proc = run_script("plan.py", "--model-config", str(tmp_path), *BOX, check=2)
    assert "UNet2DConditionModel" in proc.stderr and "not a diffusion transformer" in proc.stderr


def test_unknown_class_read_from_generic_keys_with_guesses_warned(tmp_path):
    folder = tmp_path / "my-dit"
    shutil.copytree(WAN, folder)
    cfg = folder / "transformer" / "config.json"
    data = json.loads(cfg.read_text())
    data["_class_name"] = "MyVideoTransformer3DModel"
    del data["ffn_dim"]
    cfg.write_text(json.dumps(data))
    got, err = _plan("--model-config", str(folder))
    fields = got["model_fields"]
    assert (fields["heads"], fields["head_dim"], fields["blocks"]) == (40, 128, {"cross": 40})
    assert fields["ffn"] == 4 * 5120 and fields["family"] == "custom"
    assert "MyVideoTransformer3DModel" in err and "guessed" in err
    for guess in ("ffn", "text tokens", "cfg_default"):
        assert guess in err


def test_only_one_model_source():
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--model-config", str(FLUX), *BOX, check=2)
    assert "--model-config" in proc.stderr


def test_no_such_path():
    proc = run_script("plan.py", "--model-config", str(DATA / "nothing-here"), *BOX, check=2)
    assert "no such file or folder" in proc.stderr


def test_broken_json_is_one_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"_class_name": "FluxTransformer2DModel", ')
    proc = run_script("plan.py", "--model-config", str(bad), *BOX, check=2)
    assert len(proc.stderr.strip().splitlines()) == 1 and "not valid JSON" in proc.stderr


def test_score_and_evaluate_take_a_config_path_in_the_model_cell(tmp_path):
    src = ROOT / "benchmarks" / "published" / "xdit_flux.csv"
    rows = list(csv.DictReader(src.open()))
    rows = [r for r in rows if r["model"].startswith("FLUX.1-dev")][:6]
    assert rows
    plain, cfg = tmp_path / "preset.csv", tmp_path / "tables" / "config.csv"
    cfg.parent.mkdir()
    for path, model in ((plain, None), (cfg, str(FLUX))):
        with path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            for r in rows:
                w.writerow({**r, "model": model or r["model"]})
    outs = []
    for path in (plain, cfg):
        out = tmp_path / f"{path.stem}-scored.csv"
        run_script("plan.py", "score", "--candidates", str(path), "--out", str(out), check=0)
        outs.append(list(csv.DictReader(out.open())))
    for a, b in zip(*outs, strict=True):
        assert (a["predicted_latency_s"] == "") == (b["predicted_latency_s"] == "")
        if a["predicted_latency_s"]:
            assert float(b["predicted_latency_s"]) == pytest.approx(float(a["predicted_latency_s"]), rel=0.02)
    assert any(r["predicted_latency_s"] for r in outs[1])
    proc = run_script("plan.py", "evaluate", "--tables", str(cfg.parent), "--in-sample-only", "--json", check=0)
    assert json.loads(proc.stdout)["schema"] == "dit-parallel-opt/plan-evaluate/v1"


# every mapped class, from its diffusers __init__ defaults
# (huggingface/diffusers@58eb52c0803ea9af3abec60841c2a093bdf1f951:src/diffusers/models/transformers/<file>):
# the defaults are the released model a preset describes where one exists
CLASS_DEFAULTS = {
    "FluxTransformer2DModel": ({"patch_size": 1, "in_channels": 64, "num_layers": 19, "num_single_layers": 38,
                                "attention_head_dim": 128, "num_attention_heads": 24}, "flux1-dev"),
    "Flux2Transformer2DModel": ({"patch_size": 1, "in_channels": 128, "num_layers": 8, "num_single_layers": 48,
                                 "attention_head_dim": 128, "num_attention_heads": 48, "mlp_ratio": 3.0},
                                "flux2-dev"),
    "QwenImageTransformer2DModel": ({"patch_size": 2, "in_channels": 64, "num_layers": 60, "attention_head_dim": 128,
                                     "num_attention_heads": 24}, "qwen-image"),
    "WanTransformer3DModel": ({"patch_size": [1, 2, 2], "num_attention_heads": 40, "attention_head_dim": 128,
                               "in_channels": 16, "ffn_dim": 13824, "num_layers": 40}, "wan2.1-t2v-14b"),
    "HunyuanVideoTransformer3DModel": ({"in_channels": 16, "num_attention_heads": 24, "attention_head_dim": 128,
                                        "num_layers": 20, "num_single_layers": 40, "mlp_ratio": 4.0, "patch_size": 2,
                                        "patch_size_t": 1}, "hunyuanvideo"),
    "CogVideoXTransformer3DModel": ({"num_attention_heads": 30, "attention_head_dim": 64, "in_channels": 16,
                                     "num_layers": 30, "patch_size": 2, "max_text_seq_length": 226,
                                     "sample_width": 90, "sample_height": 60, "sample_frames": 49}, "cogvideox-2b"),
    "PixArtTransformer2DModel": ({"num_attention_heads": 16, "attention_head_dim": 72, "in_channels": 4,
                                  "num_layers": 28, "sample_size": 128, "patch_size": 2}, "pixart-sigma"),
    "SanaTransformer2DModel": ({"in_channels": 32, "num_attention_heads": 70, "attention_head_dim": 32,
                                "num_layers": 20, "mlp_ratio": 2.5, "patch_size": 1}, "sana-1600m-4k"),
    "SD3Transformer2DModel": ({"sample_size": 128, "patch_size": 2, "in_channels": 16, "num_layers": 24,
                               "attention_head_dim": 64, "num_attention_heads": 24}, "sd3-medium"),
    "WanVACETransformer3DModel": ({"patch_size": [1, 2, 2], "num_attention_heads": 40, "attention_head_dim": 128,
                                   "in_channels": 16, "ffn_dim": 13824, "num_layers": 40,
                                   "vace_layers": [0, 5, 10, 15, 20, 25, 30, 35]}, None),
    "SkyReelsV2Transformer3DModel": ({"patch_size": [1, 2, 2], "num_attention_heads": 16, "attention_head_dim": 128,
                                      "in_channels": 16, "ffn_dim": 8192, "num_layers": 32}, None),
    "HunyuanVideo15Transformer3DModel": ({"in_channels": 65, "num_attention_heads": 16, "attention_head_dim": 128,
                                          "num_layers": 54, "mlp_ratio": 4.0, "patch_size": 1, "patch_size_t": 1},
                                         None),
    "LTXVideoTransformer3DModel": ({"in_channels": 128, "patch_size": 1, "patch_size_t": 1, "num_attention_heads": 32,
                                    "attention_head_dim": 64, "num_layers": 28}, None),
    "CosmosTransformer3DModel": ({"in_channels": 16, "num_attention_heads": 32, "attention_head_dim": 128,
                                  "num_layers": 28, "mlp_ratio": 4.0, "patch_size": [1, 2, 2]}, None),
    "HiDreamImageTransformer2DModel": ({"in_channels": 64, "num_layers": 16, "num_single_layers": 32,
                                        "attention_head_dim": 128, "num_attention_heads": 20,
                                        "num_routed_experts": 4, "num_activated_experts": 2}, None),
    "ChromaTransformer2DModel": ({"patch_size": 1, "in_channels": 64, "num_layers": 19, "num_single_layers": 38,
                                  "attention_head_dim": 128, "num_attention_heads": 24}, None),
    "ZImageTransformer2DModel": ({"all_patch_size": [2], "all_f_patch_size": [1], "in_channels": 16, "dim": 3840,
                                  "n_layers": 30, "n_refiner_layers": 2, "n_heads": 30, "n_kv_heads": 30}, None),
}

# what a preset says that a transformer config alone cannot (the VAE's compression comes from vae/config.json)
KEYS = ("hidden", "heads", "kv_heads", "head_dim", "ffn", "blocks", "text_joint_tokens", "text_cross_tokens")


@pytest.mark.parametrize("cls", sorted(CLASS_DEFAULTS))
def test_every_mapped_class_reads_its_defaults(cls, tmp_path):
    from ditpar.plan.inputs import model_config

    keys, stem = CLASS_DEFAULTS[cls]
    path = tmp_path / "transformer" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"_class_name": cls, **keys}))
    notes: list[str] = []
    model = model_config.load(str(path), warn=notes.append)
    assert cls in model_config.CLASSES
    assert model.heads * model.head_dim == model.hidden
    assert model.n_layers > 0 and model.ffn > 0 and model.params_b > 0
    assert all("guessed" not in n for n in notes)       # a mapped class guesses nothing of the transformer
    if stem is None:
        return
    toml = _preset(stem)
    fields = model_config.fields(model)
    for key in KEYS:
        assert fields[key] == toml[key], (key, fields[key], toml[key])
    assert fields["patch"] == toml["patch"]
    assert fields["ffn_matrices"] == toml.get("ffn_matrices", 2)
    assert fields["attention"] == toml.get("attention", "softmax")
    assert fields["cfg_default"] == toml["cfg_default"]
    assert fields["params_b"] == pytest.approx(toml["params_b"], rel=0.25)


FLUX_T = (FLUX / "transformer" / "config.json").read_text()
DAMAGED = {
    "empty": b"",
    "truncated": FLUX_T[: len(FLUX_T) // 2].encode(),
    "nan": FLUX_T.replace('"num_layers": 19', '"num_layers": NaN').encode(),
    "huge-int": FLUX_T.replace('"num_layers": 19', '"num_layers": ' + "9" * 60).encode(),
    "heads-text": FLUX_T.replace('"num_attention_heads": 24', '"num_attention_heads": "24"').encode(),
    "heads-negative": FLUX_T.replace('"num_attention_heads": 24', '"num_attention_heads": -24').encode(),
    "layers-huge": FLUX_T.replace('"num_layers": 19', '"num_layers": 1000000').encode(),
    "list": b"[1, 2, 3]",
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "non-utf8": FLUX_T.encode()[:80] + b"\xff\xfe\x00",
    "kv-not-dividing": GQA.read_text().replace('"n_kv_heads": 4', '"n_kv_heads": 5').encode(),
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_damaged_config_is_one_line_exit_2(name, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_bytes(DAMAGED[name])
    proc = run_script("plan.py", "--model-config", str(cfg), *BOX, check=2)
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and len(lines) == 1 and str(cfg) in lines[0], proc.stderr


def test_a_folder_named_config_json_and_a_broken_model_index(tmp_path):
    (tmp_path / "config.json").mkdir()
    proc = run_script("plan.py", "--model-config", str(tmp_path / "config.json"), *BOX, check=2)
    assert len(proc.stderr.strip().splitlines()) == 1
    folder = tmp_path / "m"
    shutil.copytree(FLUX, folder)
    (folder / "model_index.json").write_text('{"transformer": ["diffusers"]}')
    proc = run_script("plan.py", "--model-config", str(folder), *BOX, check=2)
    assert len(proc.stderr.strip().splitlines()) == 1 and "model_index.json" in proc.stderr


CLIP_L = json.loads((FLUX / "text_encoder" / "config.json").read_text())
T5_XXL = json.loads((FLUX / "text_encoder_2" / "config.json").read_text())
# stabilityai/stable-diffusion-3-medium-diffusers text_encoder_2/config.json (OpenCLIP bigG text tower), main keys
CLIP_G = {"architectures": ["CLIPTextModelWithProjection"], "hidden_size": 1280, "intermediate_size": 5120,
          "num_attention_heads": 20, "num_hidden_layers": 32, "vocab_size": 49408, "max_position_embeddings": 77,
          "projection_dim": 1280, "model_type": "clip_text_model"}
# Qwen/Qwen-Image text_encoder/config.json (Qwen2.5-VL-7B-Instruct), the keys the estimate reads
QWEN_VL = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "hidden_size": 3584, "intermediate_size": 18944,
           "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064,
           "tie_word_embeddings": False, "model_type": "qwen2_5_vl",
           "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "out_hidden_size": 3584}}


def _folder(tmp_path, name: str, pipeline: str, transformer: dict, vae: dict, encoders: dict) -> str:
    root = tmp_path / name
    index = {"_class_name": pipeline, "transformer": ["diffusers", transformer["_class_name"]],
             "vae": ["diffusers", vae["_class_name"]]}
    for part, cfg in (("transformer", transformer), ("vae", vae), *encoders.items()):
        (root / part).mkdir(parents=True)
        (root / part / "config.json").write_text(json.dumps(cfg))
        if part.startswith("text_encoder"):
            index[part] = ["transformers", cfg["architectures"][0]]
    (root / "model_index.json").write_text(json.dumps(index))
    return str(root)


def test_sd3_medium_folder_with_three_text_encoders(tmp_path):
    """stabilityai/stable-diffusion-3-medium-diffusers: transformer, vae and its three text encoders."""
    folder = _folder(tmp_path, "stable-diffusion-3-medium", "StableDiffusion3Pipeline",
                     {"_class_name": "SD3Transformer2DModel", "attention_head_dim": 64, "caption_projection_dim": 1536,
                      "in_channels": 16, "joint_attention_dim": 4096, "num_attention_heads": 24, "num_layers": 24,
                      "out_channels": 16, "patch_size": 2, "pooled_projection_dim": 2048, "pos_embed_max_size": 192,
                      "sample_size": 128},
                     {"_class_name": "AutoencoderKL", "block_out_channels": [128, 256, 512, 512], "latent_channels": 16,
                      "layers_per_block": 2, "use_post_quant_conv": False, "use_quant_conv": False},
                     {"text_encoder": CLIP_L, "text_encoder_2": CLIP_G, "text_encoder_3": T5_XXL})
    got, err = _plan("--model-config", folder)
    want, _ = _plan("--model", "SD3-medium")
    toml = _preset("sd3-medium")
    assert got["model"] == "SD3-medium" and err == ""
    assert got["model_fields"]["text_encoder_params_b"] == pytest.approx(toml["text_encoder_params_b"], rel=0.02)
    lat = {(p["name"], p["framework"]): p["predicted_latency_s"] for p in want["plans"]}
    assert len(lat) == len(got["plans"])
    for p in got["plans"]:
        if p["predicted_latency_s"] is not None:
            assert p["predicted_latency_s"] == pytest.approx(lat[(p["name"], p["framework"])], rel=0.02)


def test_qwen_image_text_encoder_estimate():
    from ditpar.plan.inputs import model_config

    n, how = model_config._lm_params(QWEN_VL, ROOT / "config.json")
    assert n / 1e9 == pytest.approx(_preset("qwen-image")["text_encoder_params_b"], rel=0.02)
    assert "vision tower" in how


def test_help_example_runs_as_written():
    text = run_script("plan.py", "--help", check=0).stdout
    line = next(x.strip() for x in text.splitlines() if "--model-config tests/" in x)
    words = line.split()[2:]   # after "python scripts/plan.py"
    proc = run_script("plan.py", *words, "--json", check=0)
    assert json.loads(proc.stdout)["model"] == "FLUX.1-dev"
