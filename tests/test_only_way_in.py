"""The safe readers are the only way in: no module of the library opens or parses a user's file itself.

A file is read through ``files.read_input`` / ``read_input_text`` / ``open_input`` / ``regular_input``
(FIFOs once and never a hang, devices refused, the input registered) and parsed through ``formats``
(every parser failure one InputError). This test reads the library's source and fails on any other call
that opens a path or parses a document, unless the list below says why that one is safe.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import SCRIPTS

PKG = SCRIPTS / "ditpar"
WAY_IN = {"files.py", "formats.py"}

# (module, call) -> why it may open or parse by itself
ALLOWED = {
    ("fewstep/run.py", "open"): "the run's own log files, created by this process for the command it starts",
    ("scope/recorder.py", "open"): "writes the shape records (an output, inside a model process)",
    ("comm/audit.py", "open"): "appends fingerprints to the audit sink (an output, inside a rank process)",
    ("hang/record.py", "json.loads"): "re-reads the dump torch itself just wrote in this process",
    ("readers/ascend/text.py", "open"): "kernel_details.csv's header, after files.regular_input (a saved file)",
    ("readers/ascend/text.py", "pacsv.read_csv"): "kernel_details.csv streamed by Arrow, after files.regular_input",
    ("readers/ascend/text.py", "pd.read_csv"): "a profiler CSV, after files.regular_input in _csv_header",
    ("readers/ascend/db.py", "sqlite3.connect"): "SQLite opens the db by name, after files.regular_input",
    ("readers/ascend/db.py", "open"): "the db's 100-byte header and its pages (mapped read-only for "
                                      "sqlite_pages), after files.regular_input (a saved file)",
}

OPENERS = {"open", "os.open", "gzip.open", "bz2.open", "lzma.open", "io.open", "sqlite3.connect",
           "tomllib.load", "tomllib.loads", "tomli.load", "json.load", "json.loads", "ast.literal_eval",
           "pickle.load", "pickle.loads", "pickle.Unpickler", "pd.read_csv", "pd.read_json", "pd.read_table",
           "pacsv.read_csv", "np.load", "np.loadtxt", "np.genfromtxt", "msgspec.json.decode"}
METHODS = {"read_text", "read_bytes", "open"}   # pathlib.Path's own readers


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return "?"


IN_MEMORY = {"io.StringIO", "io.BytesIO", "StringIO", "BytesIO"}


def _fixed_or_in_memory(node: ast.Call) -> bool:
    """The call reads no user path: a fixed system file ('/proc/meminfo', os.devnull) or text in memory."""
    if not node.args:
        return False
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith(("/proc/", "/dev/null")):
        return True
    if _name(first) == "os.devnull":
        return True
    return isinstance(first, ast.Call) and _name(first.func) in IN_MEMORY


def direct_reads(path: Path) -> list[tuple[int, str]]:
    """(line, call) of every call in one module that opens a path or parses a document itself."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or _fixed_or_in_memory(node):
            continue
        name = _name(node.func)
        if name in OPENERS:
            found.append((node.lineno, name))
        elif isinstance(node.func, ast.Attribute) and node.func.attr in METHODS and name not in OPENERS \
                and not name.startswith(("files.", "formats.")):
            found.append((node.lineno, f".{node.func.attr}"))
    return found


def test_no_module_opens_a_users_file_itself():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in WAY_IN:
            continue
        for line, call in direct_reads(path):
            if (rel, call) not in ALLOWED:
                bad.append(f"{rel}:{line} {call}")
    assert not bad, "read through ditpar.files / ditpar.formats instead:\n" + "\n".join(bad)


def test_the_scripts_open_nothing_themselves():
    bad = [f"{p.name}:{line} {call}" for p in sorted(SCRIPTS.glob("*.py")) for line, call in direct_reads(p)]
    assert not bad, "\n".join(bad)


def test_every_allowance_is_still_used():
    used = {(path.relative_to(PKG).as_posix(), call) for path in PKG.rglob("*.py") for _l, call in direct_reads(path)}
    assert set(ALLOWED) <= used, set(ALLOWED) - used


def test_the_check_sees_each_kind_of_direct_read(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import json, sqlite3\nfrom pathlib import Path\n"
                      "def f(p):\n    open(p)\n    Path(p).read_text()\n    sqlite3.connect(p)\n"
                      "    json.loads(Path(p).read_bytes())\n    files.read_input(p)\n"
                      "    open('/proc/meminfo')\n    pd.read_csv(io.StringIO(t))\n    os.open(os.devnull, 1)\n")
    assert [c for _l, c in direct_reads(module)] == ["open", ".read_text", "sqlite3.connect", "json.loads",
                                                      ".read_bytes"]
