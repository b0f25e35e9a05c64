"""Small SVG bar charts for materialization metadata (a markdown image the Dagster UI shows).

Hand-written SVG instead of matplotlib: ~40 lines instead of a 30 MB dependency, and the output is
deterministic text (no font cache, no timestamps), so re-runs give identical metadata.
"""

from __future__ import annotations

import base64
from html import escape

WIDTH, BAR_H, GAP, LABEL_W, VALUE_W = 640, 18, 6, 200, 90


def bar_chart_svg(title: str, labels: list[str], values: list[float]) -> str:
    top = 28
    height = top + len(labels) * (BAR_H + GAP) + 8
    peak = max(values, default=0) or 1
    span = WIDTH - LABEL_W - VALUE_W
    rows = []
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = top + i * (BAR_H + GAP)
        w = max(1.0, span * value / peak) if value else 0.0
        rows.append(
            f'<text x="{LABEL_W - 6}" y="{y + 13}" text-anchor="end">{escape(str(label))[:32]}</text>'
            f'<rect x="{LABEL_W}" y="{y}" width="{w:.1f}" height="{BAR_H}" fill="#4f46e5"/>'
            f'<text x="{LABEL_W + w + 6:.1f}" y="{y + 13}">{value:,.0f}</text>'
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>'
        f'<text x="8" y="18" font-weight="bold">{escape(title)}</text>{"".join(rows)}</svg>'
    )


def markdown_image(title: str, svg: str) -> str:
    data = base64.b64encode(svg.encode()).decode()
    return f"![{title}](data:image/svg+xml;base64,{data})"


def bar_chart_markdown(title: str, labels: list[str], values: list[float]) -> str:
    return markdown_image(title, bar_chart_svg(title, labels, values))


LINE_W, LINE_H, PAD = 640, 260, 44


def line_chart_svg(title: str, series: dict[str, tuple[list[float], list[float]]]) -> str:
    """Lines (name -> (xs, ys)) on shared axes, e.g. train and eval loss by step."""
    xs = [x for sx, _ in series.values() for x in sx]
    ys = [y for _, sy in series.values() for y in sy]
    if not xs:
        return bar_chart_svg(title, [], [])
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1
    sx = lambda x: PAD + (x - x0) / (x1 - x0) * (LINE_W - 2 * PAD)  # noqa: E731
    sy = lambda y: LINE_H - PAD + (y0 - y) / (y1 - y0) * (LINE_H - 2 * PAD)  # noqa: E731
    colours = ("#4f46e5", "#dc2626", "#059669")
    parts = []
    for i, (name, (px, py)) in enumerate(series.items()):
        points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(px, py, strict=True))
        colour = colours[i % len(colours)]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>'
                     f'<text x="{LINE_W - PAD - 90}" y="{PAD + 14 * i}" fill="{colour}">{escape(name)}</text>')
    axes = (f'<line x1="{PAD}" y1="{LINE_H - PAD}" x2="{LINE_W - PAD}" y2="{LINE_H - PAD}" stroke="#999"/>'
            f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{LINE_H - PAD}" stroke="#999"/>'
            f'<text x="{PAD}" y="{LINE_H - PAD + 16}">{x0:g}</text>'
            f'<text x="{LINE_W - PAD}" y="{LINE_H - PAD + 16}" text-anchor="end">{x1:g}</text>'
            f'<text x="{PAD - 4}" y="{LINE_H - PAD}" text-anchor="end">{y0:.3g}</text>'
            f'<text x="{PAD - 4}" y="{PAD + 4}" text-anchor="end">{y1:.3g}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{LINE_W}" height="{LINE_H}" font-family="sans-serif" '
            f'font-size="12"><rect width="100%" height="100%" fill="white"/>'
            f'<text x="8" y="18" font-weight="bold">{escape(title)}</text>{axes}{"".join(parts)}</svg>')


def line_chart_markdown(title: str, series: dict[str, tuple[list[float], list[float]]]) -> str:
    return markdown_image(title, line_chart_svg(title, series))
