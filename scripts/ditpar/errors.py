"""The project's own error types, mapped by the command-line wrapper onto exit codes."""

from __future__ import annotations


class DitParError(Exception):
    """Base class of every error this package raises on purpose."""

    exit_code = 2


class InputError(DitParError):
    """Bad usage or bad input (a file, row, column or key): exit 2 with a one-line reason."""

    exit_code = 2


class IncompleteRankError(InputError):
    """One rank's profile lacks a file every analysis needs; the other ranks can still be read."""

    exit_code = 2


class NoEvidenceError(DitParError):
    """A check compared nothing, so it can neither pass nor fail: exit 2, never a silent pass."""

    exit_code = 2


class CheckFailed(DitParError):
    """A check ran and failed: exit 1."""

    exit_code = 1
