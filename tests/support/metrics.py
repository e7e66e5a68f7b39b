"""Prometheus text scraped from a metrics endpoint, as samples keyed by name and labels."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families




def scrape_url(url: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one GET /metrics, parsed by prometheus_client."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}
