"""Reading Prometheus text exposition (the engines' /metrics).

prometheus-client's own parser is used so label escaping and special
values are read as the exporter means them. `wanted` pre-filters lines by
metric name first: vLLM's page is large and only a few gauges matter while
streams are being timed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_metrics(text: str, wanted: Iterable[str] | None = None) -> list[Sample]:
    """All samples in a /metrics page, optionally only those whose name
    starts with one of `wanted`. Never raises: a malformed line (or a page
    that is not Prometheus text at all, e.g. an HTML error page) is dropped
    and the well-formed lines around it are kept."""
    if wanted is not None:
        prefixes = tuple(wanted)
        text = "\n".join(
            line for line in text.splitlines() if line.startswith(prefixes)
        ) + "\n"
    try:
        return _samples(text)
    except ValueError:
        pass
    # Line by line: slower, but one bad line costs only itself.
    out: list[Sample] = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            try:
                out += _samples(line + "\n")
            except ValueError:
                continue
    return out


def _samples(text: str) -> list[Sample]:
    return [Sample(s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples]


def labels_text(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
