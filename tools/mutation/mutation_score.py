#!/usr/bin/env python3
"""Mutation score of the core: how many deliberately wrong answers the tests catch, per module.

Example:
    python3 tools/mutation/mutation_score.py --module scripts/ditpar/core/intervals.py --sample 20 --seed 1

Choice of tool: a small self-written AST mutator, not cosmic-ray or mutmut (neither is installed here,
so there is no `mutation` extra: the script needs only the standard library and pytest from `test`).
cosmic-ray applies each mutant to the file on disk during its test run and runs one test command for
the whole session; mutmut 3 runs a rewritten copy of the tree. Per-module test selection, never
touching the real file (other sessions run the suite from the same tree) and a warm forked runner on a
small shared machine were simpler to get right in ~300 lines than to bend either tool to.
This script uses cosmic-ray's operators (comparison, arithmetic, boolean and unary operator
replacement, number +1/-1, True/False swap, ``continue`` <-> ``break``) plus statement deletion, and:
- never edits a file: the mutant is applied at import time by a meta-path finder in the test process
  (installed through a sitecustomize on PYTHONPATH, so scripts the tests run as subprocesses see it too);
- runs only the test files mapped to the module (TESTS below), with ``-x`` and a timeout per mutant;
- forks each mutant's pytest from a parent that has already imported numpy/pandas/pyarrow/pytest;
- leaves out what cannot change behaviour: annotations (the modules use ``from __future__ import
  annotations``) and docstrings; also string constants and f-string interiors (message wording,
  which the message tests pin; mutating it would mostly add cosmetic mutants);
- reports mutants on lines no selected test reaches as "not covered" without running them (they
  count against the score: a wrong answer there is noticed by nothing); coverage is line tracing of
  the unmutated run, in the test process and in the scripts its tests start.
Score = killed / (mutants - equivalent), equivalent ones listed with their reason in
tools/mutation/mutation_equivalent.toml (matched on module, function, change and source line, not on
the line number; ``occurrence = k`` picks the k-th such mutant on the line, by column).
``--sample N --seed S`` draws N mutants per module reproducibly (same code, same draw).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ImportError:   # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
EQUIVALENT = Path(__file__).resolve().with_name("mutation_equivalent.toml")
ENV_MUTANT = "DITPAR_MUTANT"          # "module.name|path|index" read by the import hook
ENV_TRACE = "DITPAR_MUTATION_TRACE"   # "path|outdir": scripts the tests start record the lines of path they run

# module -> the test files that exercise it (tight on purpose: every survivor runs all of them)
TESTS: dict[str, list[str]] = {   # the fast, targeted file first: with -x most mutants die in it
    "scripts/ditpar/core/intervals.py": ["tests/test_survivors_intervals.py", "tests/test_intervals.py"],
    "scripts/ditpar/timeparse.py": ["tests/test_survivors_timeparse.py", "tests/test_timeparse.py"],
    "scripts/ditpar/masking/bound.py": ["tests/test_survivors_bound.py", "tests/test_masking.py"],
    "scripts/ditpar/analysis/breakdown.py": ["tests/test_survivors_breakdown.py", "tests/test_step_breakdown.py"],
    "scripts/ditpar/plan/decide/gates.py": ["tests/test_gates_boundaries.py", "tests/test_gates.py"],
    "scripts/ditpar/readers/common.py": ["tests/test_survivors_common.py", "tests/test_survivors_ascend.py",
                                         "tests/test_readers_columnar.py", "tests/test_readers_ascend.py"],
    "scripts/ditpar/readers/ascend/text.py": ["tests/test_survivors_ascend.py", "tests/test_readers_ascend.py", "tests/test_readers_columnar.py"],
    "scripts/ditpar/readers/jsonstream.py": ["tests/test_survivors_jsonstream.py", "tests/test_jsonstream.py"],
    "scripts/ditpar/readers/kineto/trace.py": ["tests/test_survivors_kineto.py", "tests/test_readers_kineto.py", "tests/test_kineto_blocks.py"],
    "scripts/ditpar/readers/kineto/events.py": ["tests/test_survivors_kineto.py", "tests/test_kineto_blocks.py", "tests/test_readers_kineto.py"],
    "scripts/ditpar/plan/cost/efficiency.py": ["tests/test_gemm_efficiency.py", "tests/test_costmodel.py"],
    "scripts/ditpar/plan/cost/memory.py": ["tests/test_survivors_memory.py", "tests/test_costmodel.py",
                                           "tests/test_gates.py"],
    "scripts/ditpar/plan/cost/plans.py": ["tests/test_survivors_plans.py", "tests/test_costmodel.py"],
    "scripts/ditpar/plan/decide/rank.py": ["tests/test_survivors_rank.py", "tests/test_costmodel.py",
                                           "tests/test_plan_preference.py"],
    "scripts/ditpar/plan/cost/shape.py": ["tests/test_survivors_shape.py", "tests/test_costmodel.py"],
    "scripts/ditpar/plan/cost/timing.py": ["tests/test_survivors_timing.py", "tests/test_costmodel.py",
                                           "tests/test_tp_framework_cost.py", "tests/test_issue23_acceptance.py"],
    "scripts/ditpar/plan/cost/work.py": ["tests/test_survivors_work.py", "tests/test_costmodel.py",
                                         "tests/test_tp_framework_cost.py"],
}
DEFAULT_MODULES = list(TESTS)

CMP_SWAPS = {ast.Lt: (ast.LtE, ast.GtE), ast.LtE: (ast.Lt, ast.Gt), ast.Gt: (ast.GtE, ast.LtE),
             ast.GtE: (ast.Gt, ast.Lt), ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,),
             ast.In: (ast.NotIn,), ast.NotIn: (ast.In,), ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,)}
BIN_SWAPS = {ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.Div,), ast.Div: (ast.Mult,),
             ast.FloorDiv: (ast.Div,), ast.Mod: (ast.FloorDiv,), ast.Pow: (ast.Mult,),
             ast.BitAnd: (ast.BitOr,), ast.BitOr: (ast.BitAnd,), ast.LShift: (ast.RShift,),
             ast.RShift: (ast.LShift,)}
SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
          ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.Add: "+",
          ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
          ast.BitAnd: "&", ast.BitOr: "|", ast.LShift: "<<", ast.RShift: ">>", ast.And: "and",
          ast.Or: "or"}
DELETABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.Raise, ast.Return, ast.Delete)


@dataclass
class Mutant:
    index: int        # position in the deterministic list of the module's mutants
    line: int
    stmt_line: int    # first line of the statement holding it (what line tracing sees)
    col: int
    op: str           # operator name
    change: str       # e.g. "'<' -> '<='"
    code: str = ""    # the stripped source line
    function: str = ""  # the innermost def holding it ("" at module level)
    occurrence: int = 1  # 1, 2, ...: among mutants with the same function, change and code, by column
    outcome: str = "" # killed | survived | timeout | not covered | equivalent
    reason: str = ""  # why equivalent (from the TOML)


@dataclass
class Site:
    node: ast.AST
    op: str
    change: str
    apply: object = field(repr=False)   # callable(node) -> replacement node (or None to keep)


def _skipped_nodes(tree: ast.Module) -> set[int]:
    """ids of nodes left alone: annotations and docstrings (cannot change behaviour) and f-strings."""
    skip: set[int] = set()

    def mark(n):
        if n is not None:
            skip.update(id(x) for x in ast.walk(n))
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(n.returns)
            for a in (*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs, n.args.vararg, n.args.kwarg):
                if a is not None:
                    mark(a.annotation)
        elif isinstance(n, ast.AnnAssign):
            mark(n.annotation)
        elif isinstance(n, ast.JoinedStr):   # message formatting (its wording is the tests' to pin)
            mark(n)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                mark(first)
    return skip


def _sites(tree: ast.Module) -> list[Site]:
    """Every mutation of the tree, in ast.walk order (deterministic for a given source)."""
    skip = _skipped_nodes(tree)
    out: list[Site] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                for new in CMP_SWAPS.get(type(op), ()):
                    def apply(n, i=i, new=new):
                        n.ops[i] = new()
                        return n
                    out.append(Site(node, "compare", f"'{SYMBOL[type(op)]}' -> '{SYMBOL[new]}'", apply))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)):
            for new in BIN_SWAPS.get(type(node.op), ()):
                def apply(n, new=new):
                    n.op = new()
                    return n
                out.append(Site(node, "arith", f"'{SYMBOL[type(node.op)]}' -> '{SYMBOL[new]}'", apply))
        elif isinstance(node, ast.BoolOp):
            new = ast.Or if isinstance(node.op, ast.And) else ast.And

            def apply(n, new=new):
                n.op = new()
                return n
            out.append(Site(node, "boolean", f"'{SYMBOL[type(node.op)]}' -> '{SYMBOL[new]}'", apply))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            sym = "not " if isinstance(node.op, ast.Not) else "-"
            out.append(Site(node, "unary", f"remove '{sym.strip()}'", lambda n: n.operand))
        elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
            out.append(Site(node, "constant", f"{node.value} -> {not node.value}",
                            lambda n: ast.Constant(not n.value)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and \
                not isinstance(node.value, bool):
            for d in (1, -1):
                out.append(Site(node, "number", f"{node.value!r} -> {node.value + d!r}",
                                lambda n, d=d: ast.Constant(n.value + d)))
        elif isinstance(node, ast.Continue):
            out.append(Site(node, "loop", "continue -> break", lambda n: ast.Break()))
        elif isinstance(node, ast.Break):
            out.append(Site(node, "loop", "break -> continue", lambda n: ast.Continue()))
        if isinstance(node, DELETABLE) and not (isinstance(node, ast.Expr) and
                                                isinstance(node.value, ast.Constant)):
            out.append(Site(node, "delete", f"delete '{type(node).__name__.lower()}' statement",
                            lambda n: ast.Pass()))
    return out


def list_mutants(path: Path) -> list[Mutant]:
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    stmt_of: dict[int, int] = {}
    func_of: dict[int, tuple[int, str]] = {}
    for st in ast.walk(tree):
        if isinstance(st, ast.stmt):
            for n in ast.walk(st):   # the innermost statement starts last
                stmt_of[id(n)] = max(stmt_of.get(id(n), 0), st.lineno)
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    func_of[id(n)] = max(func_of.get(id(n), (0, "")), (st.lineno, st.name))
    res = []
    for i, s in enumerate(_sites(tree)):
        ln = getattr(s.node, "lineno", 0)
        res.append(Mutant(i, ln, stmt_of.get(id(s.node), ln), getattr(s.node, "col_offset", 0), s.op,
                          s.change, lines[ln - 1].strip() if 0 < ln <= len(lines) else "",
                          func_of.get(id(s.node), (0, ""))[1]))
    seen: dict[tuple, int] = {}
    for m in sorted(res, key=lambda m: (m.line, m.col)):
        key = (m.function, m.change, m.code)
        seen[key] = m.occurrence = seen.get(key, 0) + 1
    return res


def mutated_tree(path: Path, index: int) -> ast.Module:
    """The module's AST with mutant `index` applied (the same walk as list_mutants)."""
    tree = ast.parse(path.read_text())
    site = _sites(tree)[index]
    new = site.apply(site.node)
    if new is not site.node:
        for parent in ast.walk(tree):
            for name, value in ast.iter_fields(parent):
                if value is site.node:
                    setattr(parent, name, new)
                elif isinstance(value, list):
                    for k, item in enumerate(value):
                        if item is site.node:
                            value[k] = new
        ast.copy_location(new, site.node)
    return ast.fix_missing_locations(tree)


# ---------- in the test process: the import hook (through sitecustomize) ----------

class _MutantFinder:
    """Meta-path finder that compiles the target module from its mutated AST."""

    def __init__(self, name: str, path: str, index: int):
        self.name, self.path, self.index = name, path, index

    def find_spec(self, fullname, target_path=None, target=None):
        if fullname != self.name:
            return None
        import importlib.util
        return importlib.util.spec_from_file_location(fullname, self.path, loader=self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        code = compile(mutated_tree(Path(self.path), self.index), self.path, "exec")
        exec(code, module.__dict__)


def install_hook() -> None:
    """Called from the generated sitecustomize: apply the mutant named in the environment; in the
    unmutated run, record the target's lines that scripts started by the tests execute."""
    spec = os.environ.get(ENV_MUTANT)
    if spec:
        name, path, index = spec.split("|")
        sys.meta_path.insert(0, _MutantFinder(name, path, int(index)))
    trace = os.environ.get(ENV_TRACE)
    if trace:
        import atexit

        path, out = trace.split("|")
        hit = _trace_lines(path)
        atexit.register(lambda: Path(out, f"{os.getpid()}.json").write_text(json.dumps(sorted(hit))))


def _trace_lines(path: str) -> set[int]:
    hit: set[int] = set()

    def local(frame, event, arg):
        if event == "line":
            hit.add(frame.f_lineno)
        return local

    def glob(frame, event, arg):
        return local if frame.f_code.co_filename == path else None
    sys.settrace(glob)
    import threading
    threading.settrace(glob)
    return hit


# ---------- in the parent: run ----------

def module_name(path: Path) -> str:
    """Dotted import name: from scripts/ for the library, else the file's stem (a module its tests import)."""
    try:
        rel = path.resolve().relative_to(ROOT / "scripts").with_suffix("")
    except ValueError:
        return path.stem
    return ".".join(rel.parts)


def normalise(module: str) -> str:
    """The module as a path relative to the repository root when it lies inside (the TESTS and TOML key)."""
    path = Path(module).resolve()
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def _hook_dir() -> str:
    d = tempfile.mkdtemp(prefix="ditpar-mutation-")
    Path(d, "sitecustomize.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "import mutation_score\nmutation_score.install_hook()\n"
        f"del sys.path[0]\n")
    return d


def _run_pytest_child(tests: list[str], env: dict[str, str], timeout: float,
                      trace: str | None = None) -> tuple[str, float, set[int]]:
    """Fork; the child runs pytest on `tests` with `env` set. Returns (outcome, seconds, lines run)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as lines_file:
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:   # child
            os.setpgid(0, 0)   # its own group, so a timeout ends the scripts its tests started too
            code = 3
            try:
                os.environ.update(env)
                trace_env = os.environ.pop(ENV_TRACE, None)   # this process traces itself (below)
                install_hook()
                if trace_env:
                    os.environ[ENV_TRACE] = trace_env          # for the scripts the tests start
                hit = _trace_lines(trace) if trace else set()
                import pytest
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
                code = int(pytest.main([*tests, "-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                                        "--no-header", "-W", "ignore"]))
                sys.settrace(None)
                Path(lines_file.name).write_text(json.dumps(sorted(hit)))
            finally:
                os._exit(code)
        deadline = t0 + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "timeout", time.monotonic() - t0, set()
            time.sleep(0.05)
        text = Path(lines_file.name).read_text()
    lines = set(json.loads(text)) if text else set()
    # 1: a test failed; 2: collection failed (the mutant breaks the import); others count as caught too
    return ("survived" if os.waitstatus_to_exitcode(status) == 0 else "killed"), time.monotonic() - t0, lines


def _warm_pytest() -> None:
    """Load pytest's plugins once in the parent (a collection of an empty folder), so forks start warm."""
    import contextlib
    import io

    import pytest
    with tempfile.TemporaryDirectory() as empty, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        pytest.main(["--co", "-q", "-p", "no:cacheprovider", "-o", "addopts=", empty])


def load_equivalent(path: Path = EQUIVALENT) -> list[dict]:
    if not path.exists():
        return []
    return tomllib.loads(path.read_text()).get("equivalent", [])


def _match(m: Mutant, module: str, entries: list[dict]) -> str | None:
    for e in entries:
        if (e.get("module"), e.get("function", ""), e.get("change"), e.get("code")) == \
                (module, m.function, m.change, m.code) and e.get("occurrence", m.occurrence) == m.occurrence:
            return e.get("reason", "")
    return None


def score_module(module: str, tests: list[str], sample: int | None, seed: int, hook_env: dict,
                 equivalent: list[dict], log) -> dict:
    path = (ROOT / module).resolve()
    mutants = list_mutants(path)
    total = len(mutants)
    if sample is not None and sample < total:
        mutants = sorted(random.Random(f"{seed}:{module}").sample(mutants, sample), key=lambda m: m.index)
    env = {**hook_env}
    with tempfile.TemporaryDirectory() as sub:   # lines run by subprocesses of the tests, one file each
        base, secs, covered = _run_pytest_child(tests, {**env, ENV_TRACE: f"{path}|{sub}"}, 900,
                                                trace=str(path))
        for f in Path(sub).glob("*.json"):
            covered |= set(json.loads(f.read_text()))
    if base != "survived":
        raise SystemExit(f"mutation_score.py: {module}: the unmutated tests fail ({base}): "
                         f"{' '.join(tests)}")
    timeout = max(60.0, 5 * secs)   # generous: the machine is shared, and a timeout counts as caught
    log(f"{module}: {total} mutants, {len(mutants)} drawn; tests {' '.join(tests)} take {secs:.1f} s")
    name = module_name(path)
    for e in equivalent:   # an entry that names no mutant any more (the code moved on) is said, not hidden
        if e.get("module") == module and not any(_match(m, module, [e]) is not None for m in list_mutants(path)):
            log(f"{module}: equivalent entry matches no mutant now: {e.get('function', '')}: {e.get('change')} "
                f"| {e.get('code')}")
    for m in mutants:
        why = _match(m, module, equivalent)
        if why is not None:
            m.outcome, m.reason = "equivalent", why
            continue
        if m.line not in covered and m.stmt_line not in covered:
            m.outcome = "not covered"
            continue
        m.outcome, _, _ = _run_pytest_child(tests, {**env, ENV_MUTANT: f"{name}|{path}|{m.index}"},
                                            timeout)
        log(f"  {module}:{m.line}:{m.col + 1} {m.change}: {m.outcome}")
    count = {k: sum(m.outcome == k for m in mutants) for k in ("killed", "timeout", "survived",
                                                                 "not covered", "equivalent")}
    count["killed"] += count["timeout"]   # an endless loop is caught (as cosmic-ray counts it)
    counted = len(mutants) - count["equivalent"]
    return {"module": module, "mutants_total": total, "mutants": len(mutants), **count,
            "score": count["killed"] / counted if counted else None,
            "tests": tests,
            "survivors": [{"where": f"{module}:{m.line}:{m.col + 1}", "function": m.function,
                           "change": m.change, "code": m.code, "occurrence": m.occurrence,
                           "outcome": m.outcome}
                          for m in mutants if m.outcome in ("survived", "not covered")]}


#: modules that moved when plan/ got its rooms (issue 23): the old path is read as the new one
MOVED = {f"scripts/ditpar/plan/{old}.py": f"scripts/ditpar/plan/{room}/{old.split('/')[-1]}.py"
         for old, room in (("gates", "decide"), ("cost/rank", "decide"), ("presets", "inputs"),
                           ("frameworks", "inputs"), ("topology", "inputs"), ("calibration", "inputs"),
                           ("custom_model", "inputs"), ("report", "decide"), ("shortlist", "decide"),
                           ("uncertainty", "decide"), ("calibrated", "decide"), ("evaluate", "judge"),
                           ("heldout", "judge"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--module", action="append", metavar="PATH",
                    help="module to mutate, relative to the repository root (repeatable; default: "
                         "the core modules in TESTS)")
    ap.add_argument("--tests", action="append", metavar="PATH",
                    help="test files to run instead of the module's mapped ones (repeatable)")
    ap.add_argument("--sample", type=int, metavar="N", help="draw N mutants per module")
    ap.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the draw (default 0)")
    ap.add_argument("--equivalent", type=Path, default=EQUIVALENT, metavar="TOML",
                    help="file of survivors judged equivalent (default tools/mutation/mutation_equivalent.toml)")
    ap.add_argument("--json", action="store_true", help="JSON on stdout")
    ap.add_argument("--quiet", action="store_true", help="no per-mutant progress on stderr")
    args = ap.parse_args(argv)
    modules = [normalise(m) for m in args.module] if args.module else DEFAULT_MODULES
    for i, mod in enumerate(modules):   # paths from before plan/ was split into rooms (issue 23) still work
        if mod in MOVED:
            print(f"mutation_score.py: note: {mod} is now {MOVED[mod]}", file=sys.stderr)
            modules[i] = MOVED[mod]
    for mod in modules:
        if not (ROOT / mod).is_file():
            print(f"mutation_score.py: {mod}: no such module under {ROOT}", file=sys.stderr)
            return 2
        if mod not in TESTS and not args.tests:
            print(f"mutation_score.py: {mod}: no test files mapped (known: {', '.join(TESTS)}); "
                  "name them with --tests", file=sys.stderr)
            return 2
    missing = sorted({t for mod in modules for t in (args.tests or TESTS.get(mod, [])) if not (ROOT / t).is_file()})
    if missing:
        print(f"mutation_score.py: test file(s) not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.sample is not None and args.sample < 1:
        print("mutation_score.py: --sample must be at least 1", file=sys.stderr)
        return 2
    try:
        equivalent = load_equivalent(args.equivalent)
    except (OSError, tomllib.TOMLDecodeError) as e:
        print(f"mutation_score.py: {args.equivalent}: {e}", file=sys.stderr)
        return 2
    os.chdir(ROOT)
    hook = _hook_dir()
    hook_env = {"PYTHONPATH": os.pathsep.join(p for p in (hook, os.environ.get("PYTHONPATH")) if p),
                "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    for lib in ("numpy", "pandas", "pyarrow", "pyarrow.csv", "msgspec", "pytest", "hypothesis"):
        try:   # imported once here, so each forked mutant run starts warm
            __import__(lib)
        except ImportError:
            pass
    _warm_pytest()
    log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    results = [score_module(mod, [str(t) for t in (args.tests or TESTS[mod])], args.sample, args.seed,
                            hook_env, equivalent, log) for mod in modules]
    if args.json:
        print(json.dumps({"seed": args.seed, "sample": args.sample, "modules": results}, indent=2))
        return 0
    print(f"{'module':<42} {'mutants':>7} {'killed':>6} {'survived':>8} {'not_covered':>11} "
          f"{'equivalent':>10} {'score':>6}")
    for r in results:
        score = f"{r['score']:.2f}" if r["score"] is not None else "-"
        print(f"{r['module'].removeprefix('scripts/ditpar/'):<42} {r['mutants']:>7} {r['killed']:>6} "
              f"{r['survived']:>8} {r['not covered']:>11} {r['equivalent']:>10} {score:>6}")
    for r in results:
        for s in r["survivors"]:
            nth = f" #{s['occurrence']}" if s["occurrence"] > 1 else ""
            print(f"{s['outcome']:<11} {s['where']} ({s['function'] or 'module'}): {s['change']}{nth}   "
                  f"| {s['code']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
