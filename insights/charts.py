"""Bar charts as SVG drawn on the server: no library, no script, no inline style (the
Content-Security-Policy); the viewBox scales a chart to its container."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

# A small drawing with large type: on a 390 px phone the 15-unit text is still 10 px.
WIDTH, HEIGHT = 480, 250
LEFT, RIGHT, TOP, BOTTOM = 62, 10, 14, 34
# The widest axis character (DejaVu Sans): the left margin fits the longest tick, "$200.00" too.
CHAR_W, GAP = 9.5, 6


@dataclass(frozen=True)
class Series:
    name: str
    css: str  # class of its bars: "bar-a", "bar-b", ...
    values: Sequence[float]


def _nice_max(value: float) -> float:
    """A round number at or above value, for the top of the axis."""
    if value <= 0:
        return 1.0
    step = 10 ** (len(str(int(value))) - 1)
    for factor in (1, 2, 2.5, 5, 10):
        if value <= step * factor:
            return step * factor
    return value


def bar_chart(
    title: str,
    labels: Sequence[str],
    series: Sequence[Series],
    *,
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
    whole: bool = False,
    least: float = 0,
) -> SafeString:
    """Bars per label, several series stacked, each with a <title>. `least`: the lowest top the
    axis has, so small or no values still get ticks `fmt` tells apart ("$0.01, $0.01, $0.00")."""
    count = len(labels)
    totals = [sum(s.values[i] for s in series) for i in range(count)]
    top = max(_nice_max(max(totals, default=0)), least)
    if whole:  # counts: whole-number ticks (0, 1, 2, 3, 4 rather than steps of 0.25)
        top = max(4, math.ceil(top / 4) * 4)
    ticks = [fmt(top * tick / 4) for tick in range(5)]
    left = max(LEFT, math.ceil(max(len(t) for t in ticks) * CHAR_W) + GAP + 2)
    plot_w, plot_h = WIDTH - left - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(count, 1)
    bar_w = max(slot * 0.7, 1)
    parts: list[str] = []
    for tick, text in enumerate(ticks):
        y = TOP + plot_h - plot_h * tick / 4
        parts.append(
            f'<line class="grid" x1="{left}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="axis" x="{left - GAP}" y="{y + 4:.1f}" text-anchor="end">'
            f"{conditional_escape(text)}</text>"
        )
    every = max(1, math.ceil(count / 5))  # at most 5 labels, so they never overlap
    for i, label in enumerate(labels):
        x = left + slot * i + (slot - bar_w) / 2
        base: float = TOP + plot_h
        for s in series:
            value = s.values[i]
            if value <= 0:
                continue
            h = plot_h * value / top
            base -= h
            said = conditional_escape(f"{label}: {fmt(value)} {s.name}")
            parts.append(
                f'<rect class="bar {conditional_escape(s.css)}" x="{x:.1f}" y="{base:.1f}" '
                f'width="{bar_w:.1f}" height="{h:.1f}"><title>{said}</title></rect>'
            )
        if (count - 1 - i) % every == 0:  # counted from the right: today is always labelled
            last = i == count - 1  # the last one stays inside
            at = WIDTH - RIGHT if last else left + slot * i + slot / 2
            parts.append(
                f'<text class="axis" x="{at:.1f}" y="{HEIGHT - 12}" text-anchor='
                f'"{"end" if last else "middle"}">{conditional_escape(label)}</text>'
            )
    summary = "; ".join(f"{s.name}: {fmt(sum(s.values))} in total" for s in series)
    svg = format_html(
        '<figcaption>{}</figcaption><svg class="chart" viewBox="0 0 {} {}" role="img" '
        'aria-label="{}"><title>{}</title>{}</svg>',
        title,
        WIDTH,
        HEIGHT,
        f"{title}. {summary}",
        title,
        mark_safe("".join(parts)),  # noqa: S308 - every text in every part is escaped
    )
    legend = format_html_join(
        "",
        '<li><span class="swatch {}"></span>{}</li>',
        ((s.css, s.name) for s in series),
    )
    return format_html('{}<ul class="legend">{}</ul>', svg, legend)
