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

from ditpar import formats, limits
from ditpar.errors import InputError


@dataclass(frozen=True)
class Key:
    """One key: its type and, for numbers, the closed range [lo, hi] (``above``: lo itself excluded)."""

    kind: str                     # int, number, text, bool, int3, ints, texts, int_lists, choice, table
    lo: float | None = None
    hi: float | None = None
    above: bool = False           # the range is (lo, hi]
    zero: bool = False            # 0 also allowed, meaning "not given" (per_peer_GBps, ring_GBps)
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
            return f"{'0 (not given) or ' if self.zero else ''}{what} in {left}{_g(self.lo)}, {_g(self.hi)}]"
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


def _fig(lo: float, hi: float, required: bool = True, zero: bool = False) -> Key:
    """A physical figure in [lo, hi]: both ends state what no real machine or stack is below or above, so a
    unit slip or a typed exponent (1e-300 TFLOPS, 1e300 us) is refused here and no product of figures can
    overflow to inf or vanish to 0 in the cost model (a time that is not finite is never printed)."""
    return Key("number", lo, hi, required=required, zero=zero)


# Ranges of the machine figures, each with its reason (PRESETS.md section 5 prints them):
#: a link's bandwidth: 10 MB/s (below any interconnect a DiT is spread over, Ethernet 1 GbE is 0.12 GB/s)
#: .. 10,000 GB/s (above NVLink 5's 900 GB/s and any fabric in sight; a figure in MB/s lands above it)
LINK_GBPS = (0.01, 10000)
#: a collective's per-call latency: 10 ns (below one kernel launch) .. 1 s (above any link's alpha; a slip of us/ns)
LATENCY_US = (0.01, 1e6)
#: dense bf16 peak: 0.1 TFLOPS (below a CPU socket; a figure in PFLOPS lands under it) .. 100,000 (a GB200 has 2,500)
PEAK_TFLOPS = (0.1, 100000)
#: share of the peak large GEMMs reach: 1 % (below it nothing runs on the tensor cores; 40 % typed as 0.004) .. 1
MFU = (0.01, 1)
#: device memory: 1 GB (no accelerator that holds a DiT has less; MB typed as GB) .. 100,000 GB
MEMORY_GB = (1, 100000)
#: device memory bandwidth: 1 GB/s (below any accelerator's DRAM; a CPU channel has 20) .. 100,000 GB/s
HBM_GBPS = (1, 100000)
#: host time per op: 0 (a captured graph) .. 100,000 us (0.1 s per op: above any eager stack; a figure in ns?)
LAUNCH_US = (0, 100000)


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
    "token_experts": _int(1, 1024, False),   # routed experts of a per-token MoE FFN (HiDream: 4); absent = dense
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
    "bandwidth_GBps": _fig(*LINK_GBPS), "latency_us": _fig(*LATENCY_US),
    "per_peer_GBps": _fig(*LINK_GBPS, required=False, zero=True),
    "ring_GBps": _fig(*LINK_GBPS, required=False, zero=True),
    "alltoall_GBps": Key("table", table=Table(free=_fig(*LINK_GBPS), free_keys="group")),
})

HARDWARE = Table({
    "name": TEXT, "aliases": Key("texts"), "notes": OPT_TEXT,
    "vendor": Key("choice", choices=("nvidia", "ascend", "amd"), required=True), "accelerator": TEXT,
    "interconnect": Key("choice", choices=("NVLink", "PCIe", "HCCS", "Infinity Fabric"), required=True),
    "p2p": Key("bool"), "pcie_layout": OPT_TEXT,
    "devices_per_node": _int(1, 1024), "nodes": _int(1, 1024, False), "domain_size": _int(1, 1024),
    "domains": Key("int_lists"),
    "peak_tflops_bf16": _fig(*PEAK_TFLOPS), "mfu": _fig(*MFU), "memory_GB": _fig(*MEMORY_GB),
    "hbm_bandwidth_GBps": _fig(*HBM_GBPS, required=False),
    "links": Key("table", table=Table({k: Key("table", table=LINK, required=k == "intra_domain")
                                       for k in LINK_KEYS}), required=True),
    "sources": Key("table", table=SOURCES, required=True),
})

#: the cost model's knobs plan.py --set changes (and --launch-us): ranges with their reasons above
TUNABLES = Table({"launch_us": _fig(*LAUNCH_US), "overlap_efficiency": _fig(0, 1)})

#: --model-file (templates/models/custom-example.toml): the minimal in-house description
CUSTOM_MODEL = Table({
    "name": TEXT, "family": OPT_TEXT, "notes": OPT_TEXT,
    # sizes carry the bounds their plan.py flags have (ditpar/limits.py: --heads, --layers, --tokens, --steps)
    "heads": _int(1, limits.MAX_HEADS), "kv_heads": _int(1, limits.MAX_HEADS), "head_dim": _int(1, 4096),
    "layers": _int(1, limits.MAX_LAYERS),
    # estimated when left out (custom_model.ESTIMATES): hidden = heads x head_dim, ffn = 4 x hidden, 512 text tokens
    "hidden": _int(1, 1 << 20, False), "ffn": _int(1, 1 << 22, False), "text_tokens": _int(0, 1 << 20, False),
    "cfg": Key("bool", required=True),
    "tokens": _int(1, limits.MAX_TOKENS, False), "latent": Key("int3"), "patch": Key("int3"),
    "text_attention": Key("choice", choices=("cross", "joint")), "ffn_matrices": Key("choice", choices=(2, 3)),
    # self-attention kind: softmax (default) or linear (SANA-style ReLU linear attention; its sequence-parallel form
    # all-reduces a per-head state and needs no head split: plan/cost/linear_attention.py)
    "attention": Key("choice", choices=("softmax", "linear")),
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
            if table.free_keys == "group" and not (str(key).isdigit() and len(str(key)) <= 4
                                                  and 3 <= int(key) <= limits.MAX_DEVICES):
                raise InputError(f"{path}: key '{name}' must be a group size (an integer >= 3) of at most "
                                   f"{limits.MAX_DEVICES} devices")
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
        if spec.zero and value == 0:
            return
        if spec.lo is not None and (value < spec.lo or (spec.above and value == spec.lo)):
            raise bad()
        if spec.hi is not None and value > spec.hi:
            raise bad()
    elif kind == "text":
        if not isinstance(value, str) or (spec.required and not value.strip()):
            raise bad()
        formats.check_text(value, f"{path}: key '{name}'", one_line=name.rsplit(".", 1)[-1] == "name")
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
        for i, v in enumerate(value):
            formats.check_text(v, f"{path}: key '{name}[{i}]'", one_line=name.rsplit(".", 1)[-1] == "aliases")
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
