"""Inline SVG line charts (no JavaScript, no build step): a few series over time, with the
latest value, the y range and the time span as text."""

from __future__ import annotations

import datetime
from html import escape

COLORS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04")
WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP = 640, 180, 56, 22, 10


def _label(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def line_chart(series: dict[str, list[tuple[float, float]]], *, unit: str = "", title: str = "") -> str:
    """An <svg> of `series` (name -> [(unix seconds, value)]); a note when there is nothing yet."""
    points = [p for values in series.values() for p in values]
    if len(points) < 2:
        return (f'<p class="empty">{escape(title)}: not enough samples yet (the console samples every few '
                'seconds while it runs; reload in a moment).</p>')
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    top = max(v for _, v in points) or 1.0
    span = (t1 - t0) or 1.0
    plot_w, plot_h = WIDTH - PAD_LEFT - 8, HEIGHT - PAD_BOTTOM - PAD_TOP

    def xy(t: float, v: float) -> str:
        return f"{PAD_LEFT + (t - t0) / span * plot_w:.1f},{PAD_TOP + plot_h - v / top * plot_h:.1f}"

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="{escape(title)}">',
             f'<line x1="{PAD_LEFT}" y1="{PAD_TOP + plot_h}" x2="{WIDTH - 8}" y2="{PAD_TOP + plot_h}" class="axis"/>',
             f'<line x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{PAD_LEFT}" y2="{PAD_TOP + plot_h}" class="axis"/>',
             f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + 8}" text-anchor="end">{escape(_label(top))}</text>',
             f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + plot_h}" text-anchor="end">0</text>',
             f'<text x="{PAD_LEFT}" y="{HEIGHT - 4}">{_clock(t0)}</text>',
             f'<text x="{WIDTH - 8}" y="{HEIGHT - 4}" text-anchor="end">{_clock(t1)}</text>']
    legend = []
    for i, (name, values) in enumerate(sorted(series.items())):
        color = COLORS[i % len(COLORS)]
        if values:
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.8" '
                         f'points="{" ".join(xy(t, v) for t, v in values)}"/>')
            legend.append(f'<span style="color:{color}">&#9632;</span> {escape(name)}: '
                          f'{escape(_label(values[-1][1]))}{escape(unit)}')
    parts.append("</svg>")
    return (f'<figure><figcaption>{escape(title)}</figcaption>{"".join(parts)}'
            f'<div class="legend">{" &nbsp; ".join(legend)}</div></figure>')


def _clock(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S UTC")
