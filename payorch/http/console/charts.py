"""Charts drawn on the server as inline SVG: bars (one value per column) and lines (several series
over the same columns), with no script and no chart library.

What a chart promises:
- it is an image with a name: `role="img"`, its `aria-label` the summary the caller wrote (what a
  screen reader says), and a `<title>` element holding the same words;
- each bar, and each point of a line, carries a `<title>` with its exact value as the caller wrote
  it (a browser shows it on hover; a test reads it back);
- the scale runs from 0 to a round number at least the largest value, labelled above its top; the
  columns are labelled below every `label_every`-th column, counted back from the last;
- nothing the Content-Security-Policy would refuse: classes styled by `console.css`
  (`chart-series-N` for the Nth series), no `style` attribute.

Values are exact (`int` or `Fraction`); coordinates are rounded once, when written. A caller gives
the same figures as a table too (`<details>`), since a picture is not read by everyone.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from markupsafe import Markup

LEFT = 24  # room for the scale's 0
STEP = 20  # one column's width
BAR = 14
TOP = 16  # room for the scale's top label above the plot
PLOT_HEIGHT = 120
BELOW = 20  # the column labels under the plot
SERIES_CLASSES = 6  # `chart-series-0` to `chart-series-5` in console.css, used in turn

Value = int | Fraction


@dataclass(frozen=True)
class Series:
    """One line: its name (in the legend), and per column its value (None: no point that day) and
    the exact words of its point's `<title>`."""

    name: str
    values: Sequence[Value | None]
    titles: Sequence[str]


def nice_ceiling(value: Value) -> int:
    """The smallest of 1, 2, 2.5 (from 10 up), 5 times a power of ten that is at least `value`
    (and at least 1)."""
    power = 1
    while True:
        for step in (Fraction(1), Fraction(2), Fraction(5, 2), Fraction(5)):
            candidate = step * power
            if candidate.denominator == 1 and candidate >= value:
                return int(candidate)
        power *= 10


def svg_number(value: Value) -> str:
    """An exact value written with at most two decimals (rounded once, here)."""
    hundredths = round(Fraction(value) * 100)
    whole, part = divmod(abs(hundredths), 100)
    sign = "-" if hundredths < 0 else ""
    return f"{sign}{whole}" if not part else f"{sign}{whole}.{part:02d}".rstrip("0")


def svg_element(parent: ET.Element, tag: str, text: str | None = None, **attributes: object) -> ET.Element:
    node = ET.SubElement(
        parent, tag, {name.rstrip("_").replace("_", "-"): str(value) for name, value in attributes.items()}
    )
    node.text = text
    return node


def _frame(name: str, columns: int, height: int, title: str, summary: str) -> ET.Element:
    # No xmlns: the HTML parser puts an <svg> inside a page in the SVG namespace by itself.
    svg = ET.Element(
        "svg",
        {
            "viewBox": f"0 0 {LEFT + columns * STEP + 16} {height}",
            "class": f"chart chart-{name}",
            "role": "img",
            "aria-label": summary,
            "id": f"chart-{name}",
        },
    )
    svg_element(svg, "title", title)
    return svg


def _axes(svg: ET.Element, columns: int, labels: Sequence[str], top: str, label_every: int) -> None:
    """The plot's top and base lines, the scale's two labels, and a label under every
    `label_every`-th column counted back from the last."""
    right = LEFT + columns * STEP
    for y in (TOP, TOP + PLOT_HEIGHT):
        svg_element(svg, "line", x1=LEFT, y1=y, x2=right, y2=y, class_="chart-grid")
    # The top's label above its line, from the plot's left edge: a long amount is never cut off.
    svg_element(svg, "text", top, x=LEFT + 2, y=TOP - 3, class_="chart-axis")
    svg_element(svg, "text", "0", x=LEFT - 4, y=TOP + PLOT_HEIGHT, text_anchor="end", class_="chart-axis")
    for index in range(columns - 1, -1, -label_every):
        svg_element(
            svg,
            "text",
            labels[index],
            x=LEFT + index * STEP + STEP // 2,
            y=TOP + PLOT_HEIGHT + BELOW - 4,
            text_anchor="middle",
            class_="chart-axis",
        )


def _y(value: Value, top_value: Value) -> Fraction:
    return TOP + PLOT_HEIGHT - Fraction(value) * PLOT_HEIGHT / Fraction(top_value)


def svg_markup(svg: ET.Element) -> Markup:
    return Markup(ET.tostring(svg, encoding="unicode"))  # noqa: S704 (ElementTree escaped every text)


def bar_chart(
    *,
    name: str,
    title: str,
    summary: str,
    labels: Sequence[str],
    values: Sequence[Value],
    titles: Sequence[str],
    top_label: str | None = None,
    label_every: int = 7,
) -> Markup:
    """One bar per column whose value is above 0, each titled with its `titles` entry; `top_label`
    writes the scale's top (its number by default), for a value that is, say, money."""
    columns = len(values)
    top_value = nice_ceiling(max(values, default=0))
    svg = _frame(name, columns, TOP + PLOT_HEIGHT + BELOW, title, summary)
    _axes(svg, columns, labels, top_label or str(top_value), label_every)
    for index, (value, words) in enumerate(zip(values, titles, strict=True)):
        if value <= 0:
            continue
        y = _y(value, top_value)
        bar = svg_element(
            svg,
            "rect",
            x=LEFT + index * STEP + (STEP - BAR) // 2,
            y=svg_number(y),
            width=BAR,
            height=svg_number(TOP + PLOT_HEIGHT - y),
            class_="chart-bar",
        )
        svg_element(bar, "title", words)
    return svg_markup(svg)


def line_chart(
    *,
    name: str,
    title: str,
    summary: str,
    labels: Sequence[str],
    series: Sequence[Series],
    top_value: Value,
    top_label: str,
    label_every: int = 7,
) -> Markup:
    """A line per series over the columns, on one scale from 0 to `top_value`; a column without a
    value breaks the line, and each value is a dot titled with its `titles` entry."""
    columns = len(labels)
    legend_height = 16 * len(series)
    svg = _frame(name, columns, TOP + PLOT_HEIGHT + BELOW + legend_height, title, summary)
    _axes(svg, columns, labels, top_label, label_every)
    for number, line in enumerate(series):
        css = f"chart-series-{number % SERIES_CLASSES}"
        group = svg_element(svg, "g", class_=css)
        svg_element(group, "title", line.name)
        runs: list[list[str]] = [[]]
        for index, (value, words) in enumerate(zip(line.values, line.titles, strict=True)):
            if value is None:
                runs.append([])
                continue
            x, y = LEFT + index * STEP + STEP // 2, svg_number(_y(value, top_value))
            runs[-1].append(f"{x},{y}")
            dot = svg_element(group, "circle", cx=x, cy=y, r=3, class_="chart-dot")
            svg_element(dot, "title", words)
        for run in runs:
            if len(run) > 1:
                svg_element(group, "polyline", points=" ".join(run), class_="chart-line")
        legend_y = TOP + PLOT_HEIGHT + BELOW + 12 + 16 * number
        svg_element(group, "rect", x=LEFT, y=legend_y - 9, width=10, height=10, class_="chart-swatch")
        svg_element(group, "text", line.name, x=LEFT + 16, y=legend_y, class_="chart-legend")
    return svg_markup(svg)
