"""A timeline of a nemesis run: one HTML file with an inline SVG, no scripts or downloads.

One row per client, each operation a bar from invoke to completion (green OK, grey FAIL,
orange UNKNOWN, drawn to the end of the run), hovering shows the operation; fault intervals
are shaded bands across every row, labelled above. The anomalies are listed under it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from tests.nemesis.faults import Step
from tests.nemesis.workloads import Event

WIDTH_PX = 1600
ROW_PX = 18
TOP_PX = 40
LABEL_PX = 110
EVENTS_DRAWN_MAX = 50_000
COLORS = {"OK": "#3a3", "FAIL": "#999", "UNKNOWN": "#e80"}


def write_timeline(
    path: Path,
    events: Sequence[Event],
    faults: Sequence[tuple[float, float, Step]],
    anomalies: Sequence[str],
) -> None:
    end_s = max([e.response_s or e.invoke_s for e in events] + [f[1] for f in faults] + [1.0])
    clients = sorted({e.client for e in events})
    row = {c: i for i, c in enumerate(clients)}
    height = TOP_PX + ROW_PX * len(clients) + 20
    scale = (WIDTH_PX - LABEL_PX - 10) / end_s

    def x(t: float) -> float:
        return LABEL_PX + t * scale

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height}" '
        'font-family="monospace" font-size="11">'
    ]
    for start, stop, step in faults:
        label = html.escape(f"{step.kind}:{step.action} {' | '.join(step.targets)}")
        parts.append(
            f'<rect x="{x(start):.1f}" y="{TOP_PX - 14}" '
            f'width="{max(1.0, (stop - start) * scale):.1f}" '
            f'height="{height - TOP_PX + 14}" fill="#c33" fill-opacity="0.12">'
            f"<title>{label} [{start:.2f}s, {stop:.2f}s]</title></rect>"
            f'<text x="{x(start):.1f}" y="{TOP_PX - 18}" fill="#a22">{label[:40]}</text>'
        )
    for c, i in row.items():
        y = TOP_PX + i * ROW_PX
        parts.append(f'<text x="2" y="{y + 12}">{html.escape(c)}</text>')
    for e in list(events)[:EVENTS_DRAWN_MAX]:
        y = TOP_PX + row[e.client] * ROW_PX + 3
        stop = e.response_s if e.response_s is not None else end_s
        tip = html.escape(
            f"{e.client} {e.op} key={e.key!r} value={e.value!r} {e.outcome} "
            f"[{e.invoke_s:.3f}, {'inf' if e.response_s is None else f'{e.response_s:.3f}'}]"
            + (f" {e.error}" if e.error else "")
        )
        parts.append(
            f'<rect x="{x(e.invoke_s):.1f}" y="{y}" '
            f'width="{max(0.8, (stop - e.invoke_s) * scale):.1f}" height="{ROW_PX - 6}" '
            f'fill="{COLORS[e.outcome]}" fill-opacity="0.8"><title>{tip}</title></rect>'
        )
    for s in range(0, int(end_s) + 1, max(1, int(end_s) // 20 or 1)):
        parts.append(f'<text x="{x(s):.1f}" y="{height - 4}" fill="#555">{s}s</text>')
    parts.append("</svg>")
    body = "\n".join(parts)
    listed = "".join(f"<li><pre>{html.escape(a)}</pre></li>" for a in anomalies) or "<li>none</li>"
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>nemesis timeline</title>"
        "</head><body><h1>nemesis timeline</h1>"
        "<p>rows: clients; bars: operations (green OK, grey FAIL, orange UNKNOWN); "
        "red bands: faults</p>"
        f"{body}<h2>anomalies</h2><ul>{listed}</ul></body></html>\n"
    )
