"""Scraping a Prometheus endpoint as Prometheus would, with prometheus_client's own parser of
the text format."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Scrape:
    """One scrape: every sample, by name and labels."""

    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]
    types: dict[str, str]
    """Each metric family's type (counter, gauge, histogram), by family name."""

    def value(self, name: str, **labels: str) -> float:
        """The sample with exactly these labels; 0 when there is none (a counter not yet
        moved has no sample for its labels)."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def series(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        """Every sample of ``name``, by its labels."""
        return {labels: v for (n, labels), v in self.samples.items() if n == name}

    def has(self, name: str, **labels: str) -> bool:
        return (name, frozenset(labels.items())) in self.samples


PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
"""The ``Accept`` header of a Prometheus 3 server's scrapes."""


def scrape(url: str, *, openmetrics: bool = False, timeout_s: float = 10) -> Scrape:
    """GET ``url`` and parse it: Prometheus' text format 0.0.4 as a plain client gets it,
    or with ``openmetrics`` what a Prometheus server asks for, OpenMetrics."""
    headers = {"Accept": PROMETHEUS_ACCEPT} if openmetrics else {}
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        assert response.status == 200
        content_type = response.headers["Content-Type"]
        text = response.read().decode()
    if openmetrics:
        assert content_type.startswith("application/openmetrics-text; version=1.0.0")
        assert text.endswith("# EOF\n")
        families = openmetrics_families(text)
    else:
        assert content_type == "text/plain; version=0.0.4; charset=utf-8"
        families = text_string_to_metric_families(text)
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    types: dict[str, str] = {}
    for family in families:
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return Scrape(samples=samples, types=types)
