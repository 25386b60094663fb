"""Communication options a framework profile offers for a form (async Ulysses, FP8 all-to-all): the
`[comm_options.NAME]` tables of templates/frameworks/*.toml, each with the setting that turns it on and its source."""

from __future__ import annotations

from pathlib import Path

from ditpar.errors import InputError

# async_ulysses: the Q/K/V all-to-alls run on a side stream behind the next projection (overlap, same values up to
# kernel order); fp8_alltoall: the Ulysses all-to-all payload is quantised to FP8 (half the bytes, values change)
OPTIONS = ("async_ulysses", "fp8_alltoall")


def parse(data: dict, path: Path) -> dict[str, dict[str, str]]:
    """{option: {'setting': ..., 'source': ...}} of one profile; a bad table or key is an InputError naming it."""
    raw = data.get("comm_options", {})
    if not isinstance(raw, dict):
        raise InputError(f"{path}: [comm_options] must be a table of option tables ({', '.join(OPTIONS)})")
    out: dict[str, dict[str, str]] = {}
    for name, table in raw.items():
        if name not in OPTIONS:
            raise InputError(f"{path}: comm_options.{name} is not an option; expected {', '.join(OPTIONS)}")
        if not isinstance(table, dict):
            raise InputError(f"{path}: [comm_options.{name}] must be a table with 'setting' and 'source'")
        for key in ("setting", "source"):
            if not isinstance(table.get(key), str) or not table[key].strip():
                raise InputError(f"{path}: comm_options.{name}.{key} must be a non-empty string")
        out[name] = {"setting": table["setting"], "source": table["source"]}
    return out
