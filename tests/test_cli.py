"""cli.run: every failure ends in one line on stderr and the documented exit code."""

from __future__ import annotations

import pytest
from ditpar import cli
from ditpar.errors import InputError


def _exit(body, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ex:
        cli.run("tool.py", body)
    return ex.value.code, capsys.readouterr().err


def test_input_error_is_one_line_exit_2(capsys):
    def body():
        raise InputError("a.csv: row 3:\n  column 'x' missing")
    code, err = _exit(body, capsys)
    assert code == 2 and err == "tool.py: error: a.csv: row 3: column 'x' missing\n"


def test_missing_package_names_it_and_the_install_step(capsys):
    def body():
        raise ModuleNotFoundError("No module named 'pandas.core'", name="pandas.core")
    code, err = _exit(body, capsys)
    assert code == 2 and err.count("\n") == 1
    assert "'pandas'" in err and "pip install -e ." in err

    def torch_body():
        raise ModuleNotFoundError("No module named 'torch'", name="torch")
    code, err = _exit(torch_body, capsys)
    assert code == 2 and 'pip install -e ".[dist]"' in err


def test_return_value_is_the_exit_code(capsys):
    assert _exit(lambda: 1, capsys)[0] == 1
    assert _exit(lambda: None, capsys)[0] == 0
