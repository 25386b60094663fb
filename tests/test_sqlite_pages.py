"""sqlite_pages reads a table's cells straight from the file: every value and kind must equal what SQLite
itself returns (the oracle) for every layout it accepts, and each layout it does not know is NotPlain."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from ditpar.readers.ascend import db as ascend_db
from ditpar.readers.ascend import sqlite_pages as sp

KIND = {int: sp.INTEGER, type(None): sp.NULL, float: sp.REAL, str: sp.TEXT, bytes: sp.TEXT}


def _read(path, table: str, where=None):
    con = sqlite3.connect(path)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    info = con.execute(f"PRAGMA table_info({table})").fetchall()
    keys = [r for r in info if r[5]]
    alias = keys[0][1] if len(keys) == 1 and keys[0][2].upper() == "INTEGER" else None
    con.close()
    buf = np.fromfile(path, dtype=np.uint8)
    return sp.read_table(buf, root, {r[1]: r[0] for r in info}, len(info), alias, where), [r[1] for r in info]


def _same(path, table: str) -> int:
    """Assert the page read equals SQLite's rows (rowid, each cell's kind and integer value); the row count."""
    got, names = _read(path, table)
    con = sqlite3.connect(path)
    rows = con.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid").fetchall()
    con.close()
    assert got.rowid.tolist() == [r[0] for r in rows]
    for j, name in enumerate(names, 1):
        assert got.kind[name].tolist() == [KIND[type(r[j])] for r in rows], name
        assert got.value[name].tolist() == [r[j] if type(r[j]) is int else 0 for r in rows], name
    return len(rows)


EDGES = [0, 1, -1, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769, 2**23 - 1, 2**23, -2**23 - 1,
         2**31 - 1, 2**31, -2**31 - 1, 2**47 - 1, 2**47, -2**47 - 1, 2**62, 2**63 - 1, -2**63, 1736410576375315901]


@pytest.mark.parametrize("page_size", [512, 4096, 65536], ids=["p512", "p4096", "p65536"])
def test_every_integer_width_null_real_text_and_blob_as_sqlite_reads_them(tmp_path, page_size):
    path = tmp_path / "t.db"
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {page_size}")
    con.execute("CREATE TABLE T (a INTEGER, b INTEGER, c INTEGER, d INTEGER)")
    rng = np.random.default_rng(7)
    rows = []
    for i in range(20000):  # enough rows for interior pages (two levels at 512-byte pages)
        a = EDGES[i % len(EDGES)]
        b = int(rng.integers(-2**62, 2**62))
        c = [None, 0, 1, 2.5, "text", b"\x00\x01", "x" * 40, 7][i % 8]
        rows.append((a, b, c, i))
    con.executemany("INSERT INTO T VALUES (?, ?, ?, ?)", rows)
    con.execute("DELETE FROM T WHERE d % 97 = 3")  # free blocks inside pages, gaps in the rowids
    con.commit()
    con.close()
    assert _same(path, "T") == 20000 - len([i for i in range(20000) if i % 97 == 3])


def test_rowid_alias_and_the_where_filter(tmp_path):
    path = tmp_path / "t.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE A (startNs INTEGER, type INTEGER, connectionId INTEGER PRIMARY KEY)")
    con.executemany("INSERT INTO A VALUES (?, ?, ?)", [(10 * i, 10000 if i % 3 else 5, 1000 + 2 * i)
                                                       for i in range(5000)])
    con.execute("INSERT INTO A VALUES (1, '10000x', 99999)")  # text: never equal to 10000
    con.commit()
    con.close()
    assert _same(path, "A") == 5001
    got, _ = _read(path, "A", ("type", 10000))
    want = [(s, c) for s, t, c in sqlite3.connect(path).execute(
        "SELECT startNs, type, connectionId FROM A WHERE type = 10000 ORDER BY rowid")]
    assert list(zip(got.value["startNs"].tolist(), got.value["connectionId"].tolist(), strict=True)) == want
    assert len(want) == 3333


def test_a_column_added_later_and_overflow_pages_are_not_plain(tmp_path):
    path = tmp_path / "t.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE S (a INTEGER)")
    con.executemany("INSERT INTO S VALUES (?)", [(i,) for i in range(100)])
    con.execute("ALTER TABLE S ADD COLUMN b INTEGER")  # the old records have no cell for b
    con.execute("CREATE TABLE O (a INTEGER, t TEXT)")
    con.execute("INSERT INTO O VALUES (1, ?)", ("y" * 10000,))  # spills onto overflow pages
    con.commit()
    con.close()
    with pytest.raises(sp.NotPlain, match="fewer columns"):
        _read(path, "S")
    with pytest.raises(sp.NotPlain, match="overflow"):
        _read(path, "O")


def test_the_db_reader_takes_the_pages_only_where_they_hold_what_sqlite_would_read(tmp_path):
    """A WITHOUT ROWID table, a REAL-affinity column (SQLite stores 2.0 as the integer 2 and reads it back
    as a REAL) and a db with a rollback journal beside it go through SQLite."""
    path = tmp_path / "t.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE W (a INTEGER PRIMARY KEY, b INTEGER) WITHOUT ROWID")
    con.execute("CREATE TABLE R (a REAL)")
    con.execute("CREATE TABLE I (a INTEGER)")
    con.execute("INSERT INTO R VALUES (2.0)")
    con.execute("INSERT INTO I VALUES (5)")
    con.commit()
    con.close()
    col = {"a": ascend_db.Col("int", 0, 10)}
    db = ascend_db._Db(path)
    try:
        assert db.pages("W", col) is None
        assert db.pages("R", col) is None
        read = db.pages("I", col)
        assert read is not None and read.value["a"].tolist() == [5] and read.kind["a"].tolist() == [sp.INTEGER]
    finally:
        db.close()
    (tmp_path / "t.db-journal").write_bytes(b"")
    db = ascend_db._Db(path)
    try:
        assert db.pages("I", col) is None
    finally:
        db.close()


def test_damaged_bytes_are_read_as_sqlite_reads_them_or_refused(tmp_path):
    """Bytes changed at random (seeded) in the table's pages: each read either is NotPlain or gives exactly
    the rows SQLite gives; never a value SQLite would refuse as a malformed record."""
    path = tmp_path / "t.db"
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 512")
    con.execute("CREATE TABLE T (a INTEGER, b INTEGER, c INTEGER)")
    con.executemany("INSERT INTO T VALUES (?, ?, ?)", [(i * 7919, -i, i % 3) for i in range(1500)])
    con.commit()
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'T'").fetchone()[0]
    con.close()
    good = np.fromfile(path, dtype=np.uint8)
    rng = np.random.default_rng(3)
    outcomes = {"refused": 0, "same": 0}
    for trial in range(300):
        buf = good.copy()
        at = rng.integers(512, len(buf), 2)  # past page 1 (the schema, which SQLite reads before any table)
        buf[at] = rng.integers(0, 256, 2)
        try:
            got = sp.read_table(buf, root, {"a": 0, "b": 1, "c": 2}, 3)
        except sp.NotPlain:
            outcomes["refused"] += 1
            continue
        damaged = tmp_path / f"d{trial}.db"
        buf.tofile(damaged)
        con = sqlite3.connect(f"file:{damaged}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT rowid, a, b, c FROM T").fetchall()
        except sqlite3.DatabaseError as exc:
            pytest.fail(f"trial {trial}: read from the pages, but SQLite says {exc}")
        finally:
            con.close()
        assert got.rowid.tolist() == [r[0] for r in rows]
        for j, name in enumerate("abc", 1):
            assert got.value[name].tolist() == [r[j] if type(r[j]) is int else 0 for r in rows]
        outcomes["same"] += 1
    assert outcomes["refused"] > 30 and outcomes["same"] > 30, outcomes
