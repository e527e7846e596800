"""Charts for the benchmark report and the compare view, drawn off-screen by matplotlib.

Each chart is its own Figure on an Agg canvas, never pyplot: pyplot keeps global figure state, which the UI's
worker threads would share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import PercentFormatter

DPI = 100
Points = Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Bar:
    """One bar: its height, the spread drawn as a whisker from low to high, and a mark drawn over it."""

    value: float
    low: float | None = None
    high: float | None = None
    mark: float | None = None


def shades(families: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """A color per name that keeps from chart to chart: one hue of matplotlib's default cycle per family (a
    decoding mode), its members (the mode at each k) from light to the full hue."""
    palette = {}
    for i, members in enumerate(families.values()):
        hue = np.array(to_rgb(f"C{i % 10}"))
        for j, name in enumerate(members):
            white = 0.6 * (1 - j / (len(members) - 1)) if len(members) > 1 else 0.0
            palette[name] = to_hex(hue + (1 - hue) * white)
    return palette


def _figure(width: int, height: int) -> Figure:
    figure = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_png(figure: Figure, path: Path) -> None:
    figure.savefig(path, format="png", dpi=DPI, facecolor="white")


def to_array(figure: Figure) -> np.ndarray:
    """The chart as an RGB pixel array (height x width x 3), as an image component takes it."""
    canvas = figure.canvas
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def bar_chart(
    groups: Sequence[str],
    series: Mapping[str, Sequence[Bar | None]],
    title: str,
    ylabel: str,
    *,
    palette: Mapping[str, str],
    spread_label: str = "spread",
    mark_label: str = "mark",
    baseline: float = 0.0,
    size: tuple[int, int] = (900, 450),
) -> Figure:
    """Grouped bars: one group per label, one bar per series in each (None leaves a gap), each with its whisker
    and mark where it has them. Bars grow from baseline (dashed where it is not 0: a ratio's 1x), so that a ratio
    a little under or over it shows which way it went. The legend sits outside, right of the axes."""
    figure = _figure(*size)
    ax = figure.add_subplot()
    width = 0.8 / max(len(series), 1)
    spread, marked = [], []
    for i, (name, bars) in enumerate(series.items()):
        offset = (i - (len(series) - 1) / 2) * width
        placed = [(g + offset, bar) for g, bar in enumerate(bars) if bar is not None]
        xs = [x for x, _ in placed]
        heights = [bar.value - baseline for _, bar in placed]
        ax.bar(xs, heights, width * 0.9, bottom=baseline, color=palette[name], label=name)
        spread += [(x, bar) for x, bar in placed if bar.low is not None and bar.high is not None]
        marked += [(x, bar.mark) for x, bar in placed if bar.mark is not None]
    extra = []
    if spread:
        ax.errorbar(
            [x for x, _ in spread],
            [bar.value for _, bar in spread],
            yerr=[[bar.value - bar.low for _, bar in spread], [bar.high - bar.value for _, bar in spread]],
            fmt="none",
            ecolor="black",
            elinewidth=1,
            capsize=min(4, 40 * width),
        )
        extra.append(Line2D([], [], color="black", marker="_", markersize=10, linewidth=1, label=spread_label))
    if marked:
        ax.scatter(*zip(*marked), marker="D", s=24, facecolors="none", edgecolors="black", zorder=3)
        extra.append(Line2D([], [], linestyle="", marker="D", fillstyle="none", color="black", label=mark_label))
    if baseline:
        ax.axhline(baseline, color="black", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(groups)), groups)
    if max(map(len, groups), default=0) * 7 > (size[0] - 300) / max(len(groups), 1):  # wider than their slots
        ax.tick_params(axis="x", labelrotation=25)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", color="#e5e7eb")
    ax.set_axisbelow(True)
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + extra, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return figure


def _lines(ax, series: Mapping[str, Points], palette: Mapping[str, str]) -> None:
    for name, points in series.items():
        if points:
            xs, ys = zip(*points)
            # Marks only where they stay readable: a timeline has a point per token.
            ax.plot(xs, ys, color=palette[name], marker="o" if len(points) <= 40 else None, markersize=4, label=name)
    ax.grid(color="#e5e7eb")


def line_chart(
    series: Mapping[str, Points],
    title: str,
    xlabel: str,
    ylabel: str,
    *,
    palette: Mapping[str, str],
    size: tuple[int, int] = (800, 450),
) -> Figure:
    """One line (with point marks while there are few points) per named series of (x, y) points."""
    figure = _figure(*size)
    ax = figure.add_subplot()
    _lines(ax, series, palette)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", frameon=False)
    return figure


def fraction_panels(
    panels: Mapping[str, Mapping[str, Points]],
    title: str,
    xlabel: str,
    ylabel: str,
    *,
    palette: Mapping[str, str],
    columns: int = 3,
    panel_size: tuple[int, int] = (330, 230),
) -> Figure:
    """Small multiples on shared axes: one panel per name, its series as lines of fractions (0 to 100%)."""
    columns = min(columns, len(panels))
    rows = -(-len(panels) // columns)
    figure = _figure(max(800, panel_size[0] * columns + 200), max(400, panel_size[1] * rows + 60))
    axes = list(figure.subplots(rows, columns, sharex=True, sharey=True, squeeze=False).flat)
    for ax, (name, series) in zip(axes, panels.items()):
        _lines(ax, series, palette)
        ax.set_title(name)
        ax.set_ylim(0, 1.05)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.xaxis.get_major_locator().set_params(integer=True)
    for i in range(len(panels), len(axes)):  # what is left of the grid's last row
        axes[i].set_visible(False)
        axes[i - columns].tick_params(labelbottom=True)  # shared axes label only the bottom row
    figure.supxlabel(xlabel)
    figure.supylabel(ylabel)
    figure.suptitle(title)
    names = list(dict.fromkeys(name for series in panels.values() for name in series))
    handles = [Line2D([], [], color=palette[name], marker="o", markersize=4, label=name) for name in names]
    figure.legend(handles=handles, loc="outside right center", frameon=False)
    return figure
