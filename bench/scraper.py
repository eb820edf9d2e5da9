"""A Prometheus-like scraper for benchmarks: GETs a daemon's /metrics once a second while a
measurement runs (ten times as often as a usual scrape interval), so that "metrics on"
includes the cost of being scraped."""

from __future__ import annotations

import threading


class Scraper:
    """GETs `url`/metrics once a second between __enter__ and __exit__."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def _run(self) -> None:
        import urllib.request

        while not self._stop.wait(1.0):
            with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
                r.read()
            self.scrapes += 1

    def __enter__(self) -> Scraper:
        if self.url:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(15)
