"""Reads counters back out of this service's own metrics, for the API's status answers.

It parses the same exposition `/metrics` serves, so with several workers the values are the
sums over all of them, exactly what a scraper would see.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from app.observability.metrics import Metrics


class CounterValues:
    """The service's counters as `/metrics` shows them, parsed once per answer."""

    def __init__(self, metrics: Metrics) -> None:
        exposition = metrics.exposition().decode()
        self._families = {f.name: f for f in text_string_to_metric_families(exposition)}

    def of(self, name: str, label: str | None = None) -> dict[str, int]:
        """The counter family `name` (without `_total`) by the value of `label`; one entry
        `""` when it has no labels. A family never incremented is empty."""
        found: dict[str, int] = {}
        family = self._families.get(name)
        for sample in family.samples if family is not None else ():
            if sample.name != f"{name}_total":
                continue
            key = sample.labels.get(label, "") if label is not None else ""
            found[key] = found.get(key, 0) + int(sample.value)
        return found
