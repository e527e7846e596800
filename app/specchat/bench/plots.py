"""Small line and bar charts drawn with Pillow: the benchmark report and the compare view need no plotting library."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from PIL import Image, ImageDraw, ImageFont

PALETTE = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04", "#db2777", "#4b5563"]
_MARGIN = {"left": 70, "right": 20, "top": 40, "bottom": 60}


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^n steps) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(lo / step) * step
    ticks = []
    value = first
    while value < hi + step * 0.999:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _label(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e5 else f"{value:.2e}"


class _Canvas:
    """A plot area with linear axes; maps data coordinates to pixels."""

    def __init__(
        self,
        size: tuple[int, int],
        title: str,
        x_range: tuple[float, float],
        y_ticks: list[float],
        legend: Sequence[str],
    ):
        self.image = Image.new("RGB", size, "white")
        self.draw = ImageDraw.Draw(self.image)
        self.font = ImageFont.load_default(size=13)
        self.small = ImageFont.load_default(size=11)
        w, h = size
        # The legend gets its own column on the right so it never hides data.
        legend_w = max((self.draw.textlength(name, font=self.small) for name in legend), default=0) + 36
        self.left, self.right = _MARGIN["left"], w - _MARGIN["right"] - legend_w
        self.top, self.bottom = _MARGIN["top"], h - _MARGIN["bottom"]
        self.x0, self.x1 = x_range
        self.y0, self.y1 = y_ticks[0], y_ticks[-1]
        self.draw.text((w / 2, 12), title, fill="black", font=self.font, anchor="mt")
        for tick in y_ticks:
            y = self.py(tick)
            self.draw.line([(self.left, y), (self.right, y)], fill="#e5e7eb")
            self.draw.text((self.left - 6, y), _label(tick), fill="#374151", font=self.small, anchor="rm")
        self.draw.line([(self.left, self.top), (self.left, self.bottom), (self.right, self.bottom)], fill="black")
        self._legend(legend)

    def px(self, x: float) -> float:
        return self.left + (x - self.x0) / ((self.x1 - self.x0) or 1.0) * (self.right - self.left)

    def py(self, y: float) -> float:
        return self.bottom - (y - self.y0) / ((self.y1 - self.y0) or 1.0) * (self.bottom - self.top)

    def axis_labels(self, xlabel: str, ylabel: str) -> None:
        self.draw.text(
            ((self.left + self.right) / 2, self.bottom + 34), xlabel, fill="black", font=self.font, anchor="mt"
        )
        self.draw.text((8, self.top - 22), ylabel, fill="black", font=self.font, anchor="la")

    def _legend(self, names: Sequence[str]) -> None:
        x, y = self.right + 16, self.top
        for i, name in enumerate(names):
            color = PALETTE[i % len(PALETTE)]
            self.draw.rectangle([x, y + i * 16, x + 10, y + i * 16 + 10], fill=color)
            self.draw.text((x + 16, y + i * 16 + 5), name, fill="black", font=self.small, anchor="lm")


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    title: str,
    xlabel: str,
    ylabel: str,
    size: tuple[int, int] = (800, 450),
) -> Image.Image:
    """One polyline (with point marks) per named series of (x, y) points."""
    points = [p for pts in series.values() for p in pts]
    xs = [x for x, _ in points] or [0.0, 1.0]
    ys = [y for _, y in points] or [0.0, 1.0]
    x_ticks = nice_ticks(min(0.0, min(xs)), max(xs))
    canvas = _Canvas(size, title, (x_ticks[0], x_ticks[-1]), nice_ticks(min(0.0, min(ys)), max(ys)), list(series))
    for tick in x_ticks:
        x = canvas.px(tick)
        canvas.draw.line([(x, canvas.bottom), (x, canvas.bottom + 4)], fill="black")
        canvas.draw.text((x, canvas.bottom + 8), _label(tick), fill="#374151", font=canvas.small, anchor="mt")
    for i, pts in enumerate(series.values()):
        color = PALETTE[i % len(PALETTE)]
        pixels = [(canvas.px(x), canvas.py(y)) for x, y in pts]
        if len(pixels) > 1:
            canvas.draw.line(pixels, fill=color, width=2)
        if len(pixels) <= 40:  # marks only where they stay readable
            for x, y in pixels:
                canvas.draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=color)
    canvas.axis_labels(xlabel, ylabel)
    return canvas.image


def bar_chart(
    groups: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    title: str,
    ylabel: str,
    reference: float | None = None,
    size: tuple[int, int] = (800, 450),
) -> Image.Image:
    """Grouped bars: one group per label, one bar per series in each (None leaves a gap); a dashed reference line."""
    values = [v for vs in series.values() for v in vs if v is not None]
    top = max([*values, reference or 0.0, 1e-9])
    canvas = _Canvas(size, title, (0.0, float(len(groups))), nice_ticks(0.0, top), list(series))
    n = max(len(series), 1)
    slot = (canvas.right - canvas.left) / max(len(groups), 1)
    bar = slot * 0.8 / n
    for g, group in enumerate(groups):
        x_group = canvas.left + g * slot + slot * 0.1
        for i, vs in enumerate(series.values()):
            value = vs[g]
            if value is None:
                continue
            x = x_group + i * bar
            canvas.draw.rectangle([x, canvas.py(value), x + bar - 2, canvas.bottom], fill=PALETTE[i % len(PALETTE)])
        canvas.draw.text(
            (canvas.left + (g + 0.5) * slot, canvas.bottom + 8), group, fill="black", font=canvas.small, anchor="mt"
        )
    if reference is not None:
        y = canvas.py(reference)
        for x in range(int(canvas.left), int(canvas.right), 12):
            canvas.draw.line([(x, y), (min(x + 6, canvas.right), y)], fill="black", width=1)
    canvas.axis_labels("", ylabel)
    return canvas.image
