"""Model and hardware presets: load the TOML files under templates/ and resolve names and aliases.

Names match case-, space- and punctuation-insensitively; an unknown name is an InputError that
lists the known names, and an inconsistent TOML file is an InputError naming the file and key.
The schema is documented field by field in templates/PRESETS.md.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ditpar.errors import InputError

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TEMPLATES_ENV = "DITPAR_TEMPLATES"
BLOCK_BASES = ("joint", "single", "cross", "self")
BLOCK_SPANS = ("spatial", "temporal")
BLOCK_TYPES = BLOCK_BASES + tuple(f"{b}_{s}" for b in BLOCK_BASES for s in BLOCK_SPANS)
LINK_KEYS = ("intra_domain", "inter_domain", "inter_node")
INTERCONNECTS = {"nvlink": "NVLink", "pcie": "PCIe", "hccs": "HCCS"}


def templates_dir() -> Path:
    """Folder holding models/ and hardware/: $DITPAR_TEMPLATES, else the checkout's templates/."""
    env = os.environ.get(TEMPLATES_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[4] / "templates"   # repo/scripts/ditpar/plan/inputs


def normalize(name: str) -> str:
    """Matching key of a name: lower case, letters and digits only ('FLUX.1-dev' -> 'flux1dev')."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


# --------------------------------------------------------------------------------------------
# dataclasses


@dataclass(frozen=True)
class ModelPreset:
    """One diffusion transformer: layer counts by block type, widths, token counts, defaults."""

    name: str
    aliases: tuple[str, ...]
    kind: str
    params_b: float
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    blocks: dict[str, int]
    text_joint_tokens: int
    text_cross_tokens: int
    latent_channels: int
    patch: tuple[int, int, int]
    vae_stride: tuple[int, int, int]
    vae_temporal_causal: bool
    cfg_default: bool
    default_width: int
    default_height: int
    default_frames: int
    default_steps: int
    sources: dict[str, str]
    attention: str = "softmax"
    text_hidden: int = 0
    image_cross_tokens: int = 0
    experts: int = 1
    ffn_matrices: int = 2
    long_skips: int = 0
    vae_frame_chunk: int = 0
    notes: str = ""
    path: str = ""
    family: str = ""                  # model family for framework profiles ('' = from the name)
    text_encoder_params_b: float = 0.0  # text encoder(s) resident on each rank unless offloaded (0 = unknown)

    @property
    def n_layers(self) -> int:
        """Total transformer blocks of all types."""
        return sum(self.blocks.values())

    def latent_frames(self, frames: int) -> int:
        """Latent frames the VAE makes of `frames` input frames (1 for an image)."""
        st = self.vae_stride[0]
        if frames <= 1 or st == 1:
            return max(1, frames)
        if self.vae_frame_chunk:
            # The VAE encodes whole chunks of frames, each on its own (Step-Video: 17 frames -> 3).
            chunk = self.vae_frame_chunk
            per = 1 + (chunk - 1) // st if self.vae_temporal_causal else chunk // st
            return max(1, frames // chunk) * per
        return 1 + (frames - 1) // st if self.vae_temporal_causal else frames // st

    def visual_grid(self, width: int, height: int, frames: int = 1) -> tuple[int, int, int]:
        """Token grid (t, h, w) after the VAE and the patch embedding (ceil for a partial patch)."""
        pt, ph, pw = self.patch
        _, sh, sw = self.vae_stride
        return (math.ceil(self.latent_frames(frames) / pt), math.ceil(height / sh / ph),
                math.ceil(width / sw / pw))

    def visual_tokens(self, width: int, height: int, frames: int = 1) -> int:
        """Visual tokens of one sample: the product of visual_grid."""
        t, h, w = self.visual_grid(width, height, frames)
        return t * h * w

    @property
    def default_visual_tokens(self) -> int:
        """Visual tokens at the preset's default width, height and frames."""
        return self.visual_tokens(self.default_width, self.default_height, self.default_frames)


@dataclass(frozen=True)
class LinkClass:
    """A class of device-to-device links: effective bus bandwidth per rank and per-call latency."""

    name: str
    bandwidth_GBps: float
    latency_us: float
    basis: str = ""
    per_peer_GBps: float = 0.0
    ring_GBps: float = 0.0                                # measured busbw of the ring pattern (all ranks
                                                          # send to one neighbour at once); 0 = not measured
    alltoall_GBps: tuple[tuple[int, float], ...] = ()     # measured all-to-all busbw by group size (> 2)
    evidence: str = "derived"   # measured (this hardware class) | derived (physics x a measured efficiency, or
                                # a vendor/NCCL model) | other-class (a figure measured on another device):
                                # decides how far the band moves this class's exposed comm (uncertainty.py)

    def alltoall_bus_GBps(self, group_size: int) -> float:
        """All-to-all busbw for a group of this size: the entry of the largest listed size not above it
        (templates/PRESETS.md: a 4-card figure is not applied to a 3-card group); 0 when none applies or
        the group is a pair (then the link bandwidth with its flow sharing prices it)."""
        if not self.alltoall_GBps or group_size <= 2:
            return 0.0
        below = [bw for k, bw in self.alltoall_GBps if k <= group_size]
        return below[-1] if below else 0.0

    def bus_bandwidth_GBps(self, group_size: int) -> float:
        """Bus bandwidth of a group of this size: full-mesh links cap it at (k-1) * per_peer_GBps."""
        if self.per_peer_GBps > 0 and group_size > 1:
            return min(self.bandwidth_GBps, (group_size - 1) * self.per_peer_GBps)
        return self.bandwidth_GBps


@dataclass(frozen=True)
class HardwarePreset:
    """One machine type: accelerator figures, and topology as domains joined by link classes."""

    name: str
    aliases: tuple[str, ...]
    vendor: str
    accelerator: str
    interconnect: str
    devices_per_node: int
    nodes: int
    peak_tflops_bf16: float
    mfu: float
    memory_GB: float
    domain_size: int
    links: dict[str, LinkClass]
    sources: dict[str, str]
    hbm_bandwidth_GBps: float = 0.0
    domains: tuple[tuple[int, ...], ...] = ()
    notes: str = ""
    path: str = ""
    p2p: bool = True            # device-to-device copies inside a domain go peer to peer (PCIe boxes: false when
                                # the driver or platform disables P2P and NCCL bounces through host memory)
    pcie_layout: str = ""       # how the cards hang off PCIe switches and CPU sockets (PCIe presets)

    @property
    def n_devices(self) -> int:
        """Devices in the whole machine (all nodes)."""
        return self.devices_per_node * self.nodes

    @property
    def domains_per_node(self) -> int:
        """Fast domains inside one node."""
        return self.devices_per_node // self.domain_size

    def node_of(self, rank: int) -> int:
        """Node that holds a global rank (ranks fill node 0 first)."""
        self._check_rank(rank)
        return rank // self.devices_per_node

    def domain_of(self, rank: int) -> int:
        """Global index of the fast domain that holds a rank."""
        self._check_rank(rank)
        node, local = divmod(rank, self.devices_per_node)
        if self.domains:
            index = next(i for i, d in enumerate(self.domains) if local in d)
        else:
            index = local // self.domain_size
        return node * self.domains_per_node + index

    def class_for(self, group_ranks: Iterable[int]) -> str:
        """Slowest link class a group of global ranks crosses: a key of `links`."""
        ranks = list(group_ranks)
        if not ranks:
            raise InputError(f"{self.name}: empty rank group")
        if len({self.node_of(r) for r in ranks}) > 1:
            return "inter_node"
        if len({self.domain_of(r) for r in ranks}) > 1:
            return "inter_domain"
        return "intra_domain"

    def link_for(self, group_ranks: Iterable[int]) -> LinkClass:
        """LinkClass of the slowest class a group of global ranks crosses."""
        key = self.class_for(group_ranks)
        if key not in self.links:
            raise InputError(f"{self.path or self.name}: links.{key} is needed for this group but not given")
        return self.links[key]

    def with_nodes(self, n: int) -> HardwarePreset:
        """The same machine type with n nodes (needs links.inter_node when n > 1)."""
        if not isinstance(n, int) or n < 1:
            raise InputError(f"{self.name}: nodes must be a positive integer, got {n!r}")
        if n > 1 and "inter_node" not in self.links:
            raise InputError(f"{self.path or self.name}: no links.inter_node, so it cannot span {n} nodes")
        return replace(self, nodes=n)

    def with_devices_per_node(self, k: int) -> HardwarePreset:
        """The same machine using only the first k devices of each node (domains shrink to fit)."""
        if k < 1 or k > self.devices_per_node:
            raise InputError(f"{self.name}: devices per node must be 1..{self.devices_per_node}, got {k}")
        if self.domains:
            kept = tuple(t for t in (tuple(d for d in dom if d < k) for dom in self.domains) if t)
            if len({len(t) for t in kept}) != 1:
                raise InputError(f"{self.name}: the first {k} devices fill the domains unevenly: {kept}")
            return replace(self, devices_per_node=k, domain_size=len(kept[0]),
                           domains=kept if len(kept) > 1 else ())
        if k <= self.domain_size:
            return replace(self, devices_per_node=k, domain_size=k)
        if k % self.domain_size:
            raise InputError(f"{self.name}: {k} devices per node would split a {self.domain_size}-device "
                             f"domain unevenly; use a multiple of {self.domain_size}")
        return replace(self, devices_per_node=k)

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.n_devices:
            raise InputError(f"{self.name}: rank {rank} outside 0..{self.n_devices - 1}")


# --------------------------------------------------------------------------------------------
# TOML validation helpers


def _req(data: Mapping[str, Any], key: str, path: Path, kind: type | tuple[type, ...]) -> Any:
    if key not in data:
        raise InputError(f"{path}: missing key '{key}'")
    value = data[key]
    if kind in (int, float, (int, float)) and isinstance(value, bool):
        raise InputError(f"{path}: key '{key}' must be a number, got {value!r}")
    if not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise InputError(f"{path}: key '{key}' must be {want}, got {value!r}")
    return value


def _pos(data: Mapping[str, Any], key: str, path: Path, kind: type | tuple[type, ...] = int,
         default: Any = None, allow_zero: bool = False) -> Any:
    if key not in data and default is not None:
        return default
    value = _req(data, key, path, kind)
    if value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{path}: key '{key}' must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return value


def _triple(data: Mapping[str, Any], key: str, path: Path) -> tuple[int, int, int]:
    value = _req(data, key, path, list)
    if len(value) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise InputError(f"{path}: key '{key}' must be three positive integers [t, h, w], got {value!r}")
    return (value[0], value[1], value[2])


def _sources(data: Mapping[str, Any], path: Path) -> dict[str, str]:
    src = _req(data, "sources", path, dict)
    for k, v in src.items():
        if not isinstance(v, str) or not v.strip():
            raise InputError(f"{path}: sources.{k} must be a non-empty string (URL or repo@path)")
    return dict(src)


def _aliases(data: Mapping[str, Any], path: Path) -> tuple[str, ...]:
    al = data.get("aliases", [])
    if not isinstance(al, list) or not all(isinstance(a, str) and normalize(a) for a in al):
        raise InputError(f"{path}: key 'aliases' must be a list of non-empty strings")
    return tuple(al)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    _finite_everywhere(data, path, "")
    return data


def _finite_everywhere(value: Any, path: Path, key: str) -> None:
    """TOML allows inf and nan; no preset figure may be either (a peak of inf FLOPS predicts 0 s)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{path}: key '{key}' is {value!r}; expected a finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            _finite_everywhere(v, path, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _finite_everywhere(v, path, f"{key}[{i}]")


def _need_sources(sources: Mapping[str, str], keys: Iterable[str], path: Path) -> None:
    missing = [k for k in keys if k not in sources]
    if missing:
        raise InputError(f"{path}: sources has no entry for {', '.join(missing)} (every number carries its source)")


def parse_model(data: Mapping[str, Any], path: Path) -> ModelPreset:
    """Build and check a ModelPreset from one parsed TOML table."""
    name = _req(data, "name", path, str)
    kind = _req(data, "kind", path, str)
    if kind not in ("image", "video"):
        raise InputError(f"{path}: key 'kind' must be 'image' or 'video', got {kind!r}")
    hidden = _pos(data, "hidden", path)
    heads = _pos(data, "heads", path)
    kv_heads = _pos(data, "kv_heads", path)
    head_dim = _pos(data, "head_dim", path)
    if heads % kv_heads:
        raise InputError(f"{path}: key 'kv_heads' ({kv_heads}) must divide 'heads' ({heads})")
    if data.get("attn_dim_equals_hidden", True) and heads * head_dim != hidden:
        raise InputError(f"{path}: heads*head_dim = {heads}*{head_dim} = {heads * head_dim} differs from "
                         f"hidden = {hidden} (set attn_dim_equals_hidden = false if the model says so)")
    blocks_raw = _req(data, "blocks", path, dict)
    blocks: dict[str, int] = {}
    for k in blocks_raw:
        if k not in BLOCK_TYPES:
            raise InputError(f"{path}: blocks.{k} is not a block type; expected one of {', '.join(BLOCK_TYPES)}")
        blocks[k] = _pos(blocks_raw, k, path)
    if not blocks:
        raise InputError(f"{path}: key 'blocks' has no block counts")
    attention = data.get("attention", "softmax")
    if attention not in ("softmax", "linear"):
        raise InputError(f"{path}: key 'attention' must be 'softmax' or 'linear', got {attention!r}")
    ffn_matrices = _pos(data, "ffn_matrices", path, default=2)
    if ffn_matrices not in (2, 3):
        raise InputError(f"{path}: key 'ffn_matrices' must be 2 (plain MLP) or 3 (gated), got {ffn_matrices}")
    frames = _pos(data, "default_frames", path)
    if kind == "image" and frames != 1:
        raise InputError(f"{path}: key 'default_frames' must be 1 for an image model, got {frames}")
    cfg = _req(data, "cfg_default", path, bool)
    causal = _req(data, "vae_temporal_causal", path, bool)
    text_cross = _pos(data, "text_cross_tokens", path, allow_zero=True)
    if any(k.split("_")[0] == "cross" for k in blocks) and text_cross == 0:
        raise InputError(f"{path}: model has cross-attention blocks but text_cross_tokens is 0")
    sources = _sources(data, path)
    _need_sources(sources, ("hidden", "heads", "blocks", "ffn", "params_b"), path)
    preset = ModelPreset(
        name=name, aliases=_aliases(data, path), kind=kind,
        params_b=_pos(data, "params_b", path, (int, float)),
        hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        ffn=_pos(data, "ffn", path), blocks=blocks,
        text_joint_tokens=_pos(data, "text_joint_tokens", path, allow_zero=True),
        text_cross_tokens=text_cross,
        latent_channels=_pos(data, "latent_channels", path),
        patch=_triple(data, "patch", path), vae_stride=_triple(data, "vae_stride", path),
        vae_temporal_causal=causal, cfg_default=cfg,
        default_width=_pos(data, "default_width", path), default_height=_pos(data, "default_height", path),
        default_frames=frames, default_steps=_pos(data, "default_steps", path),
        sources=sources, attention=attention,
        text_hidden=_pos(data, "text_hidden", path, default=hidden),
        image_cross_tokens=_pos(data, "image_cross_tokens", path, allow_zero=True, default=0),
        experts=_pos(data, "experts", path, default=1), ffn_matrices=ffn_matrices,
        long_skips=_pos(data, "long_skips", path, allow_zero=True, default=0),
        vae_frame_chunk=_pos(data, "vae_frame_chunk", path, allow_zero=True, default=0),
        notes=data.get("notes", ""), path=str(path),
        family=str(data.get("family", "")),
        text_encoder_params_b=float(_pos(data, "text_encoder_params_b", path, (int, float), default=0.0,
                                         allow_zero=True)),
    )
    if kind == "image" and preset.vae_stride[0] != 1:
        raise InputError(f"{path}: key 'vae_stride' must start with 1 for an image model")
    return preset


def _link(data: Any, key: str, path: Path) -> LinkClass:
    if not isinstance(data, dict):
        raise InputError(f"{path}: links.{key} must be a table with name, bandwidth_GBps, latency_us")
    where = f"links.{key}"
    for k in ("name", "bandwidth_GBps", "latency_us"):
        if k not in data:
            raise InputError(f"{path}: {where} is missing '{k}'")
    bw, lat = data["bandwidth_GBps"], data["latency_us"]
    for k, v in (("bandwidth_GBps", bw), ("latency_us", lat)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise InputError(f"{path}: {where}.{k} must be a positive number, got {v!r}")
    peer, ring = (_optional_GBps(data, k, where, path) for k in ("per_peer_GBps", "ring_GBps"))
    evidence = data.get("evidence", "derived")
    if evidence not in EVIDENCE:
        raise InputError(f"{path}: {where}.evidence must be one of {', '.join(EVIDENCE)}, got {evidence!r}")
    return LinkClass(name=str(data["name"]), bandwidth_GBps=float(bw), latency_us=float(lat),
                     basis=str(data.get("basis", "")), per_peer_GBps=peer, ring_GBps=ring,
                     alltoall_GBps=_alltoall_table(data.get("alltoall_GBps", {}), where, path), evidence=evidence)


EVIDENCE = ("measured", "derived", "other-class")


def _optional_GBps(data: Mapping[str, Any], key: str, where: str, path: Path) -> float:
    """An optional bandwidth of a link class: a number >= 0, 0 when absent."""
    value = data.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InputError(f"{path}: {where}.{key} must be a number >= 0, got {value!r}")
    return float(value)


def _alltoall_table(data: Any, where: str, path: Path) -> tuple[tuple[int, float], ...]:
    """`alltoall_GBps = { 4 = 2.0, 8 = 1.0 }`: measured busbw by group size, sorted by size."""
    if not isinstance(data, dict):
        raise InputError(f"{path}: {where}.alltoall_GBps must be a table of group size = GB/s")
    out = []
    for k, v in data.items():
        if not str(k).isdigit() or int(k) < 3:
            raise InputError(f"{path}: {where}.alltoall_GBps key {k!r} must be a group size >= 3")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise InputError(f"{path}: {where}.alltoall_GBps.{k} must be a positive number, got {v!r}")
        out.append((int(k), float(v)))
    return tuple(sorted(out))


def parse_hardware(data: Mapping[str, Any], path: Path) -> HardwarePreset:
    """Build and check a HardwarePreset from one parsed TOML table."""
    name = _req(data, "name", path, str)
    vendor = _req(data, "vendor", path, str)
    if vendor not in ("nvidia", "ascend"):
        raise InputError(f"{path}: key 'vendor' must be 'nvidia' or 'ascend', got {vendor!r}")
    ic = _req(data, "interconnect", path, str)
    if ic not in INTERCONNECTS.values():
        raise InputError(f"{path}: key 'interconnect' must be one of {', '.join(INTERCONNECTS.values())}")
    dpn = _pos(data, "devices_per_node", path)
    dom = _pos(data, "domain_size", path)
    if dpn % dom:
        raise InputError(f"{path}: key 'domain_size' ({dom}) must divide 'devices_per_node' ({dpn})")
    mfu = _pos(data, "mfu", path, (int, float))
    if mfu > 1:
        raise InputError(f"{path}: key 'mfu' is a fraction in (0, 1], got {mfu}")
    links_raw = _req(data, "links", path, dict)
    for k in links_raw:
        if k not in LINK_KEYS:
            raise InputError(f"{path}: links.{k} is not a link key; expected {', '.join(LINK_KEYS)}")
    if "intra_domain" not in links_raw:
        raise InputError(f"{path}: missing links.intra_domain")
    links = {k: _link(v, k, path) for k, v in links_raw.items()}
    if "inter_domain" not in links:
        if dom != dpn:
            raise InputError(f"{path}: missing links.inter_domain (node has {dpn // dom} domains)")
        links["inter_domain"] = links["intra_domain"]
    nodes = _pos(data, "nodes", path, default=1)
    if nodes > 1 and "inter_node" not in links:
        raise InputError(f"{path}: nodes = {nodes} needs links.inter_node")
    sources = _sources(data, path)
    _need_sources(sources, ("peak_tflops_bf16", "mfu", "memory_GB", "intra_domain"), path)
    if dom != dpn:
        _need_sources(sources, ("inter_domain",), path)
    if "inter_node" in links:
        _need_sources(sources, ("inter_node",), path)
    for key, raw in links_raw.items():
        _need_sources(sources, [f"{key}_{m}" for m in ("ring", "alltoall") if f"{m}_GBps" in raw], path)
    domains = _domains(data, path, dpn, dom)
    return HardwarePreset(
        name=name, aliases=_aliases(data, path), vendor=vendor,
        accelerator=_req(data, "accelerator", path, str), interconnect=ic,
        devices_per_node=dpn, nodes=nodes,
        peak_tflops_bf16=float(_pos(data, "peak_tflops_bf16", path, (int, float))),
        mfu=float(mfu), memory_GB=float(_pos(data, "memory_GB", path, (int, float))),
        domain_size=dom, links=links, sources=sources,
        hbm_bandwidth_GBps=float(_pos(data, "hbm_bandwidth_GBps", path, (int, float), default=0.0,
                                      allow_zero=True)),
        domains=domains, notes=data.get("notes", ""), path=str(path),
        p2p=_bool(data, "p2p", path, True), pcie_layout=str(data.get("pcie_layout", "")),
    )


def _bool(data: Mapping[str, Any], key: str, path: Path, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise InputError(f"{path}: key '{key}' must be true or false, got {value!r}")
    return value


def _domains(data: Mapping[str, Any], path: Path, dpn: int, dom: int) -> tuple[tuple[int, ...], ...]:
    """Optional explicit domains (device ids per domain) for boxes whose domains are not contiguous."""
    raw = data.get("domains")
    if raw is None:
        return ()
    ok = isinstance(raw, list) and all(isinstance(d, list) and all(isinstance(x, int) and not isinstance(x, bool)
                                                                  for x in d) for d in raw)
    flat = sorted(x for d in raw for x in d) if ok else []
    if not ok or flat != list(range(dpn)) or any(len(d) != dom for d in raw):
        raise InputError(f"{path}: key 'domains' must split devices 0..{dpn - 1} into groups of "
                         f"domain_size = {dom}, got {raw!r}")
    return tuple(tuple(sorted(d)) for d in raw)


# --------------------------------------------------------------------------------------------
# registries


@dataclass
class _Registry:
    presets: dict[str, Any] = field(default_factory=dict)   # canonical name -> preset
    index: dict[str, str] = field(default_factory=dict)     # normalized alias -> canonical name


def _build(folder: Path, parse) -> _Registry:
    if not folder.is_dir():
        raise InputError(f"{folder}: preset folder not found (set {TEMPLATES_ENV} to the templates folder)")
    reg = _Registry()
    origin: dict[str, Path] = {}
    for path in sorted(folder.glob("*.toml")):
        if path.stem.startswith("custom-"):   # minimal in-house model files (plan.py --model-file), not presets
            continue
        preset = parse(_read_toml(path), path)
        if preset.name in reg.presets:
            raise InputError(f"{path}: name '{preset.name}' already used by {origin[preset.name]}")
        reg.presets[preset.name] = preset
        origin[preset.name] = path
        names = [preset.name, path.stem, *preset.aliases]
        names += [a.rsplit("/", 1)[1] for a in preset.aliases if "/" in a.rstrip("/")]  # HF repo part of org/repo
        for alias in dict.fromkeys(names):
            key = normalize(alias)
            other = reg.index.get(key)
            if other is not None and other != preset.name:
                raise InputError(f"{path}: alias '{alias}' is also a name or alias of '{other}' ({origin[other]})")
            reg.index[key] = preset.name
    if not reg.presets:
        raise InputError(f"{folder}: no *.toml presets")
    return reg


@lru_cache(maxsize=4)
def _models(folder: str) -> _Registry:
    return _build(Path(folder), parse_model)


@lru_cache(maxsize=4)
def _hardware(folder: str) -> _Registry:
    return _build(Path(folder), parse_hardware)


def model_registry() -> _Registry:
    """All model presets (cached per templates folder)."""
    return _models(str(templates_dir() / "models"))


def hardware_registry() -> _Registry:
    """All hardware presets (cached per templates folder)."""
    return _hardware(str(templates_dir() / "hardware"))


def list_models() -> list[str]:
    """Canonical names of all model presets."""
    return sorted(model_registry().presets)


def list_hardware() -> list[str]:
    """Canonical names of all hardware presets."""
    return sorted(hardware_registry().presets)


def _lookup(reg: _Registry, name: str) -> str | None:
    key = normalize(name)
    if key in reg.index:
        return reg.index[key]
    stripped = re.sub(r"\([^)]*\)\s*$", "", name).strip()
    if stripped and stripped != name:
        return reg.index.get(normalize(stripped))
    return None


def resolve_model(name: str) -> ModelPreset:
    """Model preset for a name or alias; InputError listing known names when none matches."""
    if not isinstance(name, str) or not normalize(name):
        raise InputError(f"model name must be a non-empty string, got {name!r}")
    if name.endswith(".toml"):
        return parse_model(_read_toml(Path(name)), Path(name))
    reg = model_registry()
    hit = _lookup(reg, name)
    if hit is None:
        raise InputError(f"unknown model '{name}'; known: {', '.join(sorted(reg.presets))}")
    return reg.presets[hit]


load_model = resolve_model

_COUNT_RE = re.compile(r"^\s*(?:(\d+)\s*[x×*]\s*)?(\d+)\s*[x×*]\s*")
_NODES_RE = re.compile(r",?\s*(\d+)[\s-]*(?:nodes?|machines?|servers?)\b", re.IGNORECASE)
_IC_RE = re.compile(r"\b(nvlink|pcie|hccs)\b", re.IGNORECASE)


def _split_interconnect(text: str) -> tuple[str | None, int | None]:
    """('PCIe (8 GPUs across 2 sockets)') -> ('PCIe', None); ('NVLink, 2 nodes') -> ('NVLink', 2)."""
    nodes = None
    m = _NODES_RE.search(text)
    if m:
        nodes = int(m.group(1))
    ic = _IC_RE.search(text)
    return (INTERCONNECTS[ic.group(1).lower()] if ic else None), nodes


def resolve_hardware(hardware: str, interconnect: str | None = None,
                     n_devices: int | None = None) -> HardwarePreset:
    """Hardware preset for a name (e.g. 'A100', '8xL40 PCIe', 'H100, NVLink, 2 nodes').

    interconnect ('NVLink', 'PCIe', 'HCCS', optionally ', N nodes') must agree with the preset;
    n_devices beyond one node sets the node count (it must be a multiple of devices_per_node).
    """
    if not isinstance(hardware, str) or not normalize(hardware):
        raise InputError(f"hardware name must be a non-empty string, got {hardware!r}")
    if hardware.endswith(".toml"):
        preset = parse_hardware(_read_toml(Path(hardware)), Path(hardware))
        if interconnect is not None:
            ic, nodes = _split_interconnect(str(interconnect))
            if ic and ic != preset.interconnect:
                raise InputError(f"{hardware}: preset is {preset.interconnect} but interconnect says {ic}")
            if nodes and nodes != preset.nodes:
                preset = preset.with_nodes(nodes)
        return _fit_devices(preset, int(n_devices), explicit_nodes=False) if n_devices is not None else preset
    reg = hardware_registry()
    known = ", ".join(sorted(reg.presets))
    text = hardware
    count_nodes = count_devices = None
    m = _COUNT_RE.match(text)
    hit = _lookup(reg, text)
    if hit is None and m:
        if m.group(1):
            count_nodes, count_devices = int(m.group(1)), int(m.group(2))
        else:
            count_devices = int(m.group(2))
        text = text[m.end():]
        hit = _lookup(reg, text)
    ic_name, ic_nodes = _split_interconnect(text)
    if hit is None:
        rest = _NODES_RE.sub(" ", text)
        hit = _lookup(reg, rest)
        if hit is None and ic_name:
            hit = _lookup(reg, _IC_RE.sub(" ", rest))
    if hit is None:
        raise InputError(f"unknown hardware '{hardware}'; known: {known}")
    preset: HardwarePreset = reg.presets[hit]
    want_ic, want_nodes = ic_name, ic_nodes
    if interconnect is not None:
        extra_ic, extra_nodes = _split_interconnect(str(interconnect))
        if extra_ic is None:
            raise InputError(f"interconnect '{interconnect}': expected NVLink, PCIe or HCCS "
                             f"(optionally with ', N nodes')")
        if want_ic and extra_ic != want_ic:
            raise InputError(f"hardware '{hardware}' says {want_ic} but interconnect says {extra_ic}")
        want_ic = extra_ic
        want_nodes = extra_nodes or want_nodes
    if want_ic and want_ic != preset.interconnect:
        twins = [p for p in reg.presets.values()
                 if p.accelerator == preset.accelerator and p.interconnect == want_ic]
        if len(twins) == 1:
            preset = twins[0]
    if want_ic and want_ic != preset.interconnect:
        same = [p.name for p in reg.presets.values() if p.accelerator == preset.accelerator]
        raise InputError(f"hardware '{hardware}' with {want_ic}: preset '{preset.name}' is {preset.interconnect}; "
                         f"presets for {preset.accelerator}: {', '.join(same)}; known: {known}")
    nodes = want_nodes or count_nodes or preset.nodes
    if nodes != preset.nodes:
        preset = preset.with_nodes(nodes)
    if count_devices and count_nodes is None and n_devices is None and count_devices > preset.devices_per_node:
        n_devices = count_devices
    if count_nodes and count_devices and count_devices != preset.devices_per_node:
        preset = preset.with_devices_per_node(count_devices)
    if n_devices is not None:
        preset = _fit_devices(preset, int(n_devices), explicit_nodes=want_nodes is not None)
    return preset


def _fit_devices(preset: HardwarePreset, n: int, explicit_nodes: bool) -> HardwarePreset:
    """Adjust nodes (or devices used per node) so the preset holds exactly or at least n devices."""
    if n < 1:
        raise InputError(f"n_devices must be >= 1, got {n}")
    dpn = preset.devices_per_node
    if explicit_nodes and preset.nodes > 1:
        if n % preset.nodes:
            raise InputError(f"{n} devices cannot be spread evenly over {preset.nodes} nodes of {preset.name}")
        per = n // preset.nodes
        if per > dpn:
            raise InputError(f"{n} devices over {preset.nodes} nodes is {per} per node; "
                             f"{preset.name} has {dpn} per node")
        return preset.with_devices_per_node(per) if per != dpn else preset
    if n <= dpn * preset.nodes:
        return preset
    if n % dpn:
        raise InputError(f"{n} devices is not a whole number of {dpn}-device nodes of {preset.name}")
    return preset.with_nodes(n // dpn)


load_hardware = resolve_hardware


def preset_tables_markdown() -> str:
    """Markdown tables of every model and hardware preset with aliases (section 6 of PRESETS.md)."""
    out = ["| model | file | blocks | hidden | heads / kv | FFN | text joint / cross | default shape | tokens | steps | CFG |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in list_models():
        m = resolve_model(n)
        blocks = " + ".join(f"{v} {k}" for k, v in m.blocks.items())
        shape = f"{m.default_width}x{m.default_height}" + (f"x{m.default_frames}f" if m.default_frames > 1 else "")
        out.append(f"| {n} | {Path(m.path).name} | {blocks} | {m.hidden} | {m.heads} / {m.kv_heads} | {m.ffn} | "
                   f"{m.text_joint_tokens} / {m.text_cross_tokens} | {shape} | {m.default_visual_tokens:,} | "
                   f"{m.default_steps} | {'yes' if m.cfg_default else 'no'} |")
    out += ["", "| hardware | file | devices x nodes | domain | peak bf16 TFLOPS | memory GB | intra-domain GB/s | "
                "inter-domain GB/s | inter-node GB/s |", "|---|---|---|---|---|---|---|---|---|"]
    for n in list_hardware():
        h = resolve_hardware(n)
        cells = [f"{h.links[k].bandwidth_GBps:g} ({h.links[k].name})" for k in LINK_KEYS]
        out.append(f"| {n} | {Path(h.path).name} | {h.devices_per_node} x {h.nodes} | {h.domain_size} | "
                   f"{h.peak_tflops_bf16:g} | {h.memory_GB:g} | " + " | ".join(cells) + " |")
    out += ["", "Aliases (any of these, or the file stem, resolves to the preset):", ""]
    out += [f"- {n}: " + ", ".join(f"`{a}`" for a in resolve_model(n).aliases) for n in list_models()]
    out += [f"- {n}: " + ", ".join(f"`{a}`" for a in resolve_hardware(n).aliases) for n in list_hardware()]
    out += ["", "Generated by `ditpar.plan.inputs.presets.preset_tables_markdown()`; tests/test_presets.py fails when this "
                "section and the TOML files disagree."]
    return "\n".join(out)
