"""Few-step matrix runner: launch configs, time interleaved few/anchor runs, keep logs, resume.

Two modes. Launch mode (``--launch`` only): one process per run, the step count is a launch-level
parameter. Server mode (``--launch`` + ``--request``): one server per config, warm-up requests first,
then few and anchor requests interleaved A-B / B-A. Every log is kept; the matrix CSV is rewritten
atomically after each run, so an interrupted matrix is valid and the next call resumes it.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ditpar import files, formats
from ditpar.cli import dumps_json, write_atomic
from ditpar.errors import InputError
from ditpar.fewstep.logs import (
    UNITS,
    ExtractError,
    Extractor,
    check_template,
    compile_regex,
    render,
    render_regex,
)
from ditpar.fewstep.matrix import read_matrix, write_matrix

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
BUILTIN = {
    "launch": ("config", "devices", "steps", "tier", "repeat", "out", "logdir"),
    "server": ("config", "devices", "port", "logdir"),
    "request": ("config", "devices", "steps", "tier", "repeat", "out", "port", "logdir"),
}
_REQUEST_LEVEL = "is request-level; in server mode put it in --request, not --launch"


@dataclass(frozen=True)
class Config:
    """One parallel configuration: a name and its fields (``devices`` is required)."""

    name: str
    fields: dict[str, str]
    devices: int
    ranks: int

    @property
    def tags(self) -> str:
        """Config fields other than devices and launch, as ``k=v;k=v`` (the matrix tags column)."""
        return ";".join(f"{k}={v}" for k, v in self.fields.items() if k not in ("devices", "launch"))

    @property
    def values(self) -> dict[str, str]:
        """Placeholder values of the config's fields (its own launch template is not one)."""
        return {k: v for k, v in self.fields.items() if k != "launch"}


def parse_config(tokens: Sequence[str]) -> Config:
    """``NAME key=value ...`` -> Config; ``devices`` is required, ``ranks`` defaults to devices."""
    if not tokens:
        raise InputError("--config: expected NAME key=value ...")
    name, *pairs = tokens
    if not _NAME.fullmatch(name):
        raise InputError(f"--config {name!r}: a name is letters, digits and _.+- (it names a folder)")
    fields: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise InputError(f"--config {name}: {pair!r} is not key=value")
        if key in BUILTIN["request"] and key not in ("devices",):
            raise InputError(f"--config {name}: field {key!r} clashes with a built-in placeholder")
        fields[key] = value
    for key in ("devices", "ranks"):
        if key in fields and not re.fullmatch(r"[1-9][0-9]*", fields[key]):
            raise InputError(f"--config {name}: {key}={fields[key]!r} is not a positive integer")
    if "devices" not in fields:
        raise InputError(f"--config {name}: devices=N is required (card count; only same-card-count "
                         "configs are ranked against each other)")
    devices = int(fields["devices"])
    return Config(name, fields, devices, int(fields.get("ranks", devices)))


@dataclass
class Settings:
    """Everything a run needs; stored in LOGDIR/manifest.json for --parse-only and resume checks."""

    configs: list[Config]
    few_steps: int
    anchor_steps: int
    repeats: int
    launch: str | None      # per run or per server; a config's own launch= field replaces it (launch mode)
    dit_regex: str
    logdir: Path
    matrix: Path
    request: str | None = None
    ready_regex: str | None = None
    ready_timeout_s: float = 600.0
    settle_s: float = 5.0
    dit_unit: str = "s"
    share_regex: str | None = None
    iters_regex: str | None = None
    expect: list[str] = field(default_factory=list)
    warmup: int | None = None
    warmup_steps: int | None = None
    timeout_s: float = 3600.0
    timing: str = "dit"
    progress: Any = field(default=sys.stderr, repr=False)

    @property
    def server(self) -> bool:
        return self.request is not None

    @property
    def n_warmup(self) -> int:
        """Warm-up requests discarded per launch: 1 by default with a server, 0 per-run launches."""
        if self.warmup is not None:
            return self.warmup
        return 1 if self.server else 0

    def warmup_meaning(self) -> dict[str, Any]:
        """What --warmup did in this mode: the two modes discard different things (say which)."""
        n = self.n_warmup
        if self.server:
            steps = self.warmup_steps or self.anchor_steps
            return {"mode": "server", "requests": n, "steps": steps,
                    "meaning": f"the runner sent {n} untimed request(s) of {steps} steps to each server "
                               "after it was ready, before the first timed request"}
        return {"mode": "launch", "requests": n, "steps": None,
                "meaning": f"each run's own process must print {n} warm-up request(s) before the timed one; "
                           f"the runner sends nothing and discards the first {n} request(s) found in the "
                           "run's log"}


def validate(s: Settings) -> None:
    """Check every template, regex and number before anything is launched."""
    if not s.configs:
        raise InputError("run: give at least one --config NAME devices=N ...")
    names = [c.name for c in s.configs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"--config: duplicate name(s) {dup}")
    if s.few_steps < 1 or s.anchor_steps <= s.few_steps:
        raise InputError(f"--few-steps {s.few_steps} / --anchor-steps {s.anchor_steps}: need "
                         "1 <= few < anchor")
    if s.repeats < 1:
        raise InputError("--repeats must be >= 1 (and >= 3 for evidence)")
    if s.warmup is not None and s.warmup < 0:
        raise InputError("--warmup must be >= 0")
    if s.warmup_steps is not None and not s.server:
        raise InputError("--warmup-steps: only in server mode (with --request); in launch mode the run's "
                         "own process runs its warm-up requests, at whatever steps it chooses")
    if s.timing not in ("dit", "e2e"):
        raise InputError(f"--timing {s.timing!r}: expected dit or e2e")
    if s.timeout_s <= 0:
        raise InputError("--timeout-s must be > 0")
    if s.dit_unit not in UNITS:
        raise InputError(f"--dit-unit {s.dit_unit!r}: one of {sorted(UNITS)}")
    fields = {c.name: c.values for c in s.configs}
    own = [c.name for c in s.configs if "launch" in c.fields]
    if s.server and own:
        raise InputError(f"--config {own[0]}: a launch= field is for launch mode; a server takes --launch")
    lacking = [c.name for c in s.configs if "launch" not in c.fields]
    if lacking and not s.launch:
        raise InputError(f"--launch: missing, and config(s) {lacking} have no launch= field of their own")
    if s.server:
        check_template(s.launch, "--launch", BUILTIN["server"], fields,
                       {k: _REQUEST_LEVEL for k in ("steps", "tier", "repeat", "out")})
        check_template(s.request or "", "--request", BUILTIN["request"], fields)
        if not s.ready_regex:
            raise InputError("--request needs --ready-regex (a line the server prints when it is ready)")
        compile_regex(s.ready_regex, "--ready-regex", None)
    else:
        for c in s.configs:
            what = f"--config {c.name} launch=" if "launch" in c.fields else "--launch"
            names_ = check_template(launch_template(s, c), what, BUILTIN["launch"], {c.name: c.values},
                                    {"port": "only exists in server mode (with --request)"})
            if "steps" not in names_:
                raise InputError(f"{what}: without --request the launch template must contain {{steps}}")
    compile_regex(s.dit_regex, "--dit-regex", "dit_s")
    if s.share_regex:
        compile_regex(s.share_regex, "--share-regex", "share")
    if s.iters_regex:
        compile_regex(s.iters_regex, "--iters-regex", "iters")
    for pattern in s.expect:
        check_template(pattern, "--expect", ("config", "devices"), fields)
        for c in s.configs:
            compile_regex(render_regex(pattern, {**c.fields, "config": c.name, "devices": c.devices}),
                          f"--expect (config {c.name})", None)


def launch_template(s: Settings, cfg: Config) -> str:
    """The command template of one config: its own launch= field (plan.py --emit-matrix), else --launch."""
    return cfg.fields.get("launch") or s.launch or ""


def missing_contract(patterns: Sequence[str], cfg: Config, text: str) -> str | None:
    """The first --expect pattern (rendered for cfg) that the log does not contain, or None."""
    values = {**cfg.fields, "config": cfg.name, "devices": cfg.devices}
    for pattern in patterns:
        rendered = render_regex(pattern, values)
        if not re.search(rendered, text, re.MULTILINE):
            return rendered
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawn(command: str, log_path: Path) -> tuple[subprocess.Popen, Any]:
    """Start a shell command in its own session, output to log_path."""
    fh = open(log_path, "wb")
    proc = subprocess.Popen(["/bin/sh", "-c", command], stdout=fh, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    return proc, fh


def _run_to_end(command: str, log_path: Path, timeout_s: float) -> tuple[int | None, bool]:
    """Run one command with its output in log_path; (exit code or None, timed out). A command that
    outlives timeout_s is stopped with its whole process group."""
    proc, fh = _spawn(command, log_path)
    try:
        return proc.wait(timeout_s), False
    except subprocess.TimeoutExpired:
        return None, True
    finally:
        _stop(proc)
        fh.close()


def _stop(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """End the process group we started (SIGTERM, grace, SIGKILL); never anything else."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            pass


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _fresh(directory: Path, base: str) -> tuple[Path, Path, int]:
    """Log and sidecar paths for the next attempt of ``base`` (earlier attempts are kept)."""
    attempt = 1
    while True:
        stem = base if attempt == 1 else f"{base}.a{attempt}"
        log, meta = directory / f"{stem}.log", directory / f"{stem}.json"
        if not log.exists() and not meta.exists():
            return log, meta, attempt
        attempt += 1


def _read_from(path: Path, offset: int) -> str:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read().decode("utf-8", errors="replace")


class MatrixState:
    """The matrix being built: records, the finished-run set, and an atomic save after each run."""

    def __init__(self, logdir: Path, matrix: Path, few_steps: int, anchor_steps: int, timing: str = "dit",
                 save_each: bool = True):
        self.logdir, self.matrix, self.timing, self.save_each = logdir, matrix, timing, save_each
        self.steps = {"few": few_steps, "anchor": anchor_steps}
        self.records: list[dict[str, Any]] = []
        self.done: set[tuple[str, str, int]] = set()

    def add(self, cfg: Config, tier: str, repeat: int, request: dict, log: Path) -> None:
        """Append one run (one row per rank) and rewrite the matrix."""
        rel = os.path.relpath(log, self.logdir)
        for rank, dit_s in sorted(request["dit"].items()):
            self.records.append({
                "config": cfg.name, "tier": tier, "steps": request.get("iters") or self.steps[tier],
                "repeat": repeat,
                "rank": rank, "dit_s": dit_s, "devices": cfg.devices,
                "comm_exposed_share": None if request["share"] is None else request["share"][rank],
                "tags": cfg.tags, "timing": self.timing, "log": rel})
        self.done.add((cfg.name, tier, repeat))
        self.sort()
        if self.save_each:  # a live run keeps its progress; --parse-only writes once, at the end
            write_matrix(self.matrix, self.records)

    def sort(self) -> None:
        self.records.sort(key=lambda r: (r["config"], r["tier"] != "few", r["repeat"], r["rank"]))


class Runner:
    """Drives one matrix: skips finished runs, launches the rest, writes the matrix after each."""

    def __init__(self, s: Settings):
        validate(s)
        self.s = s
        self.x = Extractor(s.dit_regex, s.dit_unit, s.share_regex, s.iters_regex)
        self.m = MatrixState(s.logdir, s.matrix, s.few_steps, s.anchor_steps, s.timing)
        self.failed: list[str] = []

    @property
    def done(self) -> set[tuple[str, str, int]]:
        return self.m.done

    # ---- state -------------------------------------------------------------------------------
    def _load(self) -> None:
        """Load an existing matrix and check that it was made with the same contract."""
        s = self.s
        s.logdir.mkdir(parents=True, exist_ok=True)
        s.matrix.parent.mkdir(parents=True, exist_ok=True)
        manifest = s.logdir / "manifest.json"
        known: dict[str, dict[str, str]] = {}
        if manifest.exists():
            old = _read_manifest(s.logdir)
            if (old.get("few_steps"), old.get("anchor_steps")) != (s.few_steps, s.anchor_steps):
                raise InputError(f"{manifest}: this folder holds few/anchor steps "
                                 f"{old.get('few_steps')}/{old.get('anchor_steps')}, not "
                                 f"{s.few_steps}/{s.anchor_steps}; use another --logdir")
            known = old.get("configs", {})
            if old.get("timing", "dit") != s.timing:
                raise InputError(f"{manifest}: this folder holds {old.get('timing', 'dit')} times, the run "
                                 f"asks for --timing {s.timing}; use another --logdir")
        for c in s.configs:
            if c.name in known and known[c.name] != c.fields:
                raise InputError(f"{manifest}: config {c.name} was {known[c.name]}, now {c.fields}; "
                                 "a changed config is a new contract: rename it or use another --logdir")
            known[c.name] = c.fields
        doc = {"few_steps": s.few_steps, "anchor_steps": s.anchor_steps, "repeats": s.repeats,
               "mode": "server" if s.server else "launch", "launch": s.launch, "request": s.request,
               "dit_regex": s.dit_regex, "dit_unit": s.dit_unit, "share_regex": s.share_regex,
               "iters_regex": s.iters_regex, "expect": s.expect, "warmup": s.n_warmup, "timing": s.timing, "configs": known}
        if s.matrix.exists():
            for r in read_matrix(s.matrix, work_file=True, skip_planned=True):  # resumed, or a plan.py skeleton
                cfg = next((c for c in s.configs if c.name == r.config), None)
                steps = self.m.steps[r.tier]
                if r.steps != steps and not s.iters_regex:
                    raise InputError(f"{s.matrix}: {r.config}/{r.tier} has steps {r.steps}, the run "
                                     f"asks for {steps}; use another --matrix")
                if cfg is not None and (r.tags != cfg.tags or r.devices != cfg.devices):
                    raise InputError(f"{s.matrix}: config {r.config} rows carry devices={r.devices} "
                                     f"tags={r.tags!r}, the run gives devices={cfg.devices} "
                                     f"tags={cfg.tags!r}")
                self.m.records.append(_record_from_row(r))
                self.m.done.add((r.config, r.tier, r.repeat))
            self.x.matched_any = bool(self.m.records)
        write_atomic(manifest, dumps_json(doc) + "\n")

    def _say(self, text: str) -> None:
        self.s.progress.write(f"fewstep run: {text}\n")
        self.s.progress.flush()

    # ---- execution ---------------------------------------------------------------------------
    def plan(self) -> list[tuple[Config, str, int]]:
        """Pending (config, tier, repeat) in execution order, finished ones left out."""
        order: list[tuple[Config, str, int]] = []
        if self.s.server:
            for cfg in self.s.configs:
                for rep in range(1, self.s.repeats + 1):
                    tiers = ("few", "anchor") if rep % 2 else ("anchor", "few")
                    order += [(cfg, t, rep) for t in tiers]
        else:
            for rep in range(1, self.s.repeats + 1):
                for i, cfg in enumerate(self.s.configs):
                    tiers = ("few", "anchor") if (rep + i) % 2 else ("anchor", "few")
                    order += [(cfg, t, rep) for t in tiers]
        return [x for x in order if (x[0].name, x[1], x[2]) not in self.done]

    def _values(self, cfg: Config, **extra: Any) -> dict[str, Any]:
        return {**cfg.values, "config": cfg.name, "devices": cfg.devices,
                "logdir": str(self.s.logdir), **extra}

    def _meta(self, path: Path, **doc: Any) -> None:
        write_atomic(path, dumps_json(doc) + "\n")

    def run(self) -> list[dict[str, Any]]:
        """Run every pending run; return all matrix records (old and new)."""
        self._load()
        pending = self.plan()
        self._say(f"{len(pending)} run(s) to do, {len(self.done)} already in {self.s.matrix}")
        self._say(f"warm-up ({self.s.warmup_meaning()['mode']} mode): {self.s.warmup_meaning()['meaning']}")
        old = signal.signal(signal.SIGTERM, _interrupt)
        try:
            if self.s.server:
                for cfg in self.s.configs:
                    mine = [p for p in pending if p[0] is cfg]
                    if mine:
                        self._serve(cfg, mine)
            else:
                for i, (cfg, tier, rep) in enumerate(pending, 1):
                    self._launch_run(cfg, tier, rep, f"[{i}/{len(pending)}]")
        finally:
            signal.signal(signal.SIGTERM, old)
        if self.failed:
            self._say(f"{len(self.failed)} run(s) failed: " + "; ".join(self.failed))
        return self.m.records

    def _launch_run(self, cfg: Config, tier: str, rep: int, label: str) -> None:
        s = self.s
        runs = s.logdir / cfg.name / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        log, meta, attempt = _fresh(runs, f"{tier}-r{rep}")
        steps = s.few_steps if tier == "few" else s.anchor_steps
        command = render(launch_template(s, cfg), self._values(cfg, steps=steps, tier=tier, repeat=rep,
                                                out=str(log.with_suffix(".out"))))
        start = time.monotonic()
        rc, timed_out = _run_to_end(command, log, s.timeout_s)
        wall = time.monotonic() - start
        status, reason = self._settle_run(cfg, tier, rep, log, rc, timed_out, s.n_warmup + 1, s.n_warmup,
                                          log)
        self._meta(meta, kind="measured", mode="launch", config=cfg.name, fields=cfg.fields,
                   tier=tier, steps=steps, repeat=rep, attempt=attempt, command=command, rc=rc,
                   timed_out=timed_out, wall_s=wall, status=status, reason=reason,
                   warmup_requests=s.n_warmup, log=log.name)
        self._say(f"{label} {cfg.name} {tier} r{rep}: {status}{' (' + reason + ')' if reason else ''}"
                  f" {wall:.2f} s, log {log}")

    def _settle_run(self, cfg: Config, tier: str, rep: int, log: Path, rc: int | None,
                    timed_out: bool, want: int, pick: int, contract_log: Path) -> tuple[str, str]:
        """Extract the measured request of a finished command and add it; return (status, reason).

        The run counts only if every --expect pattern is in contract_log (the run's own log, or the
        server log): a configuration that silently did not take effect is void.
        """
        key = f"{cfg.name}/{tier}/r{rep}"
        if timed_out:
            self.failed.append(f"{key} timed out after {self.s.timeout_s:g} s")
            return "timeout", f"killed after {self.s.timeout_s:g} s"
        text = files.read_input(log, work_file=True).decode("utf-8", errors="replace")   # this run's own log
        try:
            requests = self.x.extract(text, log, cfg.ranks, rc == 0, want)
        except ExtractError as exc:
            why = f"exit {rc}; {exc}" if rc else str(exc)
            self.failed.append(f"{key}: {why}")
            return "failed", why
        if rc != 0:
            self.failed.append(f"{key}: exit {rc}")
            return "failed", f"exit {rc}"
        if self.s.expect:
            contract_text = files.read_input(contract_log, work_file=True).decode("utf-8", errors="replace")
            missing = missing_contract(self.s.expect, cfg, contract_text)
            if missing:
                why = f"contract: --expect {missing!r} not found in {contract_log}"
                self.failed.append(f"{key}: {why}")
                return "void", why
        self.m.add(cfg, tier, rep, requests[pick], log)
        return "ok", ""

    def _serve(self, cfg: Config, pending: list[tuple[Config, str, int]]) -> None:
        s = self.s
        cdir = s.logdir / cfg.name
        runs = cdir / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        server_log, server_meta, attempt = _fresh(cdir, "server")
        port = _free_port()
        command = render(s.launch, self._values(cfg, port=port))
        ready = re.compile(s.ready_regex or "", re.MULTILINE)
        proc, fh = _spawn(command, server_log)
        state = "ready"
        try:
            start = time.monotonic()
            while not ready.search(_read_from(server_log, 0)):
                if proc.poll() is not None:
                    state = f"exited {proc.returncode} before ready"
                    break
                if time.monotonic() - start > s.ready_timeout_s:
                    state = f"not ready after {s.ready_timeout_s:g} s"
                    break
                time.sleep(0.05)
            self._meta(server_meta, kind="server", config=cfg.name, fields=cfg.fields, command=command,
                       port=port, attempt=attempt, state=state, log=server_log.name)
            if state != "ready":
                for _, tier, rep in pending:
                    self.failed.append(f"{cfg.name}/{tier}/r{rep}: server {state}")
                self._say(f"{cfg.name}: server {state}; log {server_log}")
                return
            self._say(f"{cfg.name}: server ready on port {port}, log {server_log}")
            for k in range(1, s.n_warmup + 1):
                self._request(cfg, "warmup", k, s.warmup_steps or s.anchor_steps, port, server_log,
                              runs, measured=False)
            for i, (_, tier, rep) in enumerate(pending, 1):
                if proc.poll() is not None:
                    self.failed.append(f"{cfg.name}/{tier}/r{rep}: server exited {proc.returncode}")
                    continue
                steps = s.few_steps if tier == "few" else s.anchor_steps
                self._request(cfg, tier, rep, steps, port, server_log, runs, measured=True,
                              label=f"[{i}/{len(pending)}]")
        finally:
            _stop(proc)
            fh.close()

    def _request(self, cfg: Config, tier: str, rep: int, steps: int, port: int, server_log: Path,
                 runs: Path, measured: bool, label: str = "") -> None:
        s = self.s
        base = f"{tier}-r{rep}" if measured else f"warmup-{rep}"
        log, meta, attempt = _fresh(runs, base)
        req_log = log.with_suffix(".request.log")
        command = render(s.request or "", self._values(cfg, steps=steps, tier=tier, repeat=rep,
                                                       out=str(log.with_suffix(".out")), port=port))
        offset = server_log.stat().st_size
        start = time.monotonic()
        rc, timed_out = _run_to_end(command, req_log, s.timeout_s)
        # the server may flush its timing lines a little after the response: wait for them
        deadline = time.monotonic() + (s.settle_s if rc == 0 else 0.0)
        while True:
            segment = _read_from(server_log, offset)
            if self.x.complete(segment, cfg.ranks) or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        write_atomic(log, segment)
        wall = time.monotonic() - start
        if measured:
            status, reason = self._settle_run(cfg, tier, rep, log, rc, timed_out, 1, 0, server_log)
        else:
            status, reason = "warmup", ""
            if rc == 0 and not timed_out:
                try:
                    self.x.extract(segment, log, cfg.ranks, True, 1)
                except ExtractError as exc:
                    reason = str(exc)
        self._meta(meta, kind="measured" if measured else "warmup", mode="server", config=cfg.name,
                   fields=cfg.fields, tier=tier, steps=steps, repeat=rep, attempt=attempt,
                   command=command, rc=rc, timed_out=timed_out, wall_s=wall, status=status,
                   reason=reason, server_log=server_log.name, log=log.name,
                   request_log=req_log.name)
        if measured:
            self._say(f"{label} {cfg.name} {tier} r{rep}: {status}"
                      f"{' (' + reason + ')' if reason else ''} {wall:.2f} s, log {log}")
        else:
            self._say(f"warm-up {rep} of {cfg.name} ({steps} steps): discarded"
                      f"{' (' + reason + ')' if reason else ''} {wall:.2f} s, log {log}")


def _record_from_row(r: Any) -> dict[str, Any]:
    extra = dict(r.extra)
    return {"config": r.config, "tier": r.tier, "steps": r.steps, "repeat": r.repeat, "rank": r.rank,
            "dit_s": r.dit_s, "devices": r.devices, "comm_exposed_share": r.comm_exposed_share,
            "tags": r.tags, "timing": r.timing or "dit", "log": extra.get("log", "")}


def _read_manifest(logdir: Path) -> dict[str, Any]:
    path = logdir / "manifest.json"
    if not os.path.lexists(path):
        raise InputError(f"{path}: missing; {logdir} is not a folder written by fewstep run")
    doc = formats.json_text(files.read_input(path, work_file=True), str(path))
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected a JSON object (fewstep run's manifest), got {type(doc).__name__}")
    return doc


def parse_only(logdir: Path, matrix: Path, dit_regex: str | None = None, dit_unit: str | None = None,
               share_regex: str | None = None, progress: Any = sys.stderr
               ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rebuild the matrix from the kept logs of a run folder (latest clean attempt per run).

    Returns the records and the planned configs (name -> devices) from the manifest.

    The regex, unit and share regex default to those in LOGDIR/manifest.json; a log of a run that
    exited 0 in which the regex never matches is an input error naming that log.
    """
    if not logdir.is_dir():
        raise InputError(f"--parse-only {logdir}: not a folder")
    man = _read_manifest(logdir)
    pattern = dit_regex or man.get("dit_regex")
    if not pattern:
        raise InputError(f"{logdir}/manifest.json: no dit_regex; pass --dit-regex")
    share_pattern = share_regex if share_regex is not None else man.get("share_regex")
    x = Extractor(pattern, dit_unit or man.get("dit_unit") or "s", share_pattern, man.get("iters_regex"))
    expect = list(man.get("expect") or [])
    try:
        state = MatrixState(logdir, matrix, int(man["few_steps"]), int(man["anchor_steps"]),
                            str(man.get("timing", "dit")), save_each=False)
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{logdir}/manifest.json: few_steps / anchor_steps missing") from None
    latest: dict[tuple[str, str, int], dict[str, Any]] = {}
    for meta_path in sorted(logdir.glob("*/runs/*.json")):
        meta = formats.json_text(files.read_input(meta_path), str(meta_path))
        try:
            if meta.get("kind") != "measured" or meta.get("rc") != 0 or meta.get("timed_out"):
                continue
            key = (str(meta["config"]), str(meta["tier"]), int(meta["repeat"]))
            attempt = int(meta["attempt"])
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{meta_path}: unreadable run record ({type(exc).__name__}: {exc})") from None
        meta["_path"] = meta_path
        if key not in latest or attempt > int(latest[key]["attempt"]):
            latest[key] = meta
    if not latest:
        raise InputError(f"{logdir}: no finished run records (*/runs/*.json with rc 0)")
    for key in sorted(latest):
        meta = latest[key]
        fields = man.get("configs", {}).get(meta["config"]) or meta.get("fields") or {}
        cfg = parse_config([meta["config"], *(f"{k}={v}" for k, v in fields.items())])
        log = meta["_path"].parent / str(meta.get("log"))
        text = files.decode_log(files.read_input(log), str(log))  # registered: no output may replace it
        if not x.count(text):
            raise InputError(f"{log}: --dit-regex {pattern!r} never matched this log of a run that "
                             "exited 0")
        warm = int(meta.get("warmup_requests", 0)) if meta.get("mode") == "launch" else 0
        if int(meta["steps"]) != state.steps.get(meta["tier"]):
            raise InputError(f"{meta['_path']}: steps {meta['steps']}, manifest says "
                             f"{state.steps.get(meta['tier'])} for tier {meta['tier']}")
        try:
            requests = x.extract(text, log, cfg.ranks, True, warm + 1)
        except ExtractError as exc:
            progress.write(f"fewstep run: skipped {'/'.join(map(str, key))}: {exc}\n")
            continue
        if expect:
            where = meta["_path"].parent.parent / str(meta["server_log"]) if meta.get(
                "mode") == "server" else log
            missing = missing_contract(expect, cfg, files.decode_log(files.read_input(where), str(where)))
            if missing:
                progress.write(f"fewstep run: skipped {'/'.join(map(str, key))}: contract "
                               f"{missing!r} not in {where}\n")
                continue
        state.add(cfg, meta["tier"], int(meta["repeat"]), requests[warm], log)
    planned = {}
    for name, fields in man.get("configs", {}).items():
        planned[name] = parse_config([name, *(f"{k}={v}" for k, v in fields.items())]).devices
    return state.records, planned
