"""The one schema of presets and --model-file files (issue 22): unknown keys named with the closest known
one, types and ranges, every shipped file valid, and PRESETS.md section 5 generated from it."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, run_script
from ditpar.errors import InputError
from ditpar.plan.inputs import custom_model, presets, schema

TEMPLATES = ROOT / "templates"


@pytest.mark.parametrize("path", sorted((TEMPLATES / "models").glob("*.toml")) + sorted(
    (TEMPLATES / "hardware").glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_file_passes_the_schema(path):
    data = presets._read_toml(path)
    if path.stem.startswith("custom-"):
        schema.check(data, schema.CUSTOM_MODEL, path)
        custom_model.load(str(path))
    elif path.parent.name == "models":
        schema.check(data, schema.MODEL, path)
    else:
        schema.check(data, schema.HARDWARE, path)


def test_presets_md_holds_the_generated_schema_tables():
    text = (TEMPLATES / "PRESETS.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- schema:begin -->\n(.*?)<!-- schema:end -->", text, re.S)
    assert m and m.group(1) == schema.schema_tables_markdown()


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _hw_text(old, new):
    text = (TEMPLATES / "hardware" / "a100-pcie.toml").read_text(encoding="utf-8")
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize("old, new, phrase", [
    ("hbm_bandwidth_GBps = 1935.0", "hbm_bandwith_GBps = 1935.0",
     "unknown key 'hbm_bandwith_GBps'; did you mean 'hbm_bandwidth_GBps'?"),
    ("[links.inter_node]", "[links.inter_nodes]", "unknown table 'links.inter_nodes'; did you mean 'links.inter_node'?"),
    ("latency_us = 40.0", "latency_usec = 40.0", "unknown key 'links.intra_domain.latency_usec'; did you mean "
                                                 "'links.intra_domain.latency_us'?"),
    ("hbm_bandwidth_GBps = 1935.0", "hbm_bandwidth_GBps = 0", "key 'hbm_bandwidth_GBps' must be a number in [1, 100000]"),
    ("memory_GB = 80.0", "memory_GB = 8e10", "key 'memory_GB' must be a number in [1, 100000], got 80000000000.0"),
    ("devices_per_node = 8", "devices_per_node = 8.5", "key 'devices_per_node' must be an integer in [1, 1024]"),
    ("bandwidth_GBps = 24.0", "bandwidth_GBps = 24000.0", "must be a number in [0.01, 10000], got 24000.0"),
])
def test_hardware_file_outside_the_schema_is_refused(tmp_path, old, new, phrase):
    path = _write(tmp_path, "box.toml", _hw_text(old, new))
    with pytest.raises(InputError) as err:
        presets.resolve_hardware(path)
    assert str(err.value).startswith(path) and phrase in str(err.value)


def _wan_text(old, new):
    text = (TEMPLATES / "models" / "wan2.1-t2v-14b.toml").read_text(encoding="utf-8")
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize("old, new, phrase", [
    ("params_b = 14.0", "params_b = -14.0", "key 'params_b' must be a number in (0, 10000], got -14.0"),
    ("params_b = 14.0", "params_b = 0", "key 'params_b' must be a number in (0, 10000], got 0"),
    ("text_encoder_params_b = 5.68", "text_encoder_params_b = 0", "key 'text_encoder_params_b' must be a number in "
                                                                 "(0, 1000], got 0"),
    ("text_encoder_params_b = 5.68", "text_encoder_params_b = -5.68", "got -5.68"),
    ("text_cross_tokens = 512", "text_cros_tokens = 512", "did you mean 'text_cross_tokens'?"),
    ("[blocks]", "[block]", "unknown table 'block'; did you mean 'blocks'?"),
    ("kind = \"video\"", "kind = \"movie\"", "key 'kind' must be one of 'image', 'video', got 'movie'"),
    ("cfg_default = true", "cfg_default = 1", "key 'cfg_default' must be true or false, got 1"),
])
def test_model_preset_outside_the_schema_is_refused(tmp_path, old, new, phrase):
    path = _write(tmp_path, "m.toml", _wan_text(old, new))
    with pytest.raises(InputError) as err:
        presets.resolve_model(path)
    assert phrase in str(err.value)


CUSTOM = (TEMPLATES / "models" / "custom-example.toml").read_text(encoding="utf-8")


@pytest.mark.parametrize("extra, phrase", [
    ('text_atention = "joint"', "unknown key 'text_atention'; did you mean 'text_attention'?"),
    ("params_b = -3.0", "key 'params_b' must be a number in (0, 10000], got -3.0"),
    ("params_b = 0", "key 'params_b' must be a number in (0, 10000], got 0"),
    ("text_encoder_params_b = 0", "key 'text_encoder_params_b' must be a number in (0, 1000], got 0"),
    ('params_b = "14B"', "key 'params_b' must be a number in (0, 10000], got '14B'"),
    ("[extras]\nx = 1", "unknown table 'extras'"),
    ('text_attention = "jiont"', "key 'text_attention' must be one of 'cross', 'joint', got 'jiont'"),
])
def test_model_file_outside_the_schema_is_refused(tmp_path, extra, phrase):
    path = _write(tmp_path, "mine.toml", CUSTOM.replace("cfg = true", f"cfg = true\n{extra}")
                  if not extra.startswith("[") else CUSTOM + "\n" + extra + "\n")
    with pytest.raises(InputError) as err:
        custom_model.load(path)
    assert phrase in str(err.value)


def test_misspelled_key_no_longer_changes_the_plan_silently(tmp_path):
    """The typo used to leave text_attention at 'cross' and exit 0 with another plan."""
    path = _write(tmp_path, "mine.toml", CUSTOM.replace("cfg = true", 'cfg = true\ntext_atention = "joint"'))
    r = run_script("plan.py", "--model-file", path, "--hardware", "H100", "--devices", "8", check=2)
    assert r.stderr.count("\n") == 1 and "did you mean 'text_attention'?" in r.stderr


def test_key_descriptions():
    assert schema.Key("number", 0, 1, above=True).describe() == "a number in (0, 1]"
    assert schema.Key("int", 0, 1 << 20).describe() == "an integer in [0, 1048576]"
    assert schema.Key("choice", choices=(2, 3)).describe() == "one of 2, 3"


def test_link_figure_above_its_technology_ceiling_is_refused(tmp_path):
    """900 GB/s on a PCIe Gen4 link (MB/s of a 0.9 GB/s figure?) is above 2 x 31.5 GB/s."""
    path = _write(tmp_path, "box.toml", _hw_text("bandwidth_GBps = 24.0", "bandwidth_GBps = 900.0"))
    with pytest.raises(InputError, match=r"links.intra_domain.bandwidth_GBps = 900 is above 63 GB/s"):
        presets.resolve_hardware(path)


@pytest.mark.parametrize("item, phrase", [
    ("links.intra_domain.bandwidth_GBps=1e300", "must be a number in [0.01, 10000], got 1e+300"),
    ("mfu=2", "key 'mfu' must be a number in [0.01, 1], got 2.0"),
    ("hbm_bandwidth_GBps=5e6", "key 'hbm_bandwidth_GBps' must be a number in [1, 100000]"),
    ("links.intra_domain.alltoall_GBps.4=20000", "must be a number in [0.01, 10000]"),
])
def test_set_overrides_obey_the_schema_ranges(item, phrase):
    from ditpar.plan.cost import Tunables
    from ditpar.plan.inputs.calibration import apply_sets

    with pytest.raises(InputError) as err:
        apply_sets([item], presets.load_hardware("L20"), Tunables())
    assert phrase in str(err.value)
