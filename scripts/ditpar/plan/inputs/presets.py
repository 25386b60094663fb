"""Model and hardware presets: load the TOML files under templates/ and resolve names and aliases.

Names match case-, space- and punctuation-insensitively; an unknown name is an InputError that
names the closest presets and the way to describe one that has none, and an inconsistent TOML file is an InputError naming the file and key.
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

from ditpar import formats, limits
from ditpar.errors import InputError
from ditpar.files import is_stream
from ditpar.plan.inputs import not_dit, schema

TEMPLATES_ENV = "DITPAR_TEMPLATES"
BLOCK_TYPES = schema.BLOCK_TYPES
LINK_KEYS = schema.LINK_KEYS
INTERCONNECTS = {"nvlink": "NVLink", "pcie": "PCIe", "hccs": "HCCS",
                 "infinity fabric": "Infinity Fabric", "xgmi": "Infinity Fabric"}   # AMD: xGMI is Infinity Fabric


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
class VaeSpec:
    """The VAE decoder of a model as its config file gives it: what plan/cost/serial.py prices (schema: [vae])."""

    decoder: str                          # decoder family: autoencoderkl, cogvideox, hunyuanvideo, wan, dcae, mochi
    block_out_channels: tuple[int, ...]   # as the config lists them (encoder order: full resolution first)
    layers_per_block: tuple[int, ...]     # one value for every block, or one per block (config order)
    latent_channels: int
    mid_attention: bool
    dtype: str                            # precision the default pipeline decodes in
    post_quant_conv: bool = False
    residual_up: bool = False             # Wan 2.2: residual up blocks (no channel halving, DupUp3D shortcut)
    patch_size: int = 1                   # output pixels unpatchified from each decoder position per axis
    frame_batch: int = 0                  # latent frames per decoder call (0 = all at once)
    frame_tile: int = 0                   # temporal tile in latent frames (0 = none) ...
    frame_tile_stride: int = 0            # ... and the latent frames between tile starts
    vit_stages: int = 0                   # DC-AE: the deepest stages built of EfficientViT blocks
    temporal_expansions: tuple[int, ...] = ()   # Mochi: frames multiplied per up block (config order)
    tile_latent: tuple[int, ...] = ()           # enable_tiling(): spatial tile [h, w] in latent positions ...
    tile_latent_stride: tuple[int, ...] = ()    # ... started every [h, w] latent positions (() = not described)
    notes: str = ""

    def layers(self, block: int) -> int:
        """Configured layers of block `block` (config order)."""
        lpb = self.layers_per_block
        return lpb[0] if len(lpb) == 1 else lpb[block]


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
    token_experts: int = 1       # routed experts of a per-token MoE FFN, all resident on every card (1 = dense FFN)
    ffn_matrices: int = 2
    long_skips: int = 0
    vae_frame_chunk: int = 0
    notes: str = ""
    path: str = ""
    family: str = ""                  # model family for framework profiles ('' = from the name)
    text_encoder_params_b: float = 0.0  # text encoder(s) resident on each rank unless offloaded (0 = unknown)
    vae: VaeSpec | None = None          # the VAE decoder's structure (None = not read: decode not priced)

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
    implied_links: tuple[str, ...] = ()   # link keys the file does not give (inter_domain of a one-domain node)
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


def _aliases(data: Mapping[str, Any], path: Path) -> tuple[str, ...]:
    al = data.get("aliases", [])
    if not isinstance(al, list) or not all(isinstance(a, str) and normalize(a) for a in al):
        raise InputError(f"{path}: key 'aliases' must be a list of non-empty strings")
    return tuple(al)


def _read_toml(path: Path) -> dict[str, Any]:
    """A preset, profile or table file, registered as an input of the run (no output may replace it).

    Read through ditpar.formats.load_toml (files.read_input: a FIFO read once with a timeout, a device
    refused; every parser failure on hostile text, such as nesting 50,000 deep or a 5,000-digit integer,
    one InputError naming the file)."""
    data = formats.load_toml(path)
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
    """Build and check a ModelPreset from one parsed TOML table: every key's type and range is the schema's
    (plan/inputs/schema.py); the rules that tie keys together are checked here."""
    schema.check(data, schema.MODEL, path)
    kind, hidden, heads, kv_heads, head_dim = (data[k] for k in ("kind", "hidden", "heads", "kv_heads", "head_dim"))
    if heads % kv_heads:
        raise InputError(f"{path}: key 'kv_heads' ({kv_heads}) must divide 'heads' ({heads})")
    if data.get("attn_dim_equals_hidden", True) and heads * head_dim != hidden:
        raise InputError(f"{path}: heads*head_dim = {heads}*{head_dim} = {heads * head_dim} differs from "
                         f"hidden = {hidden} (set attn_dim_equals_hidden = false if the model says so)")
    blocks = dict(data["blocks"])
    if not blocks:
        raise InputError(f"{path}: key 'blocks' has no block counts")
    frames = data["default_frames"]
    if kind == "image" and frames != 1:
        raise InputError(f"{path}: key 'default_frames' must be 1 for an image model, got {frames}")
    text_cross = data["text_cross_tokens"]
    if any(k.split("_")[0] == "cross" for k in blocks) and text_cross == 0:
        raise InputError(f"{path}: model has cross-attention blocks but text_cross_tokens is 0")
    sources = dict(data["sources"])
    _need_sources(sources, ("hidden", "heads", "blocks", "ffn", "params_b"), path)
    preset = ModelPreset(
        name=data["name"], aliases=_aliases(data, path), kind=kind, params_b=data["params_b"],
        hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim, ffn=data["ffn"], blocks=blocks,
        text_joint_tokens=data["text_joint_tokens"], text_cross_tokens=text_cross,
        latent_channels=data["latent_channels"], patch=tuple(data["patch"]), vae_stride=tuple(data["vae_stride"]),
        vae_temporal_causal=data["vae_temporal_causal"], cfg_default=data["cfg_default"],
        default_width=data["default_width"], default_height=data["default_height"],
        default_frames=frames, default_steps=data["default_steps"],
        sources=sources, attention=data.get("attention", "softmax"),
        text_hidden=data.get("text_hidden", hidden), image_cross_tokens=data.get("image_cross_tokens", 0),
        experts=data.get("experts", 1), token_experts=data.get("token_experts", 1), ffn_matrices=data.get("ffn_matrices", 2),
        long_skips=data.get("long_skips", 0), vae_frame_chunk=data.get("vae_frame_chunk", 0),
        notes=data.get("notes", ""), path=str(path), family=data.get("family", ""),
        text_encoder_params_b=float(data.get("text_encoder_params_b", 0.0)),
        vae=_vae(data.get("vae"), sources, path),
    )
    if kind == "image" and preset.vae_stride[0] != 1:
        raise InputError(f"{path}: key 'vae_stride' must start with 1 for an image model")
    return preset


def _vae(data: Mapping[str, Any] | None, sources: Mapping[str, str], path: Path) -> VaeSpec | None:
    """The [vae] table (types already checked by the schema); every key needs a `vae_<key>` source."""
    if data is None:
        return None
    _need_sources(sources, [f"vae_{k}" for k in data if k != "notes"], path)
    boc, lpb = tuple(data["block_out_channels"]), tuple(data["layers_per_block"])
    extra = 1 if data["decoder"] == "mochi" else 0   # Mochi lists the resnets of its input block too
    if len(lpb) not in (1, len(boc) + extra):
        raise InputError(f"{path}: key 'vae.layers_per_block' has {len(lpb)} entries; expected 1 or "
                         f"{len(boc) + extra} (one per block of vae.block_out_channels{' + the input block' if extra else ''})")
    texp = tuple(data.get("temporal_expansions", ()))
    if data["decoder"] == "mochi" and len(texp) != len(boc) - 1:
        raise InputError(f"{path}: key 'vae.temporal_expansions' needs {len(boc) - 1} entries (one per up block) "
                         f"for a mochi decoder, got {len(texp)}")
    tiles = tuple(data.get("tile_latent", ())), tuple(data.get("tile_latent_stride", ()))
    if any(len(t) not in (0, 2) for t in tiles) or (len(tiles[0]) == 0) != (len(tiles[1]) == 0):
        raise InputError(f"{path}: keys 'vae.tile_latent' and 'vae.tile_latent_stride' go together, each as [h, w]")
    if data.get("vit_stages", 0) > len(boc):
        raise InputError(f"{path}: key 'vae.vit_stages' ({data['vit_stages']}) exceeds the {len(boc)} blocks")
    return VaeSpec(decoder=data["decoder"], block_out_channels=boc, layers_per_block=lpb,
                   latent_channels=data["latent_channels"], mid_attention=data["mid_attention"], dtype=data["dtype"],
                   post_quant_conv=data.get("post_quant_conv", False), residual_up=data.get("residual_up", False),
                   patch_size=data.get("patch_size", 1), frame_batch=data.get("frame_batch", 0),
                   frame_tile=data.get("frame_tile", 0), frame_tile_stride=data.get("frame_tile_stride", 0),
                   vit_stages=data.get("vit_stages", 0), temporal_expansions=texp, tile_latent=tiles[0],
                   tile_latent_stride=tiles[1], notes=data.get("notes", ""))


def _link(data: Mapping[str, Any], key: str) -> LinkClass:
    """One link class (types and ranges already checked by the schema)."""
    return LinkClass(name=data["name"], bandwidth_GBps=float(data["bandwidth_GBps"]), latency_us=float(data["latency_us"]),
                     basis=data.get("basis", ""), per_peer_GBps=float(data.get("per_peer_GBps", 0.0)),
                     ring_GBps=float(data.get("ring_GBps", 0.0)),
                     alltoall_GBps=tuple(sorted((int(k), float(v)) for k, v in data.get("alltoall_GBps", {}).items())),
                     evidence=data.get("evidence", "derived"))


EVIDENCE = ("measured", "derived", "other-class")   # what a link figure rests on (schema.LINK checks it)


def _physical(link: LinkClass, key: str, interconnect: str, accelerator: str, path: Path) -> None:
    """Every bandwidth of a link class at most its technology's ceiling (plan/inputs/link_limits.py), as --bench."""
    from ditpar.plan.inputs.link_limits import line_rate

    rate = line_rate(key, link.name, interconnect, accelerator)
    figures = {"bandwidth_GBps": link.bandwidth_GBps, "ring_GBps": link.ring_GBps, "per_peer_GBps": link.per_peer_GBps,
               **{f"alltoall_GBps.{k}": v for k, v in link.alltoall_GBps}}
    for name, value in figures.items():
        if value > rate.ceiling_GBps:
            raise InputError(f"{path}: links.{key}.{name} = {value:g} is above {rate.ceiling_GBps:g} GB/s, 2 x the "
                             f"{rate.GBps:g} GB/s line rate of {link.name!r} ({rate.technology}: {rate.source}); "
                             f"a figure in MB/s?")


def parse_hardware(data: Mapping[str, Any], path: Path) -> HardwarePreset:
    """Build and check a HardwarePreset from one parsed TOML table: every key's type and range is the
    schema's (plan/inputs/schema.py); the rules that tie keys together are checked here."""
    schema.check(data, schema.HARDWARE, path)
    ic, dpn, dom = data["interconnect"], data["devices_per_node"], data["domain_size"]
    if dpn % dom:
        raise InputError(f"{path}: key 'domain_size' ({dom}) must divide 'devices_per_node' ({dpn})")
    links_raw = data["links"]
    links = {k: _link(v, k) for k, v in links_raw.items()}
    for key, link in links.items():
        _physical(link, key, ic, data["accelerator"], path)
    implied = ()
    if "inter_domain" not in links:
        if dom != dpn:
            raise InputError(f"{path}: missing links.inter_domain (node has {dpn // dom} domains)")
        links["inter_domain"] = links["intra_domain"]
        implied = ("inter_domain",)
    nodes = data.get("nodes", 1)
    if nodes > 1 and "inter_node" not in links:
        raise InputError(f"{path}: nodes = {nodes} needs links.inter_node")
    sources = dict(data["sources"])
    _need_sources(sources, ("peak_tflops_bf16", "mfu", "memory_GB", "intra_domain"), path)
    if dom != dpn:
        _need_sources(sources, ("inter_domain",), path)
    if "inter_node" in links:
        _need_sources(sources, ("inter_node",), path)
    for key, raw in links_raw.items():
        _need_sources(sources, [f"{key}_{m}" for m in ("ring", "alltoall") if f"{m}_GBps" in raw], path)
    domains = _domains(data, path, dpn, dom)
    return HardwarePreset(
        name=data["name"], aliases=_aliases(data, path), vendor=data["vendor"],
        accelerator=data["accelerator"], interconnect=ic, devices_per_node=dpn, nodes=nodes,
        peak_tflops_bf16=float(data["peak_tflops_bf16"]), mfu=float(data["mfu"]), memory_GB=float(data["memory_GB"]),
        domain_size=dom, links=links, sources=sources,
        hbm_bandwidth_GBps=float(data.get("hbm_bandwidth_GBps", 0.0)),
        domains=domains, notes=data.get("notes", ""), path=str(path), implied_links=implied,
        p2p=bool(data.get("p2p", True)), pcie_layout=str(data.get("pcie_layout", "")),
    )


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


def closest(reg: _Registry, name: str, n: int = 3) -> list[str]:
    """Up to n preset names a mistyped or partial name most likely means: presets whose name or alias holds
    the typed text, then the closest spellings (difflib), each preset once."""
    import difflib

    key = normalize(name)
    found = [canon for alias, canon in sorted(reg.index.items()) if key and key in alias]
    found += [reg.index[a] for a in difflib.get_close_matches(key, list(reg.index), n=2 * n, cutoff=0.5)]
    return list(dict.fromkeys(found))[:n]


def _unknown(kind: str, name: str, reg: _Registry, way: str) -> InputError:
    near = closest(reg, name)
    hint = f"closest: {', '.join(near)}; " if near else ""
    return InputError(f"unknown {kind} '{name}'; {hint}{way}; plan.py --list {'models' if kind == 'model' else kind} "
                      f"lists all {len(reg.presets)}")


def catalogue(kind: str) -> list[dict[str, Any]]:
    """Every preset of one kind ('models' or 'hardware'): name, aliases and its key figures."""
    if kind == "models":
        return [{"name": m.name, "params_b": m.params_b, "heads": f"{m.heads}/{m.kv_heads}", "family": m.family,
                 "aliases": ", ".join(m.aliases)} for _n, m in sorted(model_registry().presets.items())]
    if kind == "hardware":
        return [{"name": h.name, "devices_per_node": h.devices_per_node, "peak_tflops_bf16": h.peak_tflops_bf16,
                 "memory_GB": h.memory_GB, "aliases": ", ".join(h.aliases)}
                for _n, h in sorted(hardware_registry().presets.items())]
    raise InputError(f"--list {kind!r}: expected models or hardware here (frameworks: frameworks.catalogue)")


def resolve_model(name: str) -> ModelPreset:
    """Model preset for a name or alias; InputError naming the closest presets when none matches."""
    if not isinstance(name, str) or not normalize(name):
        raise InputError(f"model name must be a non-empty string, got {name!r}")
    if name.endswith(".toml"):
        return parse_model(_read_toml(Path(name)), Path(name))
    reg = model_registry()
    hit = _lookup(reg, name)
    if hit is None and (known := not_dit.by_name(name)) is not None:
        raise InputError(not_dit.refusal(known, f"--model {name}"))
    if hit is None:
        raise _unknown("model", name, reg, "a model without a preset: --model-config PATH (its diffusers folder "
                       "or config.json) or --model-file FILE.toml")
    return reg.presets[hit]


load_model = resolve_model

_COUNT_RE = re.compile(r"^\s*(?:(\d+)\s*[x×*]\s*)?(\d+)\s*[x×*]\s*")
_NODES_RE = re.compile(r",?\s*(\d+)[\s-]*(?:nodes?|machines?|servers?)\b", re.IGNORECASE)
_IC_RE = re.compile(r"\b(nvlink|pcie|hccs|infinity fabric|xgmi)\b", re.IGNORECASE)


def _count(digits: str, what: str, text: str) -> int:
    """A node or device count written in a hardware name: 1..limits.MAX_DEVICES (the bound of --devices), so
    '0x0xH100' is not read as no count, and 99999999 nodes or a 5,000-digit count is one line, not a hang
    (a link class per device pair) or a traceback."""
    if len(digits) > 6 or not 1 <= int(digits) <= limits.MAX_DEVICES:
        shown = digits if len(digits) <= 12 else f"{digits[:6]}... ({len(digits)} digits)"
        name = text if len(text) <= 80 else f"{text[:40]}...{text[-20:]}"
        raise InputError(f"{name!r}: {what} {shown} is out of range; expected 1..{limits.MAX_DEVICES}")
    return int(digits)


def _split_interconnect(text: str) -> tuple[str | None, int | None]:
    """('PCIe (8 GPUs across 2 sockets)') -> ('PCIe', None); ('NVLink, 2 nodes') -> ('NVLink', 2)."""
    nodes = None
    m = _NODES_RE.search(text)
    if m:
        nodes = _count(m.group(1), "node count", text)
    ic = _IC_RE.search(text)
    return (INTERCONNECTS[ic.group(1).lower()] if ic else None), nodes


def other_matches(hardware: str, chosen: str) -> list[tuple[str, str]]:
    """Presets other than `chosen` that a chip or family name also fits: (preset, its alias).

    '910B' resolves to the Atlas 800I A2 (910B3) while the 910B1/910B2 are the Atlas 800T A2; 'A100'
    resolves to the SXM box while 'A100 PCIe' exists. An alias of another preset that extends the
    name the user typed (after normalisation) is such a fit; the caller says so instead of silently
    choosing. A name that is the chosen preset's own (L40) fits only boxes of its accelerator: L40S, H20-3e
    extend the text but are other chips.
    """
    key = normalize(hardware)
    if not key or hardware.endswith(".toml"):
        return []
    reg = hardware_registry()
    mine = reg.presets.get(chosen)
    # a name that is the chosen preset's own name or alias ('L40') fits another box only when that box carries the
    # same accelerator ('A100' -> 'A100 PCIe', '910B' -> the 800T A2's 910B2), never a longer chip name ('L40S')
    exact = mine is not None and key in {normalize(a) for a in (mine.name, *mine.aliases)}
    out = []
    for name, preset in reg.presets.items():
        if name == chosen or (exact and preset.accelerator != mine.accelerator):
            continue
        hits = [a for a in (name, *preset.aliases) if normalize(a).startswith(key) and normalize(a) != key]
        if hits:
            out.append((name, min(hits, key=len)))
    return out


def resolve_hardware(hardware: str, interconnect: str | None = None,
                     n_devices: int | None = None) -> HardwarePreset:
    """Hardware preset for a name (e.g. 'A100', '8xL40 PCIe', 'H100, NVLink, 2 nodes').

    interconnect ('NVLink', 'PCIe', 'HCCS', 'Infinity Fabric', optionally ', N nodes') must agree with the preset;
    n_devices beyond one node sets the node count (it must be a multiple of devices_per_node).
    """
    if not isinstance(hardware, str) or not normalize(hardware):
        raise InputError(f"hardware name must be a non-empty string, got {hardware!r}")
    if hardware.endswith(".toml") or is_stream(hardware):  # a file, or <(...) / a FIFO holding one
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
            count_nodes = _count(m.group(1), "node count", hardware)
            count_devices = _count(m.group(2), "device count", hardware)
        else:
            count_devices = _count(m.group(2), "device count", hardware)
        text = text[m.end():]
        hit = _lookup(reg, text)
    ic_name, ic_nodes = _split_interconnect(text)
    if hit is None:
        rest = _NODES_RE.sub(" ", text)
        hit = _lookup(reg, rest)
        if hit is None and ic_name:
            hit = _lookup(reg, _IC_RE.sub(" ", rest))
    if hit is None:
        raise _unknown("hardware", hardware, reg, "another machine: --hardware FILE.toml (name, peak TFLOPS, "
                       "memory, one link figure: templates/PRESETS.md)")
    preset: HardwarePreset = reg.presets[hit]
    want_ic, want_nodes = ic_name, ic_nodes
    if interconnect is not None:
        extra_ic, extra_nodes = _split_interconnect(str(interconnect))
        if extra_ic is None:
            raise InputError(f"interconnect '{interconnect}': expected NVLink, PCIe, HCCS or Infinity Fabric "
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
