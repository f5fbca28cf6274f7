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
    starts with one of `wanted`."""
    if wanted is not None:
        prefixes = tuple(wanted)
        text = "\n".join(
            line for line in text.splitlines() if line.startswith(prefixes)
        ) + "\n"
    out = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.append(Sample(s.name, dict(s.labels), float(s.value)))
    except ValueError:
        return out
    return out


def labels_text(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
