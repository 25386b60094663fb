"""The skill checks itself: valid frontmatter, every named path/script/flag exists, the router is complete.

(a) `agentskills validate` passes on a link named dit-parallel-opt that points at the repository.
(b) every path, script and `--flag` named in SKILL.md, README.md, references/*.md and templates/*.md
    exists; a flag counts as named for a script when it follows `scripts/NAME.py [SUB]` in a command
    (code block or inline code) or shares a line with exactly one script mention.
(c) every scripts/*.py answers --help with exit 0 (and each subcommand's --help too).
(d) every command in a README.md code block marked runnable is run. The marker is the fence's info
    string: a block opened with ```bash runnable (or ```sh runnable) is run line by line, from a
    scratch folder whose top-level entries link to the repository's.
(e) SKILL.md stays under 300 lines, its description is at most 1024 characters without angle
    brackets and names the trigger words; each reference over 100 lines starts with a contents list.
(f) tests/evals/evals.json is in the skill-creator format and every eval names a script and a
    reference that exist and that a reader reaches from SKILL.md in at most two hops.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SCRIPTS, SHARED

SKILL = ROOT / "SKILL.md"
README = ROOT / "README.md"
REFERENCES = ROOT / "references"
EVALS = ROOT / "tests" / "evals" / "evals.json"
SPEC_FIELDS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
TRIGGER_WORDS = ["Ulysses", "ring attention", "USP", "CFG parallel", "context parallel", "AllGather-KV",
                 "HCCL", "all-to-all", "communication masking", "exposed communication",
                 "few-step benchmark", "npu-smi topo", "multi-card DiT", "video generation", "slow"]
REPO_DIRS = ("references", "scripts", "templates", "tests", "benchmarks")
PATH_RE = re.compile(r"(?<![\w./-])((?:" + "|".join(REPO_DIRS) + r")/[A-Za-z0-9_.*/-]*[A-Za-z0-9_*])")
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SCRIPT_RE = re.compile(r"(?<![\w/.-])scripts/([a-z0-9_]+)\.py\b")  # NAME.py etc. are placeholders
FENCE_RE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
INLINE_RE = re.compile(r"`([^`\n]+)`")
SEPARATORS = {"|", "||", "&&", ";", "&", ">", ">>", "2>", "2>&1", "<", "#"}
HELP_TIMEOUT_S = 60


def doc_files() -> list[Path]:
    files = [SKILL, README] + sorted(REFERENCES.glob("*.md")) + sorted((ROOT / "templates").glob("*.md"))
    return [f for f in files if f.exists()]


def script_files() -> list[Path]:
    return sorted(p for p in SCRIPTS.glob("*.py") if not p.name.startswith("_"))


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# ---------------------------------------------------------------------------------------------
# helpers: --help text, subcommands, frontmatter


@functools.cache
def help_text(script: str, sub: str | None = None) -> tuple[int, str]:
    """Exit code and text of `python scripts/<script>.py [sub] --help`."""
    args = [sys.executable, str(SCRIPTS / f"{script}.py")] + ([sub] if sub else []) + ["--help"]
    env = {**os.environ, "MPLBACKEND": "Agg", "COLUMNS": "200"}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=HELP_TIMEOUT_S, env=env, cwd=ROOT)
    return proc.returncode, proc.stdout + proc.stderr


def subcommands(script: str) -> list[str]:
    """Subcommands argparse lists as {a,b,c} in the usage line."""
    code, text = help_text(script)
    usage = text.split("\n\n")[0]
    m = re.search(r"\{([A-Za-z0-9_,-]+)\}", usage)
    return m.group(1).split(",") if m else []


_FOUND_SUBS: dict[str, set[str]] = {}


def is_subcommand(script: str, word: str) -> bool:
    """A word after the script is a subcommand if argparse lists it, or if `script word --help` is its own usage."""
    if word in subcommands(script):
        return True
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", word):
        return False
    code, text = help_text(script, word)
    if code == 0 and text.lstrip().startswith(f"usage: {script}.py {word}"):
        _FOUND_SUBS.setdefault(script, set()).add(word)
        return True
    return False


def all_subcommands(script: str) -> list[str]:
    return sorted(set(subcommands(script)) | _FOUND_SUBS.get(script, set()))


def has_flag(text: str, flag: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text) is not None


def frontmatter() -> tuple[dict, str]:
    strictyaml = pytest.importorskip("strictyaml")
    content = SKILL.read_text(encoding="utf-8")
    assert content.startswith("---\n"), "SKILL.md must start with a --- frontmatter line"
    _, fm, body = content.split("---", 2)
    return strictyaml.load(fm).data, body


# ---------------------------------------------------------------------------------------------
# (a) the reference validator


def test_agentskills_validate(tmp_path):
    exe = shutil.which("agentskills")
    if exe is None:
        pytest.skip("agentskills (pip install skills-ref) is not installed")
    link = tmp_path / "dit-parallel-opt"
    link.symlink_to(ROOT, target_is_directory=True)
    proc = subprocess.run([exe, "validate", str(link)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
# (b) named paths, scripts and flags exist


def _code_snippets(text: str) -> list[str]:
    """Fenced blocks (continuation lines joined) and inline code spans."""
    out = []
    for m in FENCE_RE.finditer(text):
        out.extend(m.group(2).replace("\\\n", " ").splitlines())
    stripped = FENCE_RE.sub("", text)
    out.extend(INLINE_RE.findall(stripped))
    return out


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=False, posix=True)
    except ValueError:
        return line.split()


def script_invocations(text: str) -> list[tuple[str, str | None, list[str], str]]:
    """(script, subcommand, flags, source line) for every `scripts/X.py ...` in code."""
    found = []
    for line in _code_snippets(text):
        tokens = _split(line)
        for i, tok in enumerate(tokens):
            m = SCRIPT_RE.fullmatch(tok) or (SCRIPT_RE.search(tok) if tok.endswith(".py") else None)
            if not m or not (SCRIPTS / f"{m.group(1)}.py").exists():
                continue
            name, sub, flags = m.group(1), None, []
            for j, arg in enumerate(tokens[i + 1:]):
                # a word ending in ':' is prose after the command (plan.py's conclusion: "... on these cards: torchrun")
                if arg in SEPARATORS or arg.startswith("#") or arg.endswith(":") or SCRIPT_RE.search(arg):
                    break
                if j == 0 and not arg.startswith("-") and is_subcommand(name, arg):
                    sub = arg
                elif arg.startswith("--") and len(arg) > 2:
                    flags.append(arg.split("=", 1)[0])
            found.append((name, sub, flags, line))
    return found


def prose_flags(text: str) -> list[tuple[str, str, str]]:
    """(script, flag, line) for inline `--flag`s on a line that mentions exactly one script."""
    out = []
    for line in FENCE_RE.sub("", text).splitlines():
        names = {m.group(1) for m in SCRIPT_RE.finditer(line)}
        if len(names) != 1:
            continue
        (name,) = names
        for span in INLINE_RE.findall(line):
            if SCRIPT_RE.search(span):
                continue  # a command span: handled by script_invocations
            for flag in re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", span):
                out.append((name, flag, line.strip()))
    return out


def named_paths(doc: Path, text: str) -> list[str]:
    """Repository paths named in a document, root-relative, plus its relative markdown links."""
    out = []
    for m in PATH_RE.finditer(text):
        path = m.group(1).rstrip(".")
        if "{" in path or path.endswith("/") or re.fullmatch(r"[A-Z_]+", Path(path).stem):
            continue  # placeholders such as scripts/NAME.py or templates/{x}
        out.append(path)
    for target in LINK_RE.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if path:
            out.append(rel((doc.parent / path).resolve()) if (doc.parent / path).resolve().is_relative_to(ROOT)
                       else path)
    return out


def _exists(path: str) -> bool:
    if any(ch in path for ch in "*?["):
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


@pytest.mark.parametrize("doc", doc_files(), ids=rel)
def test_named_paths_exist(doc):
    text = doc.read_text(encoding="utf-8")
    missing = sorted({p for p in named_paths(doc, text) if not _exists(p)})
    assert not missing, f"{rel(doc)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", doc_files(), ids=rel)
def test_named_scripts_and_flags_exist(doc):
    text = doc.read_text(encoding="utf-8")
    problems = []
    for name in sorted({m.group(1) for m in SCRIPT_RE.finditer(text)}):
        if not (SCRIPTS / f"{name}.py").exists():
            problems.append(f"scripts/{name}.py does not exist")
    for name, sub, flags, line in script_invocations(text):
        code, help_out = help_text(name, sub)
        if code != 0:
            problems.append(f"`{name}.py {sub or ''} --help` exited {code}")
            continue
        top = help_text(name)[1]
        for flag in flags:
            if flag in ("--help", "-h"):
                continue
            if not (has_flag(help_out, flag) or (sub and has_flag(top, flag))):
                problems.append(f"{name}.py{' ' + sub if sub else ''}: {flag} not in --help  [{line.strip()[:90]}]")
    for name, flag, line in prose_flags(text):
        if not (SCRIPTS / f"{name}.py").exists():
            continue
        texts = [help_text(name)[1]] + [help_text(name, s)[1] for s in all_subcommands(name)]
        if not any(has_flag(t, flag) for t in texts):
            problems.append(f"{name}.py: {flag} not in --help of the script or its subcommands  [{line[:90]}]")
    assert not problems, f"{rel(doc)}:\n  " + "\n  ".join(sorted(set(problems)))


def heading_slugs(text: str) -> set[str]:
    """GitHub-style anchors of a document's headings (duplicates get -1, -2, ...)."""
    slugs: set[str] = set()
    for line in FENCE_RE.sub("", text).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower().replace("`", "")).replace(" ", "-")
        slug, n = base, 0
        while slug in slugs:
            n += 1
            slug = f"{base}-{n}"
        slugs.add(slug)
    return slugs


@pytest.mark.parametrize("doc", doc_files(), ids=rel)
def test_anchor_links_resolve(doc):
    text = doc.read_text(encoding="utf-8")
    broken = []
    for target in LINK_RE.findall(text):
        if "#" not in target or re.match(r"[a-z]+:", target):
            continue
        path, anchor = target.split("#", 1)
        dest = (doc.parent / path).resolve() if path else doc
        if dest.exists() and dest.suffix == ".md" and anchor not in heading_slugs(dest.read_text(encoding="utf-8")):
            broken.append(target)
    assert not broken, f"{rel(doc)}: links to headings that do not exist: {broken}"


def test_every_script_is_routed_from_skill_md():
    text = SKILL.read_text(encoding="utf-8")
    unrouted = [p.name for p in script_files() if f"scripts/{p.name}" not in text]
    assert not unrouted, f"scripts not named in SKILL.md (an agent would never find them): {unrouted}"


def test_every_reference_is_linked_from_skill_md():
    text = SKILL.read_text(encoding="utf-8")
    unlinked = [p.name for p in sorted(REFERENCES.glob("*.md")) if f"(references/{p.name})" not in text]
    assert not unlinked, f"references not linked from SKILL.md: {unlinked}"


# ---------------------------------------------------------------------------------------------
# (c) every script's --help exits 0


@functools.cache
def _discover_subcommands() -> None:
    """Subcommands that argparse does not list in the usage line are found where the docs use them."""
    for doc in doc_files():
        script_invocations(doc.read_text(encoding="utf-8"))


@pytest.mark.parametrize("script", [p.stem for p in script_files()])
def test_script_help_exits_zero(script):
    _discover_subcommands()
    code, text = help_text(script)
    assert code == 0, f"scripts/{script}.py --help exited {code}:\n{text[-1500:]}"
    assert "usage:" in text and "example" in text.lower(), f"{script}.py --help lacks usage or an example"
    for sub in all_subcommands(script):
        sub_code, sub_text = help_text(script, sub)
        assert sub_code == 0, f"scripts/{script}.py {sub} --help exited {sub_code}:\n{sub_text[-1500:]}"


# ---------------------------------------------------------------------------------------------
# (d) README commands marked runnable are run


def runnable_blocks(text: str) -> list[str]:
    return [m.group(2) for m in FENCE_RE.finditer(text)
            if m.group(1).split()[:2] in (["bash", "runnable"], ["sh", "runnable"])]


def test_readme_has_runnable_blocks():
    if not README.exists():
        pytest.fail("README.md is missing")
    assert runnable_blocks(README.read_text(encoding="utf-8")), (
        "README.md has no code block marked runnable (open the fence with ```bash runnable)")


def _readme_commands() -> list[str]:
    if not README.exists():
        return []
    cmds = []
    for block in runnable_blocks(README.read_text(encoding="utf-8")):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                cmds.append(line)
    return cmds


@pytest.mark.parametrize("command", _readme_commands() or [None])
def test_readme_runnable_command(command, tmp_path):
    if command is None:
        pytest.skip("no runnable README commands (see test_readme_has_runnable_blocks)")
    # Outputs land in a scratch copy made of links, not in the checkout; ../shared resolves as usual.
    work = tmp_path / ROOT.name
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name != ".git":
            (work / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    if SHARED.exists():
        (tmp_path / "shared").symlink_to(SHARED, target_is_directory=True)
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=work, capture_output=True,
                          text=True, timeout=180, env=env)
    assert proc.returncode == 0, f"`{command}` exited {proc.returncode}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"


# ---------------------------------------------------------------------------------------------
# (e) size budgets and the description


def test_skill_md_budget():
    lines = SKILL.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 300, f"SKILL.md has {len(lines)} lines; keep it under 300 (move detail to references/)"


def test_frontmatter_fields_and_description():
    data, _ = frontmatter()
    assert set(data) <= SPEC_FIELDS, f"non-spec frontmatter keys: {sorted(set(data) - SPEC_FIELDS)}"
    assert data["name"] == "dit-parallel-opt"
    desc = data["description"]
    assert 0 < len(desc) <= 1024, f"description has {len(desc)} characters (max 1024)"
    assert "<" not in desc and ">" not in desc, "description must not contain angle brackets"
    missing = [w for w in TRIGGER_WORDS if w.lower() not in desc.lower()]
    assert not missing, f"description lacks trigger words: {missing}"
    assert len(data.get("compatibility", "")) <= 500
    assert isinstance(data.get("metadata", {}), dict)


@pytest.mark.parametrize("ref", sorted(REFERENCES.glob("*.md")), ids=lambda p: p.name)
def test_long_reference_has_contents(ref):
    lines = ref.read_text(encoding="utf-8").splitlines()
    if len(lines) <= 100:
        return
    head = lines[:40]
    idx = next((i for i, line in enumerate(head)
                if re.fullmatch(r"(#+\s*)?\**\s*(contents|table of contents)\s*:?\s*\**", line.strip(), re.I)),
               None)
    assert idx is not None, f"{ref.name} has {len(lines)} lines but no 'Contents' list in its first 40 lines"
    items = [line for line in lines[idx + 1: idx + 40] if re.match(r"\s*(?:[-*]|\d+\.)\s+\S", line)]
    assert len(items) >= 3, f"{ref.name}: the contents list needs at least 3 entries (- [title](#anchor))"


# ---------------------------------------------------------------------------------------------
# (f) evals


def _evals() -> list[dict]:
    data = json.loads(EVALS.read_text(encoding="utf-8"))
    assert data.get("skill_name") == "dit-parallel-opt"
    return data["evals"]


def reachable_from_skill() -> tuple[set[str], set[str]]:
    """References reachable from SKILL.md in at most two hops, and scripts named along the way."""
    skill_text = SKILL.read_text(encoding="utf-8")
    scripts = {m.group(1) for m in SCRIPT_RE.finditer(skill_text)}
    first = {rel((ROOT / t.split("#")[0]).resolve()) for t in LINK_RE.findall(skill_text)
             if t.startswith("references/")}
    refs = set(first)
    for ref in first:
        path = ROOT / ref
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        scripts |= {m.group(1) for m in SCRIPT_RE.finditer(text)}
        for target in LINK_RE.findall(text):
            target = target.split("#")[0]
            if target.endswith(".md") and not re.match(r"[a-z]+:", target):
                second = (path.parent / target).resolve()
                if second.is_relative_to(REFERENCES):
                    refs.add(rel(second))
    return refs, scripts


def test_evals_format():
    evals = _evals()
    assert len(evals) >= 15, f"{len(evals)} evals; at least 15 required"
    ids = [e["id"] for e in evals]
    assert len(set(ids)) == len(ids), "eval ids must be unique"
    for e in evals:
        for key in ("prompt", "expected_output"):
            assert isinstance(e.get(key), str) and e[key].strip(), f"eval {e.get('id')}: '{key}' missing or empty"
        assert isinstance(e.get("expectations"), list) and e["expectations"], f"eval {e['id']}: no expectations"
        assert isinstance(e.get("files"), list), f"eval {e['id']}: 'files' must be a list"
        for f in e["files"]:
            assert (ROOT / f).exists(), f"eval {e['id']}: file {f} does not exist"


def test_evals_name_reachable_scripts_and_references():
    refs, scripts = reachable_from_skill()
    problems = []
    for e in _evals():
        text = " ".join(e["expectations"])
        named_scripts = {m.group(1) for m in SCRIPT_RE.finditer(text)}
        named_refs = set(re.findall(r"references/[\w.-]+\.md", text))
        if not named_scripts:
            problems.append(f"eval {e['id']}: expectations name no scripts/*.py")
        if not named_refs:
            problems.append(f"eval {e['id']}: expectations name no references/*.md")
        for s in sorted(named_scripts):
            if not (SCRIPTS / f"{s}.py").exists():
                problems.append(f"eval {e['id']}: scripts/{s}.py does not exist")
            elif s not in scripts:
                problems.append(f"eval {e['id']}: scripts/{s}.py is not named in SKILL.md or a reference it links")
        for r in sorted(named_refs):
            if not (ROOT / r).exists():
                problems.append(f"eval {e['id']}: {r} does not exist")
            elif r not in refs:
                problems.append(f"eval {e['id']}: {r} is not reachable from SKILL.md in two hops")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# templates are usable as they stand


def test_topology_template_loads_as_a_hardware_preset():
    """templates/topology.toml is read by the same loader as templates/hardware/*.toml."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    from ditpar.plan.inputs.presets import parse_hardware

    path = ROOT / "templates" / "topology.toml"
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    hw = parse_hardware(data, path)
    domains = data["domains"]
    flat = sorted(d for dom in domains for d in dom)
    assert flat == list(range(hw.devices_per_node)), "domains must partition the devices of a node"
    assert {len(dom) for dom in domains} == {hw.domain_size}
    assert set(hw.links) >= {"intra_domain", "inter_domain"}
