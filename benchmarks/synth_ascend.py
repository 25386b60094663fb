"""Large Ascend ranks for benchmarks: one real rank tiled in time, in text and in db form (issue 25).

Text (``tile_text_rank``): kernel_details.csv as bench_readers tiles it, plus step_trace_time.csv,
communication.json and communication_matrix.json with one step per 100 tiles and every HCCL op renamed
per tile (``hcom_<op>__<ggg>_<index>_<iter>``, index unique), so msprof-analyze's text ``cluster``
mode has its own inputs. Db (``tile_db_rank``): ascend_pytorch_profiler_<R>.db with TASK,
COMPUTE_TASK_INFO, COMMUNICATION_TASK_INFO, COMMUNICATION_OP, CANN_API and STEP_TIME tiled the same
way (ids shifted per tile) and analysis.db with its communication tables tiled (CommAnalyzerMatrix once per
step, like the text form's communication_matrix.json: the profiler writes one matrix per step). The step figures
(step_trace_time.csv, StepTraceTime) repeat the real step's values: they are timing inputs, not
answers, so step_breakdown.py may report a disagreement (exit 1).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from decimal import Decimal
from pathlib import Path

TILES_PER_STEP = 100
OUT = "ASCEND_PROFILER_OUTPUT"
_OP_INDEX = re.compile(r"^(hcom_[A-Za-z]+__\d{3}_)(\d+)(_\d+)$")


def step_of(tile: int) -> int:
    return 1 + tile // TILES_PER_STEP


def renamed(op: str, tile: int, ops_per_tile: int) -> str:
    """The op name of tile ``tile``: its index moved past every earlier tile's ops (unique per rank)."""
    m = _OP_INDEX.match(op)
    if not m:
        return f"{op}_{tile}"
    return f"{m.group(1)}{int(m.group(2)) + ops_per_tile * tile}{m.group(3)}"


def tile_text_rank(src_rank: Path, dst_rank: Path, tiles: int, period_us: Decimal, rank: int) -> None:
    """step_trace_time.csv, communication.json, communication_matrix.json and metadata of ``tiles`` tiles
    (kernel_details.csv is written by bench_readers.tile_kernel_details)."""
    src, out = src_rank / OUT, dst_rank / OUT
    out.mkdir(parents=True, exist_ok=True)
    (dst_rank / f"profiler_info_{rank}.json").write_text(json.dumps({"rank_id": rank}))
    if (src_rank / "profiler_metadata.json").is_file():
        shutil.copy(src_rank / "profiler_metadata.json", dst_rank / "profiler_metadata.json")
    steps = sorted({step_of(t) for t in range(tiles)})
    lines = (src / "step_trace_time.csv").read_text(encoding="utf-8").splitlines()
    header, first = lines[0], lines[1].split(",")
    i_step = header.split(",").index("Step")
    rows = [",".join(first[:i_step] + [str(s)] + first[i_step + 1:]) for s in steps]
    (out / "step_trace_time.csv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    comm = json.loads((src / "communication.json").read_text(encoding="utf-8"))
    one = next(iter(comm.values()))
    ops = {k: v for k, v in one["collective"].items() if k != "Total Op Info"}
    doc: dict[str, dict] = {f"step{s}": {"p2p": {}, "collective": {}} for s in steps}
    for t in range(tiles):
        target = doc[f"step{step_of(t)}"]["collective"]
        for key, info in ops.items():
            name, _, group = key.partition("@")
            copy = json.loads(json.dumps(info))
            stamp = copy["Communication Time Info"]["Start Timestamp(us)"]
            copy["Communication Time Info"]["Start Timestamp(us)"] = float(Decimal(str(stamp)) + period_us * t)
            target[f"{renamed(name, t, len(ops))}@{group}"] = copy
    for s in steps:
        if "Total Op Info" in one["collective"]:
            doc[f"step{s}"]["collective"]["Total Op Info"] = one["collective"]["Total Op Info"]
    (out / "communication.json").write_text(json.dumps(doc), encoding="utf-8")
    if (src / "communication_matrix.json").is_file():  # the shipped ranks have none
        matrix = json.loads((src / "communication_matrix.json").read_text(encoding="utf-8"))
        body = next(iter(matrix.values()))
        (out / "communication_matrix.json").write_text(json.dumps({f"step{s}": body for s in steps}),
                                                       encoding="utf-8")


def tile_db_rank(src_rank: Path, dst_rank: Path, rows: int, rank: int) -> int:
    """A db rank of about ``rows`` TASK rows from the real db rank ``src_rank``; returns its tile count."""
    src_db = next((src_rank / OUT).glob("ascend_pytorch_profiler*.db"))
    out = dst_rank / OUT
    out.mkdir(parents=True)
    (dst_rank / f"profiler_info_{rank}.json").write_text(json.dumps({"rank_id": rank}))
    db = out / f"ascend_pytorch_profiler_{rank}.db"
    _copy_db(src_db, db)
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    per_tile = one("SELECT count(*) FROM TASK")
    tiles = max(1, rows // per_tile)
    lo = min(one("SELECT min(startNs) FROM TASK"), one("SELECT min(CAST(startNs AS INTEGER)) FROM CANN_API"))
    hi = max(one("SELECT max(endNs) FROM TASK"), one("SELECT max(CAST(endNs AS INTEGER)) FROM CANN_API"))
    period = hi - lo + 1_000_000
    gt = one("SELECT max(globalTaskId) FROM TASK") + 1
    conn = max(one("SELECT max(connectionId) FROM TASK"), one("SELECT max(connectionId) FROM CANN_API"),
               one("SELECT max(connectionId) FROM COMMUNICATION_OP")) + 1
    op = one("SELECT max(opId) FROM COMMUNICATION_OP") + 1
    con.execute("CREATE TEMP TABLE tiles (k INTEGER)")
    con.executemany("INSERT INTO tiles VALUES (?)", [(k,) for k in range(1, tiles)])
    shift = f"tiles.k * {period}"
    for table, changes in {
        "TASK": {"startNs": shift, "endNs": shift, "connectionId": f"tiles.k * {conn}",
                 "globalTaskId": f"tiles.k * {gt}"},
        "COMPUTE_TASK_INFO": {"globalTaskId": f"tiles.k * {gt}"},
        "COMMUNICATION_TASK_INFO": {"globalTaskId": f"tiles.k * {gt}", "opId": f"tiles.k * {op}"},
        "CANN_API": {"startNs": shift, "endNs": shift, "connectionId": f"tiles.k * {conn}"},
    }.items():
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        exprs = [f"o.{c} + {changes[c]}" if c in changes else f"o.{c}" for c in cols]
        con.execute(f"CREATE TEMP TABLE orig_{table} AS SELECT * FROM {table}")
        con.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(exprs)} "
                    f"FROM orig_{table} AS o CROSS JOIN tiles ORDER BY tiles.k")
    # HCCL ops: new names per tile (an op name is unique within a rank's step)
    cols = [r[1] for r in con.execute('PRAGMA table_info("COMMUNICATION_OP")')]
    ops = con.execute("SELECT * FROM COMMUNICATION_OP ORDER BY startNs").fetchall()
    names = dict(con.execute("SELECT id, value FROM STRING_IDS").fetchall())
    next_id = max(names) + 1
    new_ops, new_strings = [], []
    for k in range(1, tiles):
        for row in ops:
            rec = dict(zip(cols, row, strict=True))
            new_strings.append((next_id, renamed(names[rec["opName"]], k, len(ops))))
            rec.update(opName=next_id, startNs=rec["startNs"] + k * period, endNs=rec["endNs"] + k * period,
                       connectionId=rec["connectionId"] + k * conn, opId=rec["opId"] + k * op)
            next_id += 1
            new_ops.append(tuple(rec[c] for c in cols))
    con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", new_strings)
    con.executemany(f"INSERT INTO COMMUNICATION_OP VALUES ({', '.join('?' * len(cols))})", new_ops)
    s_lo, s_hi = con.execute("SELECT min(startNs), max(endNs) FROM STEP_TIME").fetchone()
    con.execute("DELETE FROM STEP_TIME")
    con.executemany("INSERT INTO STEP_TIME (id, startNs, endNs) VALUES (?, ?, ?)", [
        (s, s_lo + (s - 1) * TILES_PER_STEP * period, s_hi + min(s * TILES_PER_STEP, tiles) * period - period)
        for s in sorted({step_of(t) for t in range(tiles)})])
    con.commit()
    con.close()
    _tile_analysis(src_rank / OUT / "analysis.db", out / "analysis.db", tiles, Decimal(period) / 1000, len(ops))
    return tiles


def _copy_db(src: Path, dst: Path) -> None:
    """A copy through SQLite's backup (the source opened immutable: nothing written beside it)."""
    source = sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True)
    target = sqlite3.connect(dst)
    source.backup(target)
    target.execute("PRAGMA journal_mode=DELETE")
    source.close()
    target.close()


def _tile_analysis(src: Path, dst: Path, tiles: int, period_us: Decimal, ops_per_tile: int) -> None:
    _copy_db(src, dst)
    con = sqlite3.connect(dst)
    con.execute("PRAGMA journal_mode=OFF")
    steps = sorted({step_of(t) for t in range(tiles)})
    for table in ("CommAnalyzerTime", "CommAnalyzerBandwidth", "CommAnalyzerMatrix"):
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        orig = con.execute(f"SELECT * FROM {table}").fetchall()
        con.execute(f"DELETE FROM {table}")
        new = []
        for t in range(tiles):
            if table == "CommAnalyzerMatrix" and t % TILES_PER_STEP:
                continue  # one matrix per step, as the text form's communication_matrix.json has it
            for row in orig:
                rec = dict(zip(cols, row, strict=True))
                rec["step"] = f"step{step_of(t)}"
                if table != "CommAnalyzerMatrix":
                    rec["hccl_op_name"] = renamed(rec["hccl_op_name"], t, ops_per_tile)
                else:
                    rec["op_name"] = renamed(rec["op_name"], t, ops_per_tile)
                if "start_timestamp" in rec:
                    rec["start_timestamp"] = float(Decimal(str(rec["start_timestamp"])) + period_us * t)
                new.append(tuple(rec[c] for c in cols))
        con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(cols))})", new)
    cols = [r[1] for r in con.execute('PRAGMA table_info("StepTraceTime")')]
    first = con.execute("SELECT * FROM StepTraceTime").fetchone()
    con.execute("DELETE FROM StepTraceTime")
    con.executemany(f"INSERT INTO StepTraceTime VALUES ({', '.join('?' * len(cols))})",
                    [tuple(str(s) if c == "step" else v for c, v in zip(cols, first, strict=True)) for s in steps])
    con.commit()
    con.close()
