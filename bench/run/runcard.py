"""The run card: what a person tells `bench run` about the box (`--run-card FILE`).

A run card is a YAML file with any of `hardware`, `engine`, `model` (the
same maps as in run.yaml; `model.family` names the base model the site groups
the run under, see site_builder/families.py), `launch_command`, `notes` and
`submitter`.

It is read once, here, before anything is measured, into a frozen `RunCard`:
every field is checked as it is read, by the contract's own rules for
run.yaml (a nested typo `hardware.gpu_cout`, a wrong type `hardware: 5` or
`gpu_count: eight`, a non-finite number), with one line naming the file, the
field and what was expected. Otherwise a bad field would surface only when
run.yaml is written, after the measurements, or never. The runner lays each
section over what it detected (`CardSection.over`, a `dataclasses.replace`);
run.yaml's writer (rundir.io.write_run_info) checks the whole run once more
when it writes it, as it does for every run.yaml.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

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

S = TypeVar("S")


@dataclass(frozen=True)
class CardSection(Generic[S]):
    """One section of a card (`hardware:`, `engine:`, `model:`): the contract's section
    holding the card's checked values, and the names of the fields the card gave.

    Why the names: a field the card leaves out keeps what the collector detected,
    while one it writes, even as null, replaces it.
    """

    values: S
    given: frozenset[str] = frozenset()

    def fields(self) -> dict[str, Any]:
        """The fields the card gave, as checked (a float field holds a float)."""
        return {name: getattr(self.values, name) for name in sorted(self.given)}

    def over(self, detected: S) -> S:
        """A copy of `detected` with the card's fields in their place."""
        return dataclasses.replace(detected, **self.fields())  # type: ignore[type-var]


@dataclass(frozen=True)
class RunCard:
    """A checked run card; an empty card (or none) changes nothing."""

    hardware: CardSection[Hardware] = field(default_factory=lambda: CardSection(Hardware()))
    engine: CardSection[Engine] = field(default_factory=lambda: CardSection(Engine()))
    model: CardSection[Model] = field(default_factory=lambda: CardSection(Model()))
    launch_command: str | None = None
    notes: str | None = None
    submitter: str | None = None


def _key_name(key: object) -> str:
    plain = isinstance(key, str) and key.isprintable() and 0 < len(key) <= 40
    shown = show_value(key)
    return key if plain and shown == repr(key) else shown  # type: ignore[return-value]


def _section(kind: type, value: Any, where: str, name: str) -> CardSection:
    if value is None:  # `hardware:` with nothing under it says nothing
        return CardSection(kind())
    return CardSection(check_section(kind, value, where, name), frozenset(value))


def _text(value: Any, where: str, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ContractError(f"{where}: field {name}: expected a string, got {show_value(value)}")
    return value


def read_run_card(path: Path) -> RunCard:
    """Read and check a run card, each field once.

    Raises ContractError with one line naming the file and the field: an
    unreadable file, bad YAML (with its line), bytes that are not UTF-8, an
    unknown key at any level, a wrong type or a non-finite number.
    """
    where = str(path)
    data: Any = load_yaml(Path(path))
    if data is None:  # an empty card says nothing, which is fine
        return RunCard()
    if not isinstance(data, dict):
        raise ContractError(f"{where}: expected a mapping of {', '.join(ALLOWED)} "
                            f"at the top level, got {type(data).__name__}")
    for key in data:
        if key not in ALLOWED:
            raise ContractError(f"{where}: field {_key_name(key)}: unknown field "
                                f"(expected one of {', '.join(ALLOWED)})")
    parts = {key: _section(SECTIONS[key], value, where, key) if key in SECTIONS
             else _text(value, where, key) for key, value in data.items()}
    return RunCard(**parts)
