"""Helpers of the metrics tests: GET a daemon's page, parse /metrics, pick samples."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

HTTP_TIMEOUT_S = 10.0


def get(url: str, timeout_s: float = HTTP_TIMEOUT_S) -> tuple[int, bytes]:
    """Status and body of one GET (an HTTP error status is returned, not raised)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(url: str) -> tuple[int, dict]:
    status, body = get(url)
    return status, json.loads(body)


def scrape(base_url: str) -> dict:
    """/metrics of a daemon parsed by prometheus-client's own parser: name -> family."""
    status, body = get(base_url + "/metrics")
    assert status == 200, body[:500]
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def value(fams: dict, family: str, sample: str | None = None, **labels) -> float:
    """The sum of the samples of `family` (named `sample`, default the family's own name or
    its _total) whose labels include `labels`; 0 when there are none."""
    fam = fams.get(family)
    if fam is None:
        return 0.0
    names = {sample} if sample else {family, family + "_total"}
    return sum(
        s.value
        for s in fam.samples
        if s.name in names and all(s.labels.get(k) == v for k, v in labels.items())
    )


def label_sets(fams: dict, family: str) -> list[dict]:
    return [dict(s.labels) for s in fams[family].samples]
