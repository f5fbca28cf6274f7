"""Reading a peer tool's file safely: size caps, JSON lines with their numbers.

Why here and not in each reader: every format shares the same ways to fail
(a file cut off mid-line by a full disk, a 2 GB export, bytes that are not
UTF-8, NaN where a number belongs), and each must end in one line that names
the file, the line and the field. Readers raise PeerFormatError; the import
command adds the path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from importer.peers.model import PeerFormatError

# A whole-document JSON file is parsed in memory (about 10x its size): refuse past this.
MAX_JSON_BYTES = 512 * 1024 * 1024
# A JSON Lines file is streamed line by line; one line past this is refused.
MAX_LINE_BYTES = 64 * 1024 * 1024


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _loads(text: str | bytes, line: int | None) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:  # JSONDecodeError is a ValueError; so is NaN/Infinity
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise PeerFormatError(f"not valid JSON ({msg})", line=line) from None


def load_json(path: Path) -> Any:
    """A whole JSON document, refusing files too large to parse in memory."""
    size = Path(path).stat().st_size
    if size > MAX_JSON_BYTES:
        raise PeerFormatError(
            f"{size / 2**20:,.0f} MiB is larger than the {MAX_JSON_BYTES // 2**20} MiB "
            "a whole-document JSON import reads; split the run or export JSON Lines")
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PeerFormatError(f"byte {exc.start} is not UTF-8") from None
    return _loads(data, None)


def load_yaml(path: Path) -> Any:
    """A tool's YAML configuration (safe loader: plain data only), under the JSON size cap."""
    import yaml

    size = Path(path).stat().st_size
    if size > MAX_JSON_BYTES:
        raise PeerFormatError(f"{size / 2**20:,.0f} MiB is larger than the "
                              f"{MAX_JSON_BYTES // 2**20} MiB a configuration file may be")
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise PeerFormatError(f"not readable YAML ({' '.join(str(exc).split())[:120]})") from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) for each non-blank line, streamed.

    A last line without its newline that does not parse is a file cut off
    mid-write, and is said so; every line must hold a JSON object.
    """
    with open(path, "rb") as fh:
        number = 0
        while True:
            # readline with a limit: a file without newlines (or a 2 GB line) is refused
            # after reading one cap's worth, never held in memory whole.
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise PeerFormatError(f"line longer than {MAX_LINE_BYTES / 2**20:g} MiB", line=number)
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PeerFormatError(f"byte {exc.start} of the line is not UTF-8", line=number) from None
            try:
                obj = _loads(text, number)
            except PeerFormatError:
                if not raw.endswith(b"\n"):
                    raise PeerFormatError("the last line is cut off (the file was truncated)",
                                          line=number) from None
                raise
            if not isinstance(obj, dict):
                raise PeerFormatError(f"expected a JSON object, found {type(obj).__name__}", line=number)
            yield number, obj


def number(obj: dict[str, Any], key: str, line: int | None = None, *, required: bool = True,
           minimum: float | None = None) -> float | None:
    """obj[key] as a finite number (bools are not numbers), or None when absent and not required."""
    value = obj.get(key)
    if value is None:
        if required:
            raise PeerFormatError("missing (expected a number)", line=line, field=key)
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PeerFormatError(f"expected a finite number, found {_kind(value)}", line=line, field=key)
    if minimum is not None and value < minimum:
        raise PeerFormatError(f"expected at least {minimum:g}, found {value:g}", line=line, field=key)
    return value


def numbers(obj: dict[str, Any], key: str, line: int | None = None, *, required: bool = True,
            minimum: float | None = None) -> list[float] | None:
    """obj[key] as a list of finite numbers (each at least `minimum`)."""
    value = obj.get(key)
    if value is None:
        if required:
            raise PeerFormatError("missing (expected a list of numbers)", line=line, field=key)
        return None
    if not isinstance(value, list):
        raise PeerFormatError(f"expected a list of numbers, found {_kind(value)}", line=line, field=key)
    out = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
            raise PeerFormatError(f"item {i}: expected a finite number, found {_kind(item)}",
                                  line=line, field=key)
        if minimum is not None and item < minimum:
            raise PeerFormatError(f"item {i}: expected at least {minimum:g}, found {item:g}",
                                  line=line, field=key)
        out.append(item)
    return out


def _kind(value: Any) -> str:
    """What a value is, without quoting it (it may be prompt text)."""
    if isinstance(value, float):
        return repr(value)  # nan, inf
    kinds = {str: "a string", list: "a list", dict: "an object", bool: "true/false"}
    return kinds.get(type(value), type(value).__name__)


def number_at(obj: dict[str, Any], key: str, where: str) -> float:
    """A required finite non-negative number, the error naming its full path (``where.key``)."""
    try:
        value = number(obj, key, minimum=0)
    except PeerFormatError as exc:
        raise PeerFormatError(exc.message, field=f"{where}.{key}") from None
    assert value is not None
    return value


def count_at(obj: dict[str, Any], key: str, where: str) -> int | None:
    """An optional token or request count: a whole number >= 0 (a fraction is not a count
    and is refused, never truncated), the error naming its full path (``where.key``)."""
    try:
        value = number(obj, key, required=False, minimum=0)
    except PeerFormatError as exc:
        raise PeerFormatError(exc.message, field=f"{where}.{key}") from None
    if value is None:
        return None
    if value != int(value):
        raise PeerFormatError(f"expected a whole number, found {value:g}", field=f"{where}.{key}")
    return int(value)
