"""The optional price table (`build-site --prices prices.yaml`) and the cost it gives.

A price is dollars per GPU-hour for one GPU name, with the date it was seen
and where (`source`): a page that shows a cost shows both beside it. There is
no default table and no guessing: a run whose GPU has no row in the table has
no cost, and a build without --prices shows no cost anywhere.

The file::

    prices:
      - gpu: H200 SXM              # matched to run.yaml hardware.gpu_name
        usd_per_gpu_hour: 3.50     # > 0
        date: 2026-11-01           # when the price was seen (YYYY-MM-DD)
        source: "https://…"        # where (a URL or words)

GPU names match case-insensitively with runs of spaces folded; nothing else
(``H200`` does not match ``H200 SXM``). Cost per million output tokens at a
decode cell: the machine costs ``usd_per_gpu_hour × gpus`` dollars an hour
and writes ``total_tok_s × 3600`` output tokens an hour, so

    $ per 1M output tokens = usd_per_gpu_hour × gpus / (total_tok_s × 3600) × 1e6

(the same as ``usd_per_gpu_hour / (total tok/s per GPU × 3600) × 1e6``).
Errors are one line naming the file and the field (PriceError).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from rundir.words import MISSING, is_missing, round_half_up

SECONDS_PER_HOUR = 3600
PER_TOKENS = 1_000_000


class PriceError(ValueError):
    """A price table that cannot be used: one line naming the file and the field."""


@dataclass(frozen=True)
class Price:
    """One GPU's price, with the date and source the pages print beside a cost."""

    gpu: str
    usd_per_gpu_hour: float
    date: str
    source: str

    @property
    def note(self) -> str:
        """``$3.50 per GPU-hour, 2026-11-01, source: …``: what a cost is based on."""
        return (f"{dollars(self.usd_per_gpu_hour)} per GPU-hour ({self.gpu}), "
                f"{self.date}, source: {self.source}")


def page_key(price: Price | None) -> str:
    """A run's price as the keys of the pages that show it hold it: every field as the
    table gives it (a cost is computed from the unrounded price, so "$3.50" may stand
    for 3.504); "" without one. Only the pages showing a run's price hold it, so a run
    added on a priced GPU re-renders its own pages, not every priced run's."""
    return "" if price is None else repr(price)


def gpu_key(name: str | None) -> str:
    """How GPU names are matched: case-insensitive, runs of spaces folded."""
    return " ".join((name or "").split()).lower()


@dataclass(frozen=True)
class PriceTable:
    """Prices by GPU name; `for_gpu` finds a run's (None when the table has none)."""

    prices: tuple[Price, ...] = ()
    path: str = ""

    def for_gpu(self, gpu_name: str | None) -> Price | None:
        key = gpu_key(gpu_name)
        if not key:
            return None
        return next((p for p in self.prices if gpu_key(p.gpu) == key), None)


def cost_per_million(usd_per_gpu_hour: float | None, gpus: int | None,
                     total_tok_s: float | None) -> float | None:
    """Dollars per 1M output tokens at a cell; None when any input is missing or zero."""
    if (is_missing(usd_per_gpu_hour) or is_missing(total_tok_s) or not gpus
            or float(total_tok_s) <= 0):  # type: ignore[arg-type]
        return None
    per_hour = float(usd_per_gpu_hour) * gpus  # type: ignore[arg-type]
    tokens_per_hour = float(total_tok_s) * SECONDS_PER_HOUR  # type: ignore[arg-type]
    return per_hour / tokens_per_hour * PER_TOKENS


def dollars(value: float | None) -> str:
    """A price or cost: ``$3.50``, ``$1,234.57``; below 10 cents three significant
    digits (``$0.0421``) so a cheap point does not read as ``$0.00``."""
    if is_missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    if v != 0 and abs(v) < 0.1:
        digits = 2 - math.floor(math.log10(abs(v)))
        return f"${round_half_up(v, digits):.{digits}f}"
    return f"${round_half_up(v, 2):,.2f}"


def _field(path: Path, where: str, row: dict, name: str) -> object:
    if name not in row or row[name] is None or row[name] == "":
        raise PriceError(f"{path}: {where}.{name}: missing (each price needs gpu, "
                         "usd_per_gpu_hour, date and source)")
    return row[name]


def _price(path: Path, i: int, row: object) -> Price:
    where = f"prices[{i}]"
    if not isinstance(row, dict):
        raise PriceError(f"{path}: {where}: expected a mapping with gpu, usd_per_gpu_hour, "
                         "date and source")
    gpu = _field(path, where, row, "gpu")
    if not isinstance(gpu, str) or not gpu.strip():
        raise PriceError(f"{path}: {where}.gpu: expected a GPU name, got {gpu!r}")
    usd = _field(path, where, row, "usd_per_gpu_hour")
    if (isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd)
            or usd <= 0):
        raise PriceError(f"{path}: {where}.usd_per_gpu_hour: expected a number of dollars "
                         f"above 0, got {usd!r}")
    date = _field(path, where, row, "date")
    if isinstance(date, dt.date):
        date = date.isoformat()
    try:
        dt.date.fromisoformat(str(date))
    except ValueError:
        raise PriceError(f"{path}: {where}.date: expected a date YYYY-MM-DD, "
                         f"got {date!r}") from None
    source = _field(path, where, row, "source")
    if not isinstance(source, str) or not source.strip():
        raise PriceError(f"{path}: {where}.source: expected where the price comes from, "
                         f"got {source!r}")
    return Price(" ".join(gpu.split()), float(usd), str(date), " ".join(source.split()))


def load_prices(path: Path | str) -> PriceTable:
    """Read and check a price table; PriceError (one line) when it cannot be used."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PriceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise PriceError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise PriceError(f"{path}: not valid YAML{at}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("prices"), list) or not doc["prices"]:
        raise PriceError(f"{path}: prices: expected a list of prices "
                         "(gpu, usd_per_gpu_hour, date, source)")
    rows = [_price(path, i, row) for i, row in enumerate(doc["prices"])]
    seen: dict[str, int] = {}
    for i, p in enumerate(rows):
        if gpu_key(p.gpu) in seen:
            raise PriceError(f"{path}: prices[{i}].gpu: {p.gpu!r} is also priced at "
                             f"prices[{seen[gpu_key(p.gpu)]}]; keep one price per GPU")
        seen[gpu_key(p.gpu)] = i
    return PriceTable(tuple(rows), str(path))
