"""Parse `npu-smi info -t topo` and `nvidia-smi topo -m` matrices into link classes, domains and card groups.

A domain is a set of cards joined by the fast device fabric (NVLink, HCCS, SIO, UB, XGMI); on a box
without any fabric link it is the set of cards that reach each other without crossing the
inter-socket (SYS) link. Which card groups are legal is LEGAL_RULE below, the one rule that both
the listing (``Topology.groups``: one tiling per size) and the check (``Topology.check_group``) use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ditpar import limits
from ditpar.errors import InputError

MAX_DEVICE_ID = 4095  # one node holds at most a few hundred devices; beyond this a label is damaged
_LABEL_RE = re.compile(r"^(GPU|NPU|Phy-ID)(\d+)$")
_NV_RE = re.compile(r"^NV(\d+)$")

# Speed rank of each link class: lower is faster. NV# ranks by its bond count (below).
_RANK = {"SIO": 1.0, "HCCS": 2.0, "UB": 2.0, "XGMI": 2.0, "HCCS_SW": 2.5,
         "PIX": 10.0, "PXB": 11.0, "PHB": 12.0, "NODE": 13.0, "SYS": 14.0, "NA": 15.0}
_ALIASES = {"SOC": "SYS"}  # older nvidia-smi spelling of SYS
FABRIC = {"SIO", "HCCS", "UB", "HCCS_SW", "XGMI"}   # XGMI: AMD Infinity Fabric (rocm-smi --showtopotype)
KNOWN = "X, NV<n>, SIO, HCCS, HCCS_SW, UB, XGMI, PIX, PXB, PHB, NODE, SYS (SOC), NA"


#: the one rule for legal card groups, printed by topo.py and applied by groups() and check_group()
LEGAL_RULE = ("a group of k cards is legal when it lies inside one domain or is made of whole domains, "
              "and its slowest internal link is the fastest class that any k cards of this machine can have; "
              "the listing shows one tiling per size, and any other group that meets both is equally legal")

#: above this many k-card subsets the best class is taken from the tiling instead of all subsets
_MAX_SUBSETS = 200_000


def link_rank(cls: str) -> float:
    """Speed rank of a link class (lower is faster); NV18 ranks before NV12 before NV1."""
    m = _NV_RE.match(cls)
    if m:
        return 1.0 - int(m.group(1)) / 1000.0
    return _RANK[cls]


def is_fabric(cls: str) -> bool:
    """True for device-fabric links (NVLink, HCCS, SIO, UB), false for host/PCIe paths."""
    return cls in FABRIC or bool(_NV_RE.match(cls))


def _cell(token: str, where: str) -> str:
    tok = _ALIASES.get(token.upper(), token.upper())
    if tok == "X" or tok in _RANK or _NV_RE.match(tok):
        return tok
    hint = " (a CPU-affinity or NUMA column where a link class belongs: ragged row?)" \
        if re.match(r"^[\d,\-]+$|^N/A$", token) else ""
    raise InputError(f"{where}: unknown link class '{token}'{hint}; expected one of {KNOWN}")


@dataclass
class Topology:
    """A parsed device matrix: device ids, link class per pair, and what follows from it."""

    fmt: str
    devices: list[int]
    matrix: list[list[str]]
    warnings: list[str] = field(default_factory=list)

    def link(self, a: int, b: int) -> str:
        """Link class between device ids a and b ('X' for a == b)."""
        idx = {d: i for i, d in enumerate(self.devices)}
        return self.matrix[idx[a]][idx[b]]

    @property
    def classes(self) -> dict[str, int]:
        """Count of unordered device pairs per link class, fastest first."""
        counts: dict[str, int] = {}
        n = len(self.devices)
        for i in range(n):
            for j in range(i + 1, n):
                counts[self.matrix[i][j]] = counts.get(self.matrix[i][j], 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: link_rank(kv[0])))

    def components(self, joined) -> list[list[int]]:
        """Connected components of devices under a predicate on link classes, sorted by first id."""
        n = len(self.devices)
        parent = list(range(n))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i in range(n):
            for j in range(i + 1, n):
                if joined(self.matrix[i][j]):
                    parent[find(i)] = find(j)
        groups: dict[int, list[int]] = {}
        for i in range(n):
            groups.setdefault(find(i), []).append(self.devices[i])
        return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])

    def domains(self) -> list[list[int]]:
        """Cards joined by the fast class: fabric components, else components short of SYS."""
        if any(is_fabric(c) for c in self.classes):
            return self.components(is_fabric)
        return self.components(lambda c: link_rank(c) < _RANK["SYS"])

    def interconnect(self) -> str:
        """The device fabric the matrix shows, as presets name it: NVLink (NV# links), Infinity Fabric (XGMI
        links), HCCS (HCCS, SIO, UB links) or PCIe (host paths only)."""
        if any(_NV_RE.match(c) for c in self.classes):
            return "NVLink"
        if "XGMI" in self.classes:
            return "Infinity Fabric"
        return "HCCS" if any(c in FABRIC for c in self.classes) else "PCIe"

    def levels(self) -> list[dict]:
        """Partition of the cards at each link class: joined by that class or anything faster."""
        out = []
        for cls in self.classes:
            r = link_rank(cls)
            out.append({"class": cls, "groups": self.components(lambda c, r=r: link_rank(c) <= r)})
        return out

    def slowest(self, group: list[int]) -> str | None:
        """Slowest link class inside a group of device ids (None for a single card)."""
        worst = None
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                c = self.link(a, b)
                if worst is None or link_rank(c) > link_rank(worst):
                    worst = c
        return worst

    def groups(self, sizes: list[int] | None = None) -> dict[int, list[list[int]]]:
        """Legal card groups per size: tiles inside a domain, whole domains, unions, all cards."""
        n = len(self.devices)
        doms = self.domains()
        want = set(sizes or [2, 4, 8]) | {len(d) for d in doms} | {n}
        hierarchy = [lv["groups"] for lv in self.levels()]
        out: dict[int, list[list[int]]] = {}
        for k in sorted(want):
            if k < 1:
                continue
            if k > n:
                out[k] = []
                continue
            tiles: list[list[int]] = []
            if k <= max(len(d) for d in doms):
                for d in doms:
                    pairs = self._fastest_pairs(d) if k == 2 else None
                    tiles += pairs or _tile(d, k, hierarchy) or []
            else:
                tiles = _tile(sorted(self.devices), k, hierarchy) or []
            out[k] = tiles
        return out

    def _fastest_pairs(self, members: list[int]) -> list[list[int]] | None:
        """Disjoint pairs covering members, fastest links first (greedy); None if it leaves cards over."""
        cand = sorted(((link_rank(self.link(a, b)), a, b) for i, a in enumerate(members)
                       for b in members[i + 1:]))
        used: set[int] = set()
        out = []
        for _, a, b in cand:
            if a not in used and b not in used:
                used |= {a, b}
                out.append([a, b])
        return sorted(out) if len(used) == len(members) else None

    def best_class(self, k: int) -> str | None:
        """The fastest slowest-link class any k cards of this machine can have (None for k < 2 or k > n)."""
        import itertools
        import math

        n = len(self.devices)
        if k < 2 or k > n:
            return None
        if math.comb(n, k) > _MAX_SUBSETS:
            tiles = self.groups([k]).get(k) or [sorted(self.devices)[:k]]
            return min((self.slowest(t) for t in tiles), key=link_rank)
        rank = [[link_rank(c) if c != "X" else -1.0 for c in row] for row in self.matrix]
        best = None
        for combo in itertools.combinations(range(n), k):
            worst = max(rank[i][j] for a, i in enumerate(combo) for j in combo[a + 1:])
            if best is None or worst < best[0]:
                best = (worst, combo)
        return self.slowest([self.devices[i] for i in best[1]])

    def is_legal(self, group: list[int]) -> bool:
        """LEGAL_RULE: inside one domain or whole domains, and the best slowest link for its size."""
        if len(group) < 2:
            return True
        touched = [d for d in self.domains() if set(d) & set(group)]
        if len(touched) > 1 and not all(set(d) <= set(group) for d in touched):
            return False
        return link_rank(self.slowest(group)) <= link_rank(self.best_class(len(group)))

    def check_group(self, group: list[int]) -> dict:
        """Where a requested group sits: legal by LEGAL_RULE, domains touched, slowest class, warnings."""
        unknown = [g for g in group if g not in self.devices]
        if unknown:
            raise InputError(f"--group: device(s) {', '.join(map(str, unknown))} not in the matrix "
                             f"(devices: {', '.join(map(str, self.devices))})")
        if len(set(group)) != len(group):
            raise InputError(f"--group: repeated device in {','.join(map(str, group))}")
        doms = self.domains()
        touched = [d for d in doms if set(d) & set(group)]
        slow = self.slowest(group)
        crosses = len(touched) > 1
        whole = all(set(d) <= set(group) for d in touched)
        best = self.best_class(len(group))
        legal = self.is_legal(group)
        warning = None
        label = ",".join(map(str, group))
        spans = " and ".join("{" + ",".join(map(str, d)) + "}" for d in touched)
        reasons: list[str] = []
        if not legal:
            example = next((g for g in self.groups([len(group)]).get(len(group), [])), None)
            if crosses and not whole:
                reasons.append(f"takes only part of domains {spans}")
            if link_rank(slow) > link_rank(best):
                reasons.append(f"its collectives run over {slow}, but {len(group)} cards of this machine "
                               f"can stay on {best}")
            warning = (f"group {label} " + (f"crosses domains {spans}: " if crosses else "")
                       + "not legal: " + "; ".join(reasons)
                       + (" (e.g. {" + ",".join(map(str, example)) + "})" if example else ""))
        return {"ranks": list(group), "legal": legal, "not_legal_because": reasons, "best_class": best,
                "rule": LEGAL_RULE,
                "domains_touched": touched, "crosses_domains": crosses,
                "whole_domains": whole, "slowest_class": slow, "warning": warning}

    def summary(self) -> dict:
        """A hardware-preset-like view: devices, domain size, class inside and between domains."""
        doms = self.domains()
        sizes = {len(d) for d in doms}
        inner = None
        for d in doms:
            s = self.slowest(d)
            if s is not None and (inner is None or link_rank(s) > link_rank(inner)):
                inner = s
        between = None
        if len(doms) > 1:
            between = self.slowest(sorted(self.devices))
        order = [d for dom in doms for d in dom]
        return {"devices_per_node": len(self.devices), "domain_size": sizes.pop() if len(sizes) == 1 else None,
                "n_domains": len(doms), "intra_domain_class": inner, "inter_domain_class": between,
                "visible_devices_order": order, "contiguous": order == sorted(self.devices)}


def _tile(members: list[int], k: int, hierarchy: list[list[list[int]]]) -> list[list[int]] | None:
    """Split members into blocks of k along the link hierarchy; None when no clean split exists.

    The members' children are their parts at the coarsest level that splits them (singletons when
    none does). Children of k or more cards are tiled recursively; smaller equal children are
    packed consecutively (by first id) into blocks of k.
    """
    if len(members) % k:
        return None
    if len(members) == k:
        return [sorted(members)]
    mset = set(members)
    children = [[m] for m in sorted(members)]
    for parts_all in reversed(hierarchy):
        parts = [p for p in parts_all if set(p) <= mset]
        if len(parts) >= 2 and sum(len(p) for p in parts) == len(members):
            children = parts
            break
    if all(len(c) >= k for c in children):
        out: list[list[int]] = []
        for c in children:
            sub = _tile(c, k, hierarchy)
            if sub is None:
                return None
            out += sub
        return out
    if len({len(c) for c in children}) == 1 and k % len(children[0]) == 0:
        return _pack(children, k)
    return None


def _pack(parts: list[list[int]], k: int) -> list[list[int]] | None:
    """Concatenate consecutive parts (sorted by first id) into blocks of exactly k."""
    out, cur = [], []
    for p in sorted(parts, key=lambda p: p[0]):
        cur += p
        if len(cur) == k:
            out.append(sorted(cur))
            cur = []
        elif len(cur) > k:
            return None
    return out if not cur else None


def parse_topology(text: str, source: str = "<input>") -> Topology:
    """Parse the device matrix of `npu-smi info -t topo` or `nvidia-smi topo -m`."""
    lines = text.replace("\r\n", "\n").split("\n")
    header_at, labels = None, []
    for i, line in enumerate(lines):
        toks = line.split()
        lead = []
        for t in toks:
            if _LABEL_RE.match(t):
                lead.append(t)
            else:
                break
        if lead and line.strip().startswith(lead[0]) and _is_header(toks, lead):
            header_at, labels = i, lead
            break
    if header_at is None:
        raise InputError(f"{source}: no device matrix found; expected the output of "
                         f"'npu-smi info -t topo' (NPU0 NPU1 ... or Phy-ID0 ...) or 'nvidia-smi topo -m' (GPU0 GPU1 ...)")
    kinds = {_LABEL_RE.match(lb).group(1) for lb in labels}
    if len(kinds) != 1:
        raise InputError(f"{source}:{header_at + 1}: mixed device labels {', '.join(labels)}")
    kind = kinds.pop()
    fmt = "nvidia-smi" if kind == "GPU" else "npu-smi"
    ids = [int(_LABEL_RE.match(lb).group(2)) for lb in labels]
    if len(set(ids)) != len(ids):
        raise InputError(f"{source}:{header_at + 1}: repeated device label in the header")
    if len(ids) > limits.MAX_NODE_DEVICES:
        raise InputError(f"{source}:{header_at + 1}: {len(ids)} devices in one matrix; expected at most "
                         f"{limits.MAX_NODE_DEVICES} (one node's devices: the largest single hosts have 16)")
    if max(ids) > MAX_DEVICE_ID:
        raise InputError(f"{source}:{header_at + 1}: device id {max(ids)} in the header; expected ids "
                         f"0..{MAX_DEVICE_ID} (one node's devices)")
    n = len(labels)
    rows: dict[str, list[str]] = {}
    for j in range(header_at + 1, len(lines)):
        line = lines[j]
        toks = line.split()
        if not toks:
            continue
        if toks[0].lower().startswith("legend"):
            break
        if toks[0] not in labels:
            continue
        where = f"{source}:{j + 1}"
        if toks[0] in rows:
            raise InputError(f"{where}: row {toks[0]} appears twice")
        cells = toks[1:1 + n]
        if len(cells) < n:
            raise InputError(f"{where}: row {toks[0]} has {len(cells)} cells, expected {n} (ragged matrix)")
        rows[toks[0]] = [_cell(c, f"{where} column {labels[k]}") for k, c in enumerate(cells)]
    missing = [lb for lb in labels if lb not in rows]
    if missing:
        raise InputError(f"{source}: matrix rows missing for {', '.join(missing)} (ragged or truncated matrix)")
    matrix = [rows[lb] for lb in labels]
    for i in range(n):
        if matrix[i][i] != "X":
            raise InputError(f"{source}: row {labels[i]} has '{matrix[i][i]}' on the diagonal, expected X")
        for k in range(n):
            if k != i and matrix[i][k] == "X":
                raise InputError(f"{source}: row {labels[i]} column {labels[k]} is X off the diagonal")
            if matrix[i][k] != matrix[k][i]:
                raise InputError(f"{source}: {labels[i]}-{labels[k]} is {matrix[i][k]} but "
                                 f"{labels[k]}-{labels[i]} is {matrix[k][i]} (matrix not symmetric)")
    topo = Topology(fmt=fmt, devices=ids, matrix=matrix)
    for d in topo.domains():
        inner = topo.slowest(d)
        if inner is not None and any(is_fabric(c) for c in topo.classes) and not is_fabric(inner):
            topo.warnings.append("domain {" + ",".join(map(str, d)) + "} is joined by the fabric but not "
                                 f"fully: some pairs inside it go over {inner} (traffic is routed through peers)")
    if "NA" in topo.classes:
        topo.warnings.append(f"{topo.classes['NA']} pair(s) report NA (unknown relationship): treated as the slowest class")
    return topo


def _is_header(toks: list[str], lead: list[str]) -> bool:
    """A header line lists labels only (then NIC/CPU columns), never a link class right after them."""
    rest = toks[len(lead):]
    return not rest or not (rest[0].upper() in _RANK or rest[0].upper() == "X" or _NV_RE.match(rest[0]))


def apply_topology(topo: Topology, base, where: str = "topology"):
    """A HardwarePreset like `base` whose node layout (devices, domain size) comes from the matrix.

    Ranks map onto devices in `summary()["visible_devices_order"]`; when that is not the natural
    order, launch with CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES set to it. The matrix must
    show the preset's fabric, and domains the preset has a link figure between.
    """
    from dataclasses import replace

    preset = base.path or base.name
    fabric = topo.interconnect()
    if fabric != base.interconnect:
        raise InputError(f"{where}: the matrix shows a {fabric} box (links {', '.join(topo.classes)}) but preset "
                         f"'{base.name}' ({preset}) is {base.interconnect}: its link figures would price another "
                         f"fabric; pass --hardware for this box, or a copy of the preset with interconnect = "
                         f"\"{fabric}\" and {fabric} link figures")
    s = topo.summary()
    if s["domain_size"] is None:
        raise InputError("topology: domains have unequal sizes "
                         + " ".join("{" + ",".join(map(str, d)) + "}" for d in topo.domains())
                         + "; a preset needs equal domains")
    if s["n_domains"] > 1 and ("inter_domain" not in base.links or "inter_domain" in base.implied_links):
        raise InputError(f"{where}: the matrix has {s['n_domains']} domains (joined by {s['inter_domain_class']}) but "
                         f"preset '{base.name}' ({preset}) gives no links.inter_domain figure (one domain per node): "
                         f"cross-domain bytes would be priced at the in-domain {base.links['intra_domain'].name} "
                         f"speed; add [links.inter_domain] (name, bandwidth_GBps, latency_us; sources.inter_domain) "
                         f"to a copy of the preset and pass that with --hardware")
    if topo.devices != list(range(len(topo.devices))):
        raise InputError("topology: device ids are not 0..n-1 (" + ",".join(map(str, topo.devices))
                         + "); renumber them as the ranks will see them")
    doms = tuple(tuple(d) for d in topo.domains())
    return replace(base, devices_per_node=s["devices_per_node"], domain_size=s["domain_size"],
                   domains=() if s["contiguous"] else doms,
                   notes=(base.notes + " " if base.notes else "") + "Node layout from a topology matrix.")


def apply_domains(text: str, base, where: str = "--domains"):
    """A HardwarePreset like `base` whose node is the domains given as sizes ('3,3': six cards, two domains
    of three, ranks 0-2 and 3-5): the split of a box no preset has, without a topology matrix."""
    from dataclasses import replace

    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() and len(p) <= 4 for p in parts):
        raise InputError(f"{where} {text!r}: expected domain sizes separated by commas, e.g. 3,3 or 4,4")
    sizes = [int(p) for p in parts]
    if min(sizes) < 1 or sum(sizes) > limits.MAX_NODE_DEVICES:
        raise InputError(f"{where} {text!r}: sizes 1.. with at most {limits.MAX_NODE_DEVICES} devices in a node")
    if len(set(sizes)) > 1:
        raise InputError(f"{where} {text!r}: domains of unequal sizes; a node of this model has equal domains "
                         "(describe the cards you use, e.g. 3,3 for 3 of each 4)")
    if len(sizes) > 1 and ("inter_domain" not in base.links or "inter_domain" in base.implied_links):
        raise InputError(f"{where} {text!r}: {len(sizes)} domains, but preset '{base.name}' gives no "
                         "links.inter_domain figure (one domain per node); pass a preset that has one")
    return replace(base, devices_per_node=sum(sizes), domain_size=sizes[0], domains=(),
                   notes=(base.notes + " " if base.notes else "") + f"Node layout from {where} {text}.")
