"""timeparse.py (issue 29): the fixed-layout fast path over more than 65,536 rows in several Arrow
chunks, cells without whole digits, the int64 edge, and the row each error names. Expected values are worked out by hand
in the comments."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from ditpar.errors import InputError


def oracle_ns(cell: str) -> int:
    """Independent reference: Python's decimal arithmetic, half up in magnitude."""
    from decimal import ROUND_HALF_UP, Decimal

    return int((Decimal(cell.strip()) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def test_fixed_layout_fast_path_over_several_arrow_chunks():
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns, us_to_ns_arrow

    # 3 chunks of 40,000 same-width cells (120,000 rows > 65,536: two row blocks, one crossing chunks)
    rng = np.random.default_rng(7)
    base = 1736408883704643212
    ns = base + np.cumsum(rng.integers(0, 5_000, 120_000))
    cells = [f"{v // 1000}.{v % 1000:03d}\t" for v in ns.tolist()]
    assert len({len(c) for c in cells}) == 1
    arr = pa.chunked_array([cells[:40_000], cells[40_000:80_000], [], cells[80_000:]])
    got = us_to_ns_arrow(arr)
    assert got.dtype == np.int64 and np.array_equal(got, ns)
    assert int(got[-1]) == oracle_ns(cells[-1]) and int(got[65_536]) == oracle_ns(cells[65_536])
    # a slice (chunk offsets not 0) reads the same cells
    assert np.array_equal(us_to_ns_arrow(arr.slice(70_000, 20_000)), ns[70_000:90_000])
    assert np.array_equal(us_to_ns(cells[:1000]), ns[:1000])


def test_cells_without_whole_digits():
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns, us_to_ns_arrow

    cells = [".250", ".5", "0.001", "7.", " .999 "]
    want = [250, 500, 1, 7000, 999]
    assert [oracle_ns(c) for c in cells] == want
    assert us_to_ns(cells).tolist() == want
    assert us_to_ns_arrow(pa.array(cells)).tolist() == want
    assert us_to_ns_arrow(pa.array([".250", ".125", ".001"])).tolist() == [250, 125, 1]   # fixed layout
    assert us_to_ns_arrow(pa.array([".250", "1.5"])).tolist() == [250, 1500]               # plain decimal
    for bad in (".", " . ", ""):
        with pytest.raises(InputError, match="expected a decimal time"):
            us_to_ns([bad])
        with pytest.raises(InputError, match="expected a decimal time"):
            us_to_ns_arrow(pa.array(["1.0", bad]))


def test_rounding_signs_and_the_int64_edge():
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns, us_to_ns_arrow

    cells = ["1.2345", "1.2344", "-1.5", "+2", "-0.0005", "9223372036854774", "0000000000000001.5"]
    want = [oracle_ns(c) for c in cells]
    assert want == [1235, 1234, -1500, 2000, -1, 9223372036854774000, 1500]
    assert us_to_ns(cells).tolist() == want
    assert us_to_ns_arrow(pa.array(cells)).tolist() == want
    # (2**63 - 1) // 1000 - 1 = 9223372036854774 us is the largest accepted; one more is refused
    for bad in ("9223372036854775", "12345678901234567"):
        with pytest.raises(InputError, match=f"got '{bad}'"):
            us_to_ns([bad])
        with pytest.raises(InputError, match=f"got '{bad}'"):
            us_to_ns_arrow(pa.array([bad]))
        with pytest.raises(InputError, match=f"got '{bad}'"):
            us_to_ns_arrow(pa.array(["1.000", bad]))


def test_errors_name_the_first_bad_row_counted_from_first_row():
    import pyarrow as pa
    from ditpar.timeparse import parse_us_column, texts_to_ns, us_to_ns, us_to_ns_arrow

    cells = ["1.5", "2", "abc", "x"]
    with pytest.raises(InputError) as e:
        us_to_ns(cells, where="k.csv: column 'Start'", first_row=2, row_label="line")
    assert str(e.value) == "k.csv: column 'Start': line 4: expected a decimal time in microseconds, got 'abc'"
    with pytest.raises(InputError) as e:
        us_to_ns_arrow(pa.array(cells), where="t")
    assert str(e.value) == "t: row 2: expected a decimal time in microseconds, got 'abc'"
    with pytest.raises(InputError, match=r"t: row 1: .* got \(empty\)"):
        us_to_ns_arrow(pa.array(["1", None, "2"]), where="t")
    frame = pd.DataFrame({"Start": ["1", "2", "1e3"]})
    with pytest.raises(InputError, match=r"^f: column 'Start': line 4: .* got '1e3'$"):
        parse_us_column(frame, "Start", "f")
    # a long list goes through Arrow: the same row named
    many = ["1.000"] * 5000 + ["bad"] + ["2.000"] * 10
    with pytest.raises(InputError, match="x: row 5000: .* got 'bad'"):
        texts_to_ns(many, where="x")
    assert texts_to_ns(["1.5"] * 4096).tolist() == [1500] * 4096
    assert texts_to_ns([1, "2.5"] * 2048)[:2].tolist() == [1000, 2500]       # ints: the object parser
    with pytest.raises(InputError, match=r"row 3: .*got '" + "9" * 40):
        us_to_ns(["1", "2", "3", "9" * 60])                                   # too long: shown cut to 40


def test_same_width_cells_outside_the_fixed_layout_go_the_careful_way():
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns_arrow

    # all cells 4 wide but signed or with an exponent: the layout pattern does not match the first cell,
    # so the fast path steps aside (no crash) and the careful parser reads or rejects them
    assert us_to_ns_arrow(pa.array(["-1.5", "+2.5"])).tolist() == [-1500, 2500]
    with pytest.raises(InputError, match=r"^t: row 0: expected a decimal time in microseconds, got '1e03'$"):
        us_to_ns_arrow(pa.array(["1e03", "2e03"]), where="t")
    # whitespace only, same width: no digit at all
    with pytest.raises(InputError, match=r"row 0: .* got \(empty\)"):
        us_to_ns_arrow(pa.array(["  ", "  "]))


def test_two_points_are_refused():
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns, us_to_ns_arrow

    for cells in (["1.2.3"], ["1.0", "1.2.3"], ["12.5", "1.2.3"]):
        with pytest.raises(InputError, match=r"got '1\.2\.3'"):
            us_to_ns(cells)
        with pytest.raises(InputError, match=r"got '1\.2\.3'"):
            us_to_ns_arrow(pa.array(cells))


def test_the_bad_cell_is_shown_up_to_40_characters():
    from ditpar.timeparse import us_to_ns

    bad = "1" * 20 + "x" * 25  # 45 characters (under the 48-byte limit): a bad cell
    with pytest.raises(InputError) as err:
        us_to_ns(["1.0", bad], where="w")
    assert str(err.value) == f"w: row 1: expected a decimal time in microseconds, got {bad[:40]!r}"
    with pytest.raises(InputError) as err:
        us_to_ns(["x" * 40], where="w")
    assert str(err.value).endswith(f"got {'x' * 40!r}")
    with pytest.raises(InputError) as err:
        us_to_ns(["1", " \t "], where="w", first_row=2, row_label="line")
    assert str(err.value) == "w: line 3: expected a decimal time in microseconds, got (empty)"


def test_whitespace_kinds_and_the_width_limit():
    from ditpar.timeparse import us_to_ns

    # NUL, TAB, LF, CR and space around a value are ignored
    assert us_to_ns(["1.5\n", "\n2", "\r3\t", "4\x00", " 5 "]).tolist() == [1500, 2000, 3000, 4000, 5000]
    # 48 characters is the widest cell read; a 49th (even a space) makes it a bad cell
    assert us_to_ns([" " * 45 + "1.5"]).tolist() == [1500]
    with pytest.raises(InputError) as err:
        us_to_ns(["7", " " * 46 + "1.5"], where="w")
    assert str(err.value) == "w: row 1: expected a decimal time in microseconds, got '1.5'"


# --- survivors of the full run (issue 29, third round) ---

def test_a_cell_over_48_characters_is_bad_in_both_parsers():
    """The width limit holds for the Arrow reader too: 50 spaces and 12.5 (54 characters) is refused by
    both with the same message (the Arrow reader's quick paths used to read the trimmed text: 12500)."""
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns, us_to_ns_arrow

    cell = " " * 50 + "12.5"
    for parse in (lambda: us_to_ns(["1", cell], where="w"), lambda: us_to_ns_arrow(pa.array(["1", cell]), where="w")):
        with pytest.raises(InputError) as err:
            parse()
        assert str(err.value) == "w: row 1: expected a decimal time in microseconds, got '12.5'"


def test_a_signed_cell_of_exactly_48_characters_is_read_and_the_longer_one_named():
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns, us_to_ns_arrow

    at = "+12.5".rjust(48)            # 48 characters: the widest cell read (a sign: the Arrow careful path)
    over = "-7".rjust(49)
    assert us_to_ns([at, "1"]).tolist() == us_to_ns_arrow(pa.array([at, "1"])).tolist() == [12500, 1000]
    for parse in (lambda: us_to_ns([at, over], where="w"), lambda: us_to_ns_arrow(pa.array([at, over]), where="w")):
        with pytest.raises(InputError) as err:
            parse()
        assert str(err.value) == "w: row 1: expected a decimal time in microseconds, got '-7'"


def test_a_missing_cell_of_a_series_is_shown_empty():
    from ditpar.timeparse import us_to_ns

    with pytest.raises(InputError) as err:
        us_to_ns(pd.Series(["1.0", np.nan, "2"]), where="w")
    assert str(err.value) == "w: row 1: expected a decimal time in microseconds, got (empty)"


def test_a_byte_cell_outside_ascii_is_a_bad_cell():
    from ditpar.timeparse import us_to_ns

    assert us_to_ns([b"1.5", b" 2"]).tolist() == [1500, 2000]
    with pytest.raises(InputError, match=r"w: row 1: expected a decimal time"):
        us_to_ns([b"1.5", b"\xff"], where="w")


@pytest.mark.parametrize("cells", [["1x2", "1 2"], ["1x", "."], ["1x", "7", "1 2"]])
def test_the_first_bad_row_is_named_whatever_its_kind_of_fault(cells):
    """A bad digit (row 0) and a later cell of another fault (two runs, a lone point): row 0 is named."""
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns, us_to_ns_arrow

    for parse in (lambda: us_to_ns(cells, where="w"), lambda: us_to_ns_arrow(pa.array(cells), where="w")):
        with pytest.raises(InputError) as err:
            parse()
        assert str(err.value) == f"w: row 0: expected a decimal time in microseconds, got {cells[0]!r}"


def test_the_first_of_two_long_cells_is_named_and_a_missing_cell_is_not_long():
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns, us_to_ns_arrow

    cells = ["7", "1".rjust(49), "2".rjust(50)]
    for parse in (lambda: us_to_ns(cells, where="w"), lambda: us_to_ns_arrow(pa.array(cells), where="w")):
        with pytest.raises(InputError) as err:
            parse()
        assert str(err.value) == "w: row 1: expected a decimal time in microseconds, got '1'"
    with pytest.raises(InputError) as err:   # the bad cell first, then a missing one: the bad one is named
        us_to_ns_arrow(pa.array(["x", None]), where="w")
    assert str(err.value) == "w: row 0: expected a decimal time in microseconds, got 'x'"


def test_an_empty_arrow_chunk_between_others():
    """Chunks ["1.5"], [], [...]: the empty chunk neither stops the byte check of the next chunk (an exponent
    there is refused, as the careful parser refuses it) nor drops its values."""
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns_arrow

    assert us_to_ns_arrow(pa.chunked_array([["1.5"], [], ["22.25"]], pa.string())).tolist() == [1500, 22250]
    with pytest.raises(InputError) as err:
        us_to_ns_arrow(pa.chunked_array([["1.5"], [], ["1e3"]], pa.string()), where="w")
    assert str(err.value) == "w: row 1: expected a decimal time in microseconds, got '1e3'"
