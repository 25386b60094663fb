"""What a run reads and writes: inputs registered and opened one way, outputs written one way.

Rules (references: README "Every script ..."):

- An output may not be an input of the same run: not the same file (also through a hard link, a
  symbolic link or another spelling of the path), and not a path inside an input folder. Every
  argument a script's parser reads that names an existing path is an input, unless its flag is an
  output (:func:`output_path`, :func:`plot_path`) or a work folder (:func:`work_folder`); readers add
  the files they find with :func:`register_input`.
- Two outputs of one run may not name the same file; an empty name is refused.
- A regular file (or a new name) is written to a temporary file beside it and renamed into place,
  only when the run ends with exit 0 or 1; on exit 2 nothing is written.
- A symbolic link is never replaced: one that leads to a FIFO, a terminal, ``/dev/null`` or this
  process's stdout/stderr is written through (that is what ``--csv /dev/stdout`` means); one that
  leads to a regular file, nowhere or round in a loop is refused (name the file itself).
- A FIFO or character device is written through, never replaced; a FIFO must have a reader when it
  is named (else the run would hang), and gets the data only if the run succeeds. Block devices and
  sockets are refused.
- An input named by the user is read whole by :func:`read_input`: a regular file, or a FIFO or
  pipe such as ``<(...)`` read once (a FIFO that no writer opens within FIFO_WAIT_S is an error,
  not a hang); a character device (``/dev/zero`` never ends) is refused; :func:`decode_text` drops a UTF-8 byte-order mark and names UTF-16 and other
  non-UTF-8 bytes with the file; :func:`input_problem` says why a path cannot be read (a dangling
  link, a loop, a FIFO among a profile's files, a folder where a file belongs).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ditpar.errors import InputError

PLOT_FORMATS = {".png": "png", ".pdf": "pdf", ".svg": "svg"}


# ---- what a run reads and writes -------------------------------------------------------------

@dataclass
class _Input:
    real: str
    ident: tuple[int, int] | None
    folder: bool
    named: str


_inputs: dict[str, _Input] = {}          # realpath -> input
_named_outputs: dict[str, str] = {}      # flag -> path, as parsed
_pending: list[_Pending] | None = None   # outputs held by cli.run until the run ends


def reset() -> None:
    """Forget the inputs and outputs of an earlier run (cli.run calls this when it ends)."""
    _inputs.clear()
    _named_outputs.clear()


def register_input(path: str | os.PathLike[str]) -> None:
    """Note a file or folder this run reads: no output may replace it or lie inside it."""
    text = os.fspath(path)
    if not text or text == "-":
        return
    try:
        st = os.stat(text)
    except (OSError, ValueError):
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return  # a FIFO or device read as input has no contents an output could overwrite
    real = os.path.realpath(text)
    _inputs[real] = _Input(real, (st.st_dev, st.st_ino), stat.S_ISDIR(st.st_mode), text)


def is_input(path: str | os.PathLike[str]) -> bool:
    """Whether path is a file this run reads: a registered input, or a file inside an input folder."""
    text = os.fspath(path)
    if not os.path.isfile(text):
        return False
    real = os.path.realpath(text)
    return any(real == inp.real or (inp.folder and real.startswith(inp.real.rstrip(os.sep) + os.sep))
               for inp in _inputs.values())


def _input_clash(path: str, st: os.stat_result | None) -> str | None:
    """Why path may not be written as an output of this run, or None."""
    real = os.path.realpath(path)
    for inp in _inputs.values():
        if inp.folder and (real == inp.real or real.startswith(inp.real.rstrip(os.sep) + os.sep)):
            return f"lies inside the input folder {inp.named}; write outputs elsewhere"
        if not inp.folder and (real == inp.real or (st is not None and inp.ident == (st.st_dev, st.st_ino))):
            same = "" if inp.named == path else f" (the same file as {inp.named})"
            return f"is an input of this run{same}; an output never replaces an input"
    if st is not None and st.st_nlink > 1:  # a hard link to a file inside an input folder
        for inp in _inputs.values():
            found = _find_inode(inp.real, (st.st_dev, st.st_ino)) if inp.folder else None
            if found:
                return f"is a hard link to {found}, inside the input folder {inp.named}; write outputs elsewhere"
    return None


def _find_inode(folder: str, ident: tuple[int, int], limit: int = 200_000) -> str | None:
    """The path of the file with this (device, inode) under folder (at most `limit` entries looked at)."""
    seen = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            seen += 1
            path = os.path.join(root, name)
            st = _lstat(path)
            if st is not None and (st.st_dev, st.st_ino) == ident:
                return path
            if seen >= limit:
                return None
    return None


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


# ---- opening inputs ---------------------------------------------------------------------------

MAX_STREAM_BYTES = 4 << 30   # a FIFO or <(...) is read whole into memory: a writer that never stops is an error
FIFO_WAIT_S = 10.0  # how long a FIFO named as input may stay without a writer before that is an error


def os_error_text(exc: OSError, name: str | os.PathLike[str] | None = None) -> str:
    """One line for an OSError met on an input: the file, and what is wrong in words."""
    if name is None and not exc.filename:
        return f"{exc.strerror or exc} (an operating-system error with no file named)"
    path = os.fspath(name if name is not None else exc.filename)
    if exc.errno == errno.ELOOP:
        return f"{path}: is a symbolic link in a loop (it leads back to itself)"
    if isinstance(exc, FileNotFoundError) and os.path.islink(path):
        return f"{path}: is a symbolic link to {os.readlink(path)}, which does not exist"
    if isinstance(exc, FileNotFoundError):
        return f"{path}: no such file or folder"
    if isinstance(exc, PermissionError):
        return f"{path}: permission denied (this user may not read it)"
    if isinstance(exc, IsADirectoryError):
        return f"{path}: is a folder; expected a file"
    if isinstance(exc, NotADirectoryError):
        return f"{path}: a part of this path is a file, not a folder"
    return f"{path}: cannot read ({exc.strerror or exc})"


def input_problem(path: str | os.PathLike[str], want: str = "file", streams: bool = False) -> str | None:
    """Why path cannot be read as want ("file", "folder" or "any"), or None; streams: FIFOs and pipes are fine."""
    text = os.fspath(path)
    try:
        st = os.stat(text)
    except OSError as exc:
        return os_error_text(exc, text)
    if stat.S_ISDIR(st.st_mode):
        return None if want in ("folder", "any") else f"{text}: is a folder; expected a file"
    if want == "folder":
        return f"{text}: is a file; expected a folder"
    if stat.S_ISREG(st.st_mode) or (streams and stat.S_ISFIFO(st.st_mode)):
        return None
    if stat.S_ISCHR(st.st_mode):  # /dev/zero or /dev/urandom never end, a terminal waits for typing: never read
        return (f"{text}: is a device, not a file; name a saved file, a FIFO or <(...)" if streams
                else f"{text}: is a device, not a regular file; the tools read saved files")
    kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file"
    return f"{text}: is {kind}, not a regular file; the tools read saved files"


def read_input(path: str | os.PathLike[str], work_file: bool = False) -> bytes:
    """All bytes of an input named by the user: a file, a FIFO or a pipe such as <(...), read once.

    work_file: the run's own progress file (a resumed matrix), read and then rewritten on purpose.
    """
    text = os.fspath(path)
    why = input_problem(text, "file", streams=True)
    if why:
        raise InputError(why)
    if not work_file:
        register_input(text)
    try:
        if is_stream(text):
            return _read_stream(text)
        with open(text, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise InputError(os_error_text(exc, text)) from None


def open_input(path: str | os.PathLike[str]) -> BinaryIO:
    """A binary handle on an input named by the user, for readers that stream a large file: a regular
    file opened as it is, a FIFO or pipe read once into memory (never a hang), anything else refused."""
    text = os.fspath(path)
    why = input_problem(text, "file", streams=True)
    if why:
        raise InputError(why)
    register_input(text)
    try:
        if is_stream(text):
            return io.BytesIO(_read_stream(text))
        return open(text, "rb")  # noqa: SIM115 - the caller closes it
    except OSError as exc:
        raise InputError(os_error_text(exc, text)) from None


def regular_input(path: str | os.PathLike[str]) -> str:
    """The path of an input that a library opens by name itself (SQLite): a regular file, registered;
    a FIFO, device, folder or dangling link is one InputError, never a hang."""
    text = os.fspath(path)
    why = input_problem(text, "file")
    if why:
        raise InputError(why)
    register_input(text)
    return text


def _read_stream(path: str) -> bytes:
    """Read a FIFO or pipe to its end; a FIFO that no writer opens within FIFO_WAIT_S is an error, not a hang."""
    import select

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        if not poller.poll(int(FIFO_WAIT_S * 1000)):
            raise InputError(f"{path}: no writer opened this FIFO within {FIFO_WAIT_S:g} s")
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > MAX_STREAM_BYTES:
                raise InputError(f"{path}: a stream of more than {MAX_STREAM_BYTES / 2**30:g} GiB; the tools read "
                                 "a pipe whole, so save a larger input to a file")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


_ANSI = None


def _utf16(data: bytes) -> bool:
    return data.startswith((b"\xff\xfe", b"\xfe\xff")) or (
        len(data) >= 4 and data[1:4:2] == b"\0\0" and data[0:4:2] != b"\0\0")


def decode_log(data: bytes, where: str) -> str:
    """Text of a program's log: stray non-UTF-8 bytes replaced, but a UTF-16 log named (never matched blindly)."""
    if _utf16(data):
        raise InputError(f"{where}: is UTF-16 text (as Windows PowerShell saves it); convert it to UTF-8, "
                         f"e.g. iconv -f UTF-16 -t UTF-8")
    return data.decode("utf-8", errors="replace")


def decode_text(data: bytes, where: str, strip_ansi: bool = False) -> str:
    """UTF-8 text of an input: a UTF-8 byte-order mark dropped, UTF-16/32 and other bytes named, not guessed."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    elif _utf16(data):
        raise InputError(f"{where}: is UTF-16 text (as Windows PowerShell saves it); convert it to UTF-8, "
                         f"e.g. iconv -f UTF-16 -t UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    if strip_ansi and "\x1b" in text:
        import re

        global _ANSI
        _ANSI = _ANSI or re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
        text = _ANSI.sub("", text)
    return text


def read_input_text(path: str | os.PathLike[str], strip_ansi: bool = False, work_file: bool = False) -> str:
    """The UTF-8 text of an input (file, FIFO or pipe), with every failure named by :func:`decode_text`."""
    return decode_text(read_input(path, work_file), os.fspath(path), strip_ansi)


# ---- argparse types --------------------------------------------------------------------------

def output_path(text: str) -> str:
    """argparse type of every output flag: a non-empty file name (checked against inputs after parsing)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file name to write, got an empty name")
    return text


def plot_path(text: str) -> str:
    """argparse type of --plot: an output whose name ends in .png, .pdf or .svg (the format drawn)."""
    output_path(text)
    if Path(text).suffix.lower() not in PLOT_FORMATS and not is_stream(text):
        raise argparse.ArgumentTypeError(f"expected a name ending in .png, .pdf or .svg, got {text!r}")
    return text


def work_folder(text: str) -> str:
    """argparse type of a folder a tool both reads and writes (fewstep run --logdir): not an input."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder name, got an empty name")
    return text


OUTPUT_TYPES = (output_path, plot_path)
# flags that name a result file in every tool: outputs even where a parser forgot the type
OUTPUT_FLAGS = frozenset({"--csv", "--plot", "--out", "--emit-matrix", "--matrix"})


def note_arguments(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> str | None:
    """After parsing: register input paths, record outputs; return why the outputs are refused, or None."""
    _note(parser, namespace)
    return _check_named_outputs()


def _note(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> None:
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its actions there
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001 - the chosen subcommand's flags too
            chosen = action.choices.get(getattr(namespace, action.dest, None) or "")
            if chosen is not None:
                _note(chosen, namespace)
            continue
        if action.dest in (argparse.SUPPRESS, "help") or not hasattr(namespace, action.dest):
            continue
        value = getattr(namespace, action.dest)
        flag = action.option_strings[-1] if action.option_strings else action.dest
        if action.type in OUTPUT_TYPES or OUTPUT_FLAGS.intersection(action.option_strings):
            if value is not None:
                _named_outputs[flag] = value
        elif action.type is not work_folder:
            for text in _strings(value):
                if os.path.lexists(text):
                    register_input(text)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _check_named_outputs() -> str | None:
    seen: dict[tuple, str] = {}
    for flag, path in _named_outputs.items():
        st = _stat(path)
        if st is not None and _is_stream_stat(st):
            continue  # two flags may both write through to /dev/null or a terminal
        key = ("id", st.st_dev, st.st_ino) if st is not None else ("path", os.path.realpath(path))
        if key in seen:
            return f"{seen[key]} and {flag} name the same file {path}; give each output its own file"
        seen[key] = flag
        why = refusal(path)
        if why:
            return f"{flag} {why}"
    return None


# ---- checking a target -----------------------------------------------------------------------

def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def _is_stream_stat(st: os.stat_result) -> bool:
    return stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)


def is_stream(path: str) -> bool:
    """Whether path leads to a FIFO or character device (written through, never replaced)."""
    st = _stat(path)
    return st is not None and _is_stream_stat(st)


def _std_fd(st: os.stat_result) -> int | None:
    """1 or 2 when st is this process's stdout or stderr (a terminal, pipe or redirected file)."""
    for fd in (1, 2):
        with contextlib.suppress(OSError, ValueError):
            own = os.fstat(fd)
            if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
                return fd
    return None


@dataclass
class _Pending:
    target: str
    kind: str                 # "file" (temporary beside it, renamed) or "fd" (written through)
    tmp: str | None = None
    fd: int | None = None
    data: str | bytes = b""


def _link_refusal(target: str) -> str:
    try:
        dest = os.readlink(target)
    except OSError:
        dest = "?"
    try:
        os.stat(target)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{target}: is a symbolic link in a loop (-> {dest}); name a regular file to write"
        return f"{target}: is a symbolic link to {dest}, which does not exist; name the file itself"
    return (f"{target}: is a symbolic link to {os.path.realpath(target)}; an output is never written "
            "through a link to a file (name the file itself)")


def prepare(path: str | os.PathLike[str], data: str | bytes) -> _Pending:
    """Check an output target and get it ready to receive data (a temporary file or an open stream)."""
    target = os.fspath(path)
    st = _stat(target)
    if target.strip() and st is not None and (_is_stream_stat(st) or _std_fd(st) is not None):
        return _prepare_stream(target, st, data)
    why = refusal(target)
    if why:
        raise InputError(why)
    return _Pending(target, "file", tmp=_write_temp(target, os.path.dirname(target) or ".", data, st))


def refusal(target: str) -> str | None:
    """Why target cannot be an output of this run (checked without writing anything), or None."""
    if not target.strip():
        return "an output file name is empty; name a file to write"
    st = _stat(target)
    if st is not None and (_is_stream_stat(st) or _std_fd(st) is not None):
        return None  # written through when the run ends (a FIFO's reader is checked then)
    if st is not None and stat.S_ISDIR(st.st_mode):
        return f"{target}: is a folder; expected a file name to write"
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a block device" if stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) \
            else "not a regular file"
        return f"{target}: is {kind}; name a regular file, a FIFO or /dev/stdout to write"
    why = _input_clash(target, st)
    if why:
        return f"{target}: {why}"
    if os.path.islink(target):
        return _link_refusal(target)
    if st is not None and (not st.st_mode & 0o222 or not os.access(target, os.W_OK)):
        return (f"{target}: is read-only (mode {stat.S_IMODE(st.st_mode):04o}) for this user; an output never "
                "replaces a file its owner protected (make it writable or name another file)")
    directory = os.path.dirname(target) or "."
    if not os.path.isdir(directory):
        return f"{target}: folder {directory} does not exist"
    return None


def _prepare_stream(target: str, st: os.stat_result, data: str | bytes) -> _Pending:
    std = _std_fd(st)
    if std is not None:  # --csv /dev/stdout: through our own descriptor, so a redirect keeps its offset
        return _Pending(target, "fd", fd=os.dup(std), data=data)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise InputError(f"{target}: is a FIFO with no reader; start the reader first "
                             "(writing would wait for ever)") from None
        raise InputError(f"{target}: cannot write ({exc.strerror})") from None
    os.set_blocking(fd, True)
    return _Pending(target, "fd", fd=fd, data=data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_temp(target: str, directory: str, data: str | bytes, old: os.stat_result | None = None) -> str:
    """Write data into a temporary file beside target: with the mode (and, where allowed, the owner) of the
    file it replaces, else the mode a new file gets (umask), so a private 600 file stays private."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", dir=directory)
    except OSError as exc:
        raise InputError(f"{target}: cannot write ({exc.strerror})") from None
    try:
        if old is not None:
            with contextlib.suppress(OSError):   # only root may give a file away; others keep their own
                os.fchown(fd, old.st_uid, old.st_gid)
        os.fchmod(fd, stat.S_IMODE(old.st_mode) if old is not None else 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(_bytes(data))
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise InputError(f"{target}: cannot write ({exc.strerror})") from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def _bytes(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8")


def commit(item: _Pending) -> None:
    """Put one prepared output in place (rename, or write through to the stream)."""
    try:
        if item.kind == "file":
            try:
                os.replace(item.tmp, item.target)
            except OSError as exc:
                raise InputError(f"{item.target}: cannot write ({exc.strerror})") from None
        else:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    stream.flush()
            view = memoryview(_bytes(item.data))
            try:
                while view:
                    view = view[os.write(item.fd, view):]
            except OSError as exc:
                raise InputError(f"{item.target}: cannot write ({exc.strerror})") from None
    finally:
        discard(item)


def discard(item: _Pending) -> None:
    """Drop a prepared output: remove its temporary file, close its stream unwritten."""
    if item.tmp is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(item.tmp)
        item.tmp = None
    if item.fd is not None:
        with contextlib.suppress(OSError):
            os.close(item.fd)
        item.fd = None


# ---- the two ways to write -------------------------------------------------------------------

def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write one file whole, now (progress files of long runs), under the same rules as outputs."""
    commit(prepare(path, data))


def write_output(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write a tool's result file (--csv, --plot, --out): whole, and only if the whole run succeeds.

    Inside cli.run the target is checked and prepared now (so a bad path fails early) and put in
    place when the tool ends with exit 0 or 1; outside it, this is :func:`write_atomic`.
    """
    target = os.fspath(path)
    if _pending is None:
        write_atomic(target, data)
        return
    for other in _pending:
        if _same_target(other.target, target):
            raise InputError(f"{target}: named for two outputs ({other.target}); give each output its own file")
    _pending.append(prepare(target, data))


def _same_target(a: str, b: str) -> bool:
    """Whether two output names reach one regular file (streams such as /dev/null may be shared)."""
    sa, sb = _stat(a), _stat(b)
    if sa is not None and sb is not None:
        return not _is_stream_stat(sa) and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
    return os.path.realpath(a) == os.path.realpath(b)


def begin() -> list[_Pending] | None:
    """Start holding outputs (cli.run); returns the outer run's list to restore."""
    global _pending
    outer, _pending = _pending, []
    return outer


def commit_all() -> None:
    """Put every held output in place (the run succeeded)."""
    global _pending
    pending, _pending = _pending or [], []
    try:
        for item in pending:
            commit(item)
    finally:
        for item in pending:
            discard(item)


def end(outer: list[_Pending] | None) -> None:
    """Discard what is still held (the run failed) and restore the outer run's list."""
    global _pending
    for item in _pending or []:
        discard(item)
    _pending = outer
    if outer is None:
        reset()
