"""Bar charts as inline SVG, drawn on the server: no JavaScript, no CDN.

:func:`bar_chart` stacks a few series per bucket, with a scale, a few time
labels and a tooltip (``<title>``) on every bar.  All text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

_LEFT, _BOTTOM, _TOP = 44, 18, 8


def nice_ceiling(value: float) -> int:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is at least ``value``."""
    if value <= 1:
        return 1
    power = 10.0 ** math.floor(math.log10(value))
    step = next(step for step in (1.0, 2.0, 2.5, 5.0, 10.0) if step * power >= value)
    return math.ceil(step * power)


def bar_chart(
    labels: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[int]]],
    *,
    title: str,
    width: int = 720,
    height: int = 170,
    every: int = 1,
) -> SafeString:
    """An SVG of stacked bars: one per label, ``series`` as ``(name, colour, values)``.

    ``every`` labels every n-th bar on the time axis.
    """
    count = len(labels)
    totals = [sum(values[i] for _, _, values in series) for i in range(count)]
    top = nice_ceiling(max(totals, default=0))
    plot_w, plot_h = width - _LEFT - 4, height - _BOTTOM - _TOP
    slot = plot_w / max(1, count)
    bar = max(1.0, slot * 0.8)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="outbox-chart" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">',
        f"<title>{escape(title)}</title>",
    ]
    for fraction in (0, 0.5, 1):
        y = _TOP + plot_h * (1 - fraction)
        parts.append(
            f'<line x1="{_LEFT}" x2="{width - 4}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10" '
            f'fill="#666">{_short(top * fraction)}</text>'
        )
    for i, label in enumerate(labels):
        x = _LEFT + i * slot + (slot - bar) / 2
        base = float(_TOP + plot_h)
        tip = ", ".join(f"{name} {values[i]:,}" for name, _, values in series)
        parts.append(f"<g><title>{escape(label)}: {escape(tip)}</title>")
        parts.append(
            f'<rect x="{x:.1f}" y="{_TOP}" width="{bar:.1f}" height="{plot_h}" fill="transparent"/>'
        )
        for _, colour, values in series:
            h = plot_h * values[i] / top
            if h > 0:
                base -= h
                parts.append(
                    f'<rect x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                    f'fill="{escape(colour)}"/>'
                )
        parts.append("</g>")
        if i % max(1, every) == 0:
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{height - 4}" text-anchor="middle" '
                f'font-size="10" fill="#666">{escape(label)}</text>'
            )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # every text above is escaped


def legend(series: Sequence[tuple[str, str, Sequence[int]]]) -> SafeString:
    """Coloured keys naming each series, with its total."""
    keys = "".join(
        f'<span class="outbox-key"><span style="background:{escape(colour)}"></span>'
        f"{escape(name)} ({sum(values):,})</span>"
        for name, colour, values in series
    )
    return mark_safe(keys)  # escaped above


def _short(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 1000:
        return f"{value / 1000:g}k"
    return f"{value:g}"
