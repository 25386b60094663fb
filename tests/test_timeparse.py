"""Exact decimal-microsecond parsing: compared with Python's Decimal, never with float."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pandas as pd
import pytest
from ditpar.errors import InputError
from ditpar.timeparse import parse_us_column, us_scalar_to_ns, us_to_ns
from hypothesis import given, settings
from hypothesis import strategies as st


def decimal_ns(text: str) -> int:
    return int((Decimal(text.strip()) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def test_kernel_details_start_with_trailing_tab_is_exact():
    # a real Start Time(us) cell; float64 would give ...643.25 (spacing 0.25 us at 1.7e15)
    got = us_to_ns(["1736408883704643.212\t"])
    assert got.tolist() == [1736408883704643212]
    assert float("1736408883704643.212") * 1000 != 1736408883704643212  # the float path is wrong


def test_shapes_of_decimal_text():
    cells = [" 53.741", "0", "-1.5", "+.5", "7.", "6.54", "79089.52021875", 5, "1.0005", "-1.0005", "0009.1",
             "9223372036854773.807", "\t12\r"]
    assert us_to_ns(cells).tolist() == [53741, 0, -1500, 500, 7000, 6540, 79089520, 5000, 1001, -1001, 9100,
                                        9223372036854773807, 12000]


@pytest.mark.parametrize("bad", ["N/A", "", "   ", "1.2.3", "abc", "1 2", "-", ".", "2e-3", "1-", "1+2", "é",
                                 "9999999999999999.1", "12345678901234567", "x" * 100, None, float("nan")])
def test_bad_cells_raise_input_error_naming_the_row(bad):
    with pytest.raises(InputError, match=r"f\.csv: column 'x': line 3: expected a decimal time"):
        us_to_ns(["1.0", bad], where="f.csv: column 'x'", first_row=2, row_label="line")


def test_parse_us_column_names_file_line_and_column():
    frame = pd.DataFrame({"Start Time(us)": ["1.000\t", "2.000\t", "N/A"]})
    with pytest.raises(InputError, match=r"k\.csv: column 'Start Time\(us\)': line 4: .*'N/A'"):
        parse_us_column(frame, "Start Time(us)", "k.csv")


def test_empty_input_and_scalar():
    assert us_to_ns([]).dtype == np.int64 and us_to_ns([]).size == 0
    assert us_scalar_to_ns("1764246877073569.640", "x") == 1764246877073569640


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 9_000_000_000_000_000), st.integers(0, 999_999), st.integers(0, 6),
       st.sampled_from(["", "\t", " ", "  \t"]), st.booleans())
def test_matches_decimal(whole, frac, ndigits, pad, negative):
    frac_text = f"{frac:06d}"[:ndigits]
    text = f"{'-' if negative else ''}{whole}" + (f".{frac_text}" if ndigits else "")
    assert us_to_ns([text + pad]).tolist() == [decimal_ns(text)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.decimals(min_value=0, max_value=10**12, places=3, allow_nan=False), min_size=1, max_size=50))
def test_vectorised_equals_elementwise(values):
    texts = [f"{v:.3f}" for v in values]
    assert us_to_ns(texts).tolist() == [decimal_ns(t) for t in texts]


# ------------------------------------------------------- the Arrow path gives the same answers
SHAPES = [" 53.741", "0", "-1.5", "+.5", "7.", "6.54", "79089.52021875", "5", "1.0005", "-1.0005", "0009.1",
          "9223372036854773.807", "\t12\r", "1736408883704643.212\t", "8999999999999999.999",
          "9000000000000000.000", "123.4567"]


def test_arrow_shapes_equal_the_object_parser():
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns_arrow

    assert us_to_ns_arrow(pa.array(SHAPES)).tolist() == us_to_ns(SHAPES).tolist()
    chunked = pa.chunked_array([SHAPES[:5], SHAPES[5:]])
    assert us_to_ns_arrow(chunked).tolist() == us_to_ns(SHAPES).tolist()
    assert us_to_ns_arrow(pa.array([], pa.string())).size == 0


@pytest.mark.parametrize("bad", ["N/A", "", "   ", "1.2.3", "abc", "1 2", "-", ".", "2e-3", "1-", "1+2", "é",
                                 "9999999999999999.1", "12345678901234567", "x" * 100, None])
def test_arrow_bad_cells_same_message(bad):
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns_arrow

    args = {"where": "f.csv: column 'x'", "first_row": 2, "row_label": "line"}
    with pytest.raises(InputError) as want:
        us_to_ns(["1.0", "2.5", bad], **args)
    with pytest.raises(InputError) as got:
        us_to_ns_arrow(pa.array(["1.0", "2.5", bad], pa.string()), **args)
    assert str(got.value) == str(want.value)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(0, 9_300_000_000_000_000), st.integers(0, 999_999), st.integers(0, 6),
                          st.sampled_from(["", "\t", " ", "  \t"]), st.sampled_from(["", "-", "+"])),
                min_size=1, max_size=20))
def test_arrow_matches_decimal(cells):
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns_arrow

    texts = [f"{sign}{whole}" + (f".{f'{frac:06d}'[:nd]}" if nd else "") + pad
             for whole, frac, nd, pad, sign in cells]
    try:
        want = us_to_ns(texts).tolist()
    except InputError as exc:  # out of the int64 range: the same error from both
        with pytest.raises(InputError, match=re.escape(str(exc))):
            us_to_ns_arrow(pa.array(texts))
        return
    assert us_to_ns_arrow(pa.array(texts)).tolist() == want == [decimal_ns(t) for t in texts]


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 17), st.integers(0, 4), st.sampled_from(["", "\t", " ", "\t\r"]),
       st.lists(st.integers(0, 10**21), min_size=1, max_size=40), st.integers(0, 39),
       st.sampled_from([None, "x", "-", "+", ".", " ", "\t", "/", ":", "0", "9", "e"]), st.integers(0, 25),
       st.integers(1, 3))
def test_arrow_one_layout_column_matches_the_object_parser(whole, decimals, pad, seeds, row, mutant, col, chunks):
    """Columns whose cells share one layout (the fixed-width fast path), one cell possibly altered at one
    byte: the same values, or the same error, as the cell-by-cell parser."""
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns_arrow

    def cell(seed: int) -> str:
        digits = f"{seed:022d}"[-(whole + decimals):]
        return digits[:whole] + (f".{digits[whole:]}" if decimals else "") + pad

    texts = [cell(s) for s in seeds]
    if mutant is not None:
        r, text = row % len(texts), texts[row % len(texts)]
        c = col % len(text)
        texts[r] = text[:c] + mutant + text[c + 1:]
    size = -(-len(texts) // chunks)
    array = pa.chunked_array([pa.array(texts[i:i + size], pa.string()) for i in range(0, len(texts), size)])
    args = {"where": "f.csv: column 'x'", "first_row": 2, "row_label": "line"}
    try:
        want = us_to_ns(texts, **args).tolist()
    except InputError as exc:
        with pytest.raises(InputError) as got:
            us_to_ns_arrow(array, **args)
        assert str(got.value) == str(exc)
        return
    assert us_to_ns_arrow(array, **args).tolist() == want == [decimal_ns(t) for t in texts]


def test_arrow_one_layout_takes_the_byte_matrix_path():
    """torch_npu's Start Time column (one width, trailing TAB) is read by the fixed-layout reader itself."""
    import pyarrow as pa
    from ditpar.timeparse import _fixed_layout_ns

    texts = ["1736408883704643.212\t", "1736408883704801.156\t", "0000000000000000.000\t"]
    got = _fixed_layout_ns(pa.chunked_array([pa.array(texts[:2]), pa.array(texts[2:])]))
    assert got is not None and got.tolist() == [decimal_ns(t) for t in texts]
    assert _fixed_layout_ns(pa.chunked_array([pa.array(["1.5", "12.5"])])) is None  # two widths
    assert _fixed_layout_ns(pa.chunked_array([pa.array(["1.2345", "1.2346"])])) is None  # 4 decimals: rounding


def test_arrow_widths_that_differ_only_in_whole_digits_are_padded():
    """torch_npu's Duration column (3 decimals, 1 to 5 whole digits) is read as zero-padded fixed layout."""
    import pyarrow as pa
    from ditpar.timeparse import _padded_layout_ns

    texts = ["100.250", "20.125", "5.000", "12345.678", "0.001"]
    got = _padded_layout_ns(pa.chunked_array([pa.array(texts[:2]), pa.array([], pa.string()), pa.array(texts[2:])]))
    assert got is not None and got.tolist() == [100250, 20125, 5000, 12345678, 1] == [decimal_ns(t) for t in texts]
    assert _padded_layout_ns(pa.chunked_array([pa.array(["5\t", "15\t"])])).tolist() == [5000, 15000]
    # a cell without a digit of its own would read as 0 once padded: refused here, named by the careful path
    for cells in (["15.", "."], ["15", "\t"], ["1.0", ""], ["1.5", "-1.5"], ["1.5", "1.25"]):
        assert _padded_layout_ns(pa.chunked_array([pa.array(cells)])) is None, cells
