"""The run card: what a person tells `bench run` about the box (`--run-card FILE`).

A run card is a YAML file with any of `hardware`, `engine`, `model` (the
same maps as in run.yaml; `model.family` names the base model the site groups
the run under, see rundir/families.py), `launch_command`, `notes` and `submitter`. It is
validated by the contract itself, field by field, before anything is
measured: a nested typo (`hardware.gpu_cout`), a wrong type (`hardware: 5`,
`gpu_count: eight`) or a non-finite number would otherwise surface only
when run.yaml is written, after the measurements, or never.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rundir.contract import (
    ContractError,
    Engine,
    Hardware,
    Model,
    check_section,
    show_value,
)
from rundir.io import load_yaml

SECTIONS: dict[str, type] = {"hardware": Hardware, "engine": Engine, "model": Model}
TEXT_FIELDS = ("launch_command", "notes", "submitter")
ALLOWED = (*SECTIONS, *TEXT_FIELDS)


def _key_name(key: object) -> str:
    plain = isinstance(key, str) and key.isprintable() and 0 < len(key) <= 40
    shown = show_value(key)
    return key if plain and shown == repr(key) else shown  # type: ignore[return-value]


def read_run_card(path: Path) -> dict:
    """Read and validate a run card; return its fields as written (only those present).

    Raises ContractError with one line naming the file and the field: an
    unreadable file, bad YAML (with its line), bytes that are not UTF-8, an
    unknown key at any level, a wrong type or a non-finite number.
    """
    where = str(path)
    data: Any = load_yaml(Path(path))
    if data is None:  # an empty card says nothing, which is fine
        return {}
    if not isinstance(data, dict):
        raise ContractError(f"{where}: expected a mapping of {', '.join(ALLOWED)} "
                            f"at the top level, got {type(data).__name__}")
    for key in data:
        if key not in ALLOWED:
            raise ContractError(f"{where}: field {_key_name(key)}: unknown field "
                                f"(expected one of {', '.join(ALLOWED)})")
    card: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS:
            if value is not None:
                check_section(SECTIONS[key], value, where, key)
            card[key] = dict(value or {})
        else:
            if value is not None and not isinstance(value, str):
                raise ContractError(f"{where}: field {key}: expected a string, "
                                    f"got {show_value(value)}")
            card[key] = value
    return card
