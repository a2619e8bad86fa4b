"""Line charts drawn on the server as SVG, so the console needs no JavaScript chart library.

:func:`line_chart` takes named series of (time in s, value) points and returns one
self-contained ``<svg>`` element: axes with rounded ticks (times in UTC), one polyline per
series, a legend, and a ``<title>`` per point for a browser's tooltip. Every text is escaped, so
topic names go in as they are.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from xml.sax.saxutils import escape, quoteattr

#: Series colours, distinguishable for the common colour-vision deficiencies (Okabe-Ito).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")

_MARGIN_LEFT, _MARGIN_RIGHT, _MARGIN_TOP, _MARGIN_BOTTOM = 64, 16, 28, 40


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values (1, 2 or 5 times a power of ten apart) covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError("tick bounds must be finite")
    if high < low:
        low, high = high, low
    if high == low:
        high = low + 1
    raw = (high - low) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks = []
    i = 0
    while True:
        v = first + i * step
        ticks.append(round(v, 12))
        if v >= high - step * 1e-9:
            break
        i += 1
    return ticks


def format_value(v: float) -> str:
    """A compact label: 1.5k, 2M, 0.25, 12."""
    a = abs(v)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= limit:
            return f"{v / limit:.3g}{suffix}"
    return f"{v:.3g}" if a else "0"


_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def time_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` tick times in [low, high] on round clock steps (10 s, 1 min, 15 min, 1 h, ...)."""
    raw = max(high - low, 1e-9) / max(1, count)
    step = next((s for s in _TIME_STEPS if s >= raw), math.ceil(raw / 86400) * 86400)
    first = math.ceil(low / step) * step
    return [float(first + i * step) for i in range(int((high - first) // step) + 1)]


def _time_label(t: float, span: float) -> str:
    fmt = "%H:%M:%S" if span < 600 else "%H:%M" if span < 2 * 86400 else "%m-%d %H:%M"
    return time.strftime(fmt, time.gmtime(t))


def line_chart(series: Mapping[str, Sequence[tuple[float, float]]], *, title: str = "", unit: str = "",
               width: int = 640, height: int = 240) -> str:
    """An SVG line chart of ``series`` (name -> [(time s, value), ...]); times on the x axis (UTC).

    Non-finite values are left out. With no points at all the chart says "no data yet".
    """
    if width < _MARGIN_LEFT + _MARGIN_RIGHT + 10 or height < _MARGIN_TOP + _MARGIN_BOTTOM + 10:
        raise ValueError("chart too small")
    clean = {name: [(float(t), float(v)) for t, v in pts if math.isfinite(t) and math.isfinite(v)]
             for name, pts in series.items()}
    points = [p for pts in clean.values() for p in pts]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label={quoteattr(title or "chart")}>',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    if title:
        out.append(f'<text x="{_MARGIN_LEFT}" y="18" font-size="13" font-family="sans-serif" '
                   f'font-weight="bold">{escape(title)}</text>')
    plot_w = width - _MARGIN_LEFT - _MARGIN_RIGHT
    plot_h = height - _MARGIN_TOP - _MARGIN_BOTTOM
    if not points:
        out.append(f'<text x="{_MARGIN_LEFT + plot_w / 2:.1f}" y="{_MARGIN_TOP + plot_h / 2:.1f}" '
                   'text-anchor="middle" font-size="12" font-family="sans-serif" fill="#666">no data yet</text>')
        out.append("</svg>")
        return "".join(out)
    t_min = min(t for t, _ in points)
    t_max = max(t for t, _ in points)
    if t_max == t_min:
        t_min, t_max = t_min - 30, t_max + 30
    y_ticks = nice_ticks(min(0.0, min(v for _, v in points)), max(v for _, v in points))
    y_min, y_max = y_ticks[0], y_ticks[-1]

    def x_of(t: float) -> float:
        return _MARGIN_LEFT + (t - t_min) / (t_max - t_min) * plot_w

    def y_of(v: float) -> float:
        return _MARGIN_TOP + plot_h - (v - y_min) / (y_max - y_min) * plot_h

    out.append('<g font-size="11" font-family="sans-serif" fill="#333">')
    for v in y_ticks:
        y = y_of(v)
        out.append(f'<line x1="{_MARGIN_LEFT}" y1="{y:.1f}" x2="{_MARGIN_LEFT + plot_w}" y2="{y:.1f}" '
                   'stroke="#e5e5e5"/>')
        out.append(f'<text x="{_MARGIN_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{format_value(v)}</text>')
    span = t_max - t_min
    for t in time_ticks(t_min, t_max, 5):
        x = x_of(t)
        out.append(f'<line x1="{x:.1f}" y1="{_MARGIN_TOP + plot_h}" x2="{x:.1f}" '
                   f'y2="{_MARGIN_TOP + plot_h + 4}" stroke="#333"/>')
        out.append(f'<text x="{x:.1f}" y="{_MARGIN_TOP + plot_h + 16}" '
                   f'text-anchor="middle">{_time_label(t, span)}</text>')
    out.append(f'<line x1="{_MARGIN_LEFT}" y1="{_MARGIN_TOP + plot_h}" x2="{_MARGIN_LEFT + plot_w}" '
               f'y2="{_MARGIN_TOP + plot_h}" stroke="#333"/>')
    out.append(f'<line x1="{_MARGIN_LEFT}" y1="{_MARGIN_TOP}" x2="{_MARGIN_LEFT}" y2="{_MARGIN_TOP + plot_h}" '
               'stroke="#333"/>')
    if unit:
        out.append(f'<text x="{_MARGIN_LEFT + plot_w}" y="{height - 6}" text-anchor="end">'
                   f'{escape(unit)} (UTC)</text>')
    out.append("</g>")
    legend_x = _MARGIN_LEFT + plot_w
    for i, (name, pts) in enumerate(clean.items()):
        colour = PALETTE[i % len(PALETTE)]
        if pts:
            coords = " ".join(f"{x_of(t):.1f},{y_of(v):.1f}" for t, v in sorted(pts))
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}">'
                       f'<title>{escape(name)}</title></polyline>')
            for t, v in pts:
                out.append(f'<circle cx="{x_of(t):.1f}" cy="{y_of(v):.1f}" r="2" fill="{colour}">'
                           f'<title>{escape(name)} {_time_label(t, 0)} {format_value(v)}'
                           f'{" " + escape(unit) if unit else ""}</title></circle>')
        if len(clean) > 1:
            y = _MARGIN_TOP - 12
            short = name if len(name) <= 24 else name[:23] + "\u2026"
            legend_x -= 14 + 7 * len(short)
            if legend_x < _MARGIN_LEFT:
                continue  # no room left: the line's own <title> still names it
            label = escape(short)
            out.append(f'<rect x="{legend_x:.0f}" y="{y - 8}" width="10" height="10" fill="{colour}"/>'
                       f'<text x="{legend_x + 13:.0f}" y="{y + 1}" font-size="11" '
                       f'font-family="sans-serif">{label}</text>')
    out.append("</svg>")
    return "".join(out)
