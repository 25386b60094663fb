"""The one schema of model presets, hardware presets and --model-file files: every key, its type and range.

Each TOML file is checked against it before its figures are read: an unknown key or table is an
InputError that names it and the closest known key (a typo such as ``hbm_bandwith_GBps`` would
otherwise leave the real figure at its default of 0), a value of the wrong type or outside its range
is one too. Cross-key rules (kv_heads divides heads, ...) stay with the loaders. Documented key by key
in templates/PRESETS.md (section 5); ``schema_markdown()`` prints the ranges.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ditpar import limits
from ditpar.errors import InputError


@dataclass(frozen=True)
class Key:
    """One key: its type and, for numbers, the closed range [lo, hi] (``above``: lo itself excluded)."""

    kind: str                     # int, number, text, bool, int3, ints, texts, int_lists, choice, table
    lo: float | None = None
    hi: float | None = None
    above: bool = False           # the range is (lo, hi]
    choices: tuple[Any, ...] = ()
    table: Table | None = None
    required: bool = False

    def describe(self) -> str:
        """The type and range in words, as error messages and PRESETS.md print them."""
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind in ("int", "number"):
            what = "an integer" if self.kind == "int" else "a number"
            left = "(" if self.above else "["
            return f"{what} in {left}{_g(self.lo)}, {_g(self.hi)}]"
        if self.kind == "ints":
            return f"a non-empty list of integers in [{_g(self.lo)}, {_g(self.hi)}]"
        return {"text": "text", "bool": "true or false", "int3": "three positive integers [t, h, w]",
                "texts": "a list of non-empty texts", "int_lists": "a list of lists of integers",
                "table": "a table"}[self.kind]


@dataclass(frozen=True)
class Table:
    """The keys of one TOML table; ``free`` types the values of tables whose keys are names (sources)."""

    keys: Mapping[str, Key] = field(default_factory=dict)
    free: Key | None = None
    free_keys: str = ""           # what a free key must be: "" (any name) or "group" (an integer >= 3)


def _g(x: float | None) -> str:
    if x is None:
        return "inf"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _int(lo: float, hi: float, required: bool = True) -> Key:
    return Key("int", lo, hi, required=required)


def _pos(hi: float, required: bool = True) -> Key:
    """A positive figure: (0, hi]."""
    return Key("number", 0, hi, above=True, required=required)


TEXT = Key("text", required=True)
OPT_TEXT = Key("text")
SOURCES = Table(free=Key("text", required=True))  # free names, each a non-empty text
BLOCK_TYPES = tuple(f"{b}{s}" for b in ("joint", "single", "cross", "self") for s in ("", "_spatial", "_temporal"))
LINK_KEYS = ("intra_domain", "inter_domain", "inter_node")
VAE_DECODERS = ("autoencoderkl", "cogvideox", "hunyuanvideo", "wan", "dcae", "mochi", "stepvideo")

#: [vae] of a model preset: the decoder's structure as its config file gives it (plan/cost/serial.py prices it)
VAE = Table({
    "decoder": Key("choice", choices=VAE_DECODERS, required=True),
    "block_out_channels": Key("ints", 1, 1 << 16, required=True),
    "layers_per_block": Key("ints", 0, 64, required=True),
    "latent_channels": _int(1, 4096),
    "mid_attention": Key("bool", required=True),
    "post_quant_conv": Key("bool"),
    "residual_up": Key("bool"),
    "patch_size": _int(1, 16, False),
    "frame_batch": _int(0, 1 << 16, False),
    "frame_tile": _int(0, 1 << 16, False),
    "frame_tile_stride": _int(0, 1 << 16, False),
    "vit_stages": _int(0, 64, False),
    "tile_latent": Key("ints", 1, 1 << 16),
    "tile_latent_stride": Key("ints", 1, 1 << 16),
    "temporal_expansions": Key("ints", 1, 64),
    "dtype": Key("choice", choices=("bf16", "fp16", "fp32"), required=True),
    "notes": OPT_TEXT,
})

#: upper ends are far above any real model or machine (the largest shipped: 14B parameters, 16 dies,
#: 4.8 TB/s HBM, 900 GB/s NVLink); they catch units slips (MB/s, B) and typed-in exponents
MODEL = Table({
    "name": TEXT, "aliases": Key("texts"), "kind": Key("choice", choices=("image", "video"), required=True),
    "family": OPT_TEXT, "notes": OPT_TEXT,
    "params_b": _pos(10000), "text_encoder_params_b": _pos(1000, required=False),
    "experts": _int(1, 1024, False),
    "hidden": _int(1, 1 << 20), "heads": _int(1, 4096), "kv_heads": _int(1, 4096), "head_dim": _int(1, 4096),
    "attn_dim_equals_hidden": Key("bool"),
    "ffn": _int(1, 1 << 22), "ffn_matrices": Key("choice", choices=(2, 3)),
    "attention": Key("choice", choices=("softmax", "linear")), "text_hidden": _int(1, 1 << 20, False),
    "text_joint_tokens": _int(0, 1 << 20), "text_cross_tokens": _int(0, 1 << 20),
    "image_cross_tokens": _int(0, 1 << 20, False), "latent_channels": _int(1, 4096),
    "patch": Key("int3", required=True), "vae_stride": Key("int3", required=True),
    "vae_temporal_causal": Key("bool", required=True), "vae_frame_chunk": _int(0, 1 << 20, False),
    "cfg_default": Key("bool", required=True),
    "default_width": _int(1, 1 << 17), "default_height": _int(1, 1 << 17), "default_frames": _int(1, 1 << 20),
    "default_steps": _int(1, limits.MAX_STEPS), "long_skips": _int(0, 4096, False),
    "blocks": Key("table", table=Table({b: _int(1, limits.MAX_LAYERS, False) for b in BLOCK_TYPES}), required=True),
    "vae": Key("table", table=VAE),
    "sources": Key("table", table=SOURCES, required=True),
})

LINK = Table({
    "name": TEXT, "basis": OPT_TEXT,
    # what the figure rests on: a measurement of this class, a stated derivation, or another class's figure
    "evidence": Key("choice", choices=("measured", "derived", "other-class")),
    "bandwidth_GBps": _pos(10000), "latency_us": _pos(1e6),
    "per_peer_GBps": Key("number", 0, 10000), "ring_GBps": Key("number", 0, 10000),
    "alltoall_GBps": Key("table", table=Table(free=_pos(10000), free_keys="group")),
})

HARDWARE = Table({
    "name": TEXT, "aliases": Key("texts"), "notes": OPT_TEXT,
    "vendor": Key("choice", choices=("nvidia", "ascend"), required=True), "accelerator": TEXT,
    "interconnect": Key("choice", choices=("NVLink", "PCIe", "HCCS"), required=True),
    "p2p": Key("bool"), "pcie_layout": OPT_TEXT,
    "devices_per_node": _int(1, 1024), "nodes": _int(1, 1024, False), "domain_size": _int(1, 1024),
    "domains": Key("int_lists"),
    "peak_tflops_bf16": _pos(100000), "mfu": _pos(1), "memory_GB": _pos(100000),
    "hbm_bandwidth_GBps": _pos(100000, required=False),
    "links": Key("table", table=Table({k: Key("table", table=LINK, required=k == "intra_domain")
                                       for k in LINK_KEYS}), required=True),
    "sources": Key("table", table=SOURCES, required=True),
})

#: --model-file (templates/models/custom-example.toml): the minimal in-house description
CUSTOM_MODEL = Table({
    "name": TEXT, "family": OPT_TEXT, "notes": OPT_TEXT,
    # sizes carry the bounds their plan.py flags have (ditpar/limits.py: --heads, --layers, --tokens, --steps)
    "heads": _int(1, limits.MAX_HEADS), "kv_heads": _int(1, limits.MAX_HEADS), "head_dim": _int(1, 4096),
    "layers": _int(1, limits.MAX_LAYERS),
    "hidden": _int(1, 1 << 20), "ffn": _int(1, 1 << 22), "text_tokens": _int(0, 1 << 20),
    "cfg": Key("bool", required=True),
    "tokens": _int(1, limits.MAX_TOKENS, False), "latent": Key("int3"), "patch": Key("int3"),
    "text_attention": Key("choice", choices=("cross", "joint")), "ffn_matrices": Key("choice", choices=(2, 3)),
    "latent_channels": _int(1, 4096, False), "steps": _int(1, limits.MAX_STEPS, False), "experts": _int(1, 1024, False),
    "params_b": _pos(10000, required=False), "text_encoder_params_b": _pos(1000, required=False),
})


def check(data: Mapping[str, Any], table: Table, path: Path | str, where: str = "") -> None:
    """Every key of ``data`` known and of its type and range, every required key present (InputError)."""
    known = list(table.keys)
    for key, value in data.items():
        name = f"{where}{key}"
        spec = table.keys.get(key)
        if spec is None and table.free is not None:
            if table.free_keys == "group" and not (str(key).isdigit() and int(key) >= 3):
                raise InputError(f"{path}: key '{name}' must be a group size (an integer >= 3)")
            spec = table.free
        if spec is None:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f"; did you mean '{where}{close[0]}'?" if close else f"; known: {', '.join(known)}"
            what = "table" if isinstance(value, dict) else "key"
            raise InputError(f"{path}: unknown {what} '{name}'{hint}")
        check_value(value, spec, path, name)
    for key, spec in table.keys.items():
        if spec.required and key not in data:
            raise InputError(f"{path}: missing key '{where}{key}' ({spec.describe()})")


def check_value(value: Any, spec: Key, path: Path | str, name: str) -> None:
    """One value against its key's type and range (also --set overrides); InputError naming the key."""
    def bad() -> InputError:
        return InputError(f"{path}: key '{name}' must be {spec.describe()}, got {value!r}")

    kind = spec.kind
    if kind == "table":
        if not isinstance(value, dict):
            raise bad()
        check(value, spec.table or Table(), path, f"{name}.")
    elif kind == "choice":
        if isinstance(value, bool) or value not in spec.choices:
            raise bad()
    elif kind in ("int", "number"):
        ok_type = (int,) if kind == "int" else (int, float)
        if isinstance(value, bool) or not isinstance(value, ok_type) or not math.isfinite(value):
            raise bad()
        if spec.lo is not None and (value < spec.lo or (spec.above and value == spec.lo)):
            raise bad()
        if spec.hi is not None and value > spec.hi:
            raise bad()
    elif kind == "text":
        if not isinstance(value, str) or (spec.required and not value.strip()):
            raise bad()
    elif kind == "bool":
        if not isinstance(value, bool):
            raise bad()
    elif kind == "int3":
        if not (isinstance(value, list) and len(value) == 3
                and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 20 for v in value)):
            raise bad()
    elif kind == "ints":
        if not (isinstance(value, list) and value and all(
                isinstance(x, int) and not isinstance(x, bool) and spec.lo <= x <= spec.hi for x in value)):
            raise bad()
    elif kind == "texts":
        if not (isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)):
            raise bad()
    elif kind == "int_lists":
        if not (isinstance(value, list) and all(isinstance(d, list) and all(
                isinstance(x, int) and not isinstance(x, bool) for x in d) for d in value)):
            raise bad()
    else:  # pragma: no cover - a schema entry of an unknown kind is a bug here
        raise AssertionError(kind)


def schema_markdown(table: Table, where: str = "") -> list[str]:
    """Rows `| key | type and range | required |` of a table and its sub-tables (PRESETS.md section 5)."""
    rows = []
    for key, spec in table.keys.items():
        if spec.kind == "table" and spec.table is not None and (spec.table.keys or spec.table.free):
            if spec.table.free is not None:
                what = "group size >= 3" if spec.table.free_keys == "group" else "any name"
                rows.append(f"| `{where}{key}.<{what}>` | {spec.table.free.describe()} | "
                            f"{'yes' if spec.required else 'no'} |")
            rows += schema_markdown(spec.table, f"{where}{key}.")
        else:
            rows.append(f"| `{where}{key}` | {spec.describe()} | {'yes' if spec.required else 'no'} |")
    return rows


def schema_tables_markdown() -> str:
    """The three schema tables of templates/PRESETS.md section 5 (tests/test_preset_schema.py compares)."""
    out = []
    for title, table in (("Model presets (templates/models/*.toml)", MODEL),
                         ("Hardware presets (templates/hardware/*.toml)", HARDWARE),
                         ("In-house model files (plan.py --model-file)", CUSTOM_MODEL)):
        out += [f"{title}:", "", "| key | type and range | required |", "|---|---|---|",
                *schema_markdown(table), ""]
    return "\n".join(out).rstrip() + "\n"
