"""The benchmark report's charts, drawn by matplotlib from a recorded run (benchmarks/results/auto-greedy)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.container import BarContainer, ErrorbarContainer
from PIL import Image

from specchat.bench.report import ALL, build_report, charts, config_label, write_report

RECORDED = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "auto-greedy" / "report.json"
CHARTS = ("tokens_per_s.png", "speedup.png", "acceptance_by_position.png")


@pytest.fixture(scope="module")
def report() -> dict:
    """The recorded report rebuilt from its raw runs, as report.json allows, so its summary has today's fields:
    plain and auto over the builtin suite's eight categories, three repeats."""
    recorded = json.loads(RECORDED.read_text())
    meta = {key: value for key, value in recorded.items() if key not in ("cost_model", "summary", "runs")}
    return build_report(meta, recorded["runs"])


@pytest.fixture(scope="module")
def rows(report) -> dict[tuple[str, str], dict]:
    return {(row["category"], config_label(row["mode"], row["k"])): row for row in report["summary"]}


def _pixels_of(pixels: np.ndarray, color: str) -> int:
    return int(np.all(pixels == np.round(np.array(to_rgb(color)) * 255), axis=-1).sum())


def test_the_report_links_each_chart_and_each_is_a_drawn_png(report, tmp_path):
    written = write_report(report, tmp_path)
    md = (tmp_path / "report.md").read_text()
    # Plain is the first color of the cycle and auto the second, in every chart.
    drawn = {"tokens_per_s.png": ("C0", "C1"), "speedup.png": ("C1",), "acceptance_by_position.png": ("C1",)}
    for name in CHARTS:
        assert tmp_path / name in written and f"![{name}]({name})" in md
        with Image.open(tmp_path / name) as image:
            assert image.format == "PNG" and image.width >= 900 and image.height >= 400
            pixels = np.asarray(image.convert("RGB"))
        for color in drawn[name]:
            assert _pixels_of(pixels, color) > 2000, (name, color)  # bars or lines, not just a legend's swatch
        assert _pixels_of(pixels, "C2") == 0  # no third series


@pytest.mark.parametrize(
    ("chart", "value", "by_repeat"),
    [("tokens_per_s.png", "tokens_per_s", "tokens_per_s_by_repeat"), ("speedup.png", "speedup", "speedup_by_repeat")],
)
def test_bars_stand_at_the_reported_median_and_whiskers_span_the_repeats(report, rows, chart, value, by_repeat):
    ax = charts(report["summary"])[chart].axes[0]
    categories = [*report["settings"]["categories"], ALL]
    assert [label.get_text() for label in ax.get_xticklabels()] == categories
    bars = {container.get_label(): container for container in ax.containers if isinstance(container, BarContainer)}
    assert list(bars) == (["plain", "auto"] if chart == "tokens_per_s.png" else ["auto"])
    (errorbars,) = [container for container in ax.containers if isinstance(container, ErrorbarContainer)]
    whiskers = {round(seg[0][0], 6): (seg[0][1], seg[1][1]) for seg in errorbars.lines[2][0].get_segments()}
    spread = 0.0
    for label, container in bars.items():
        for category, patch in zip(categories, container.patches, strict=True):
            row = rows[category, label]
            assert patch.get_y() + patch.get_height() == pytest.approx(row[value])
            low, high = whiskers[round(patch.get_x() + patch.get_width() / 2, 6)]
            assert (low, high) == pytest.approx((min(row[by_repeat]), max(row[by_repeat])))
            assert len(row[by_repeat]) == 3 and low <= row[value] <= high
            spread = max(spread, high - low)
    assert spread > 0  # three repeats on a shared machine never agree exactly


def test_acceptance_has_a_panel_per_category_with_each_position(report, rows):
    figure = charts(report["summary"])["acceptance_by_position.png"]
    panels = {ax.get_title(): ax for ax in figure.axes if ax.get_visible()}
    assert list(panels) == [*report["settings"]["categories"], "all prompts"]
    for title, ax in panels.items():
        (line,) = ax.get_lines()
        accepted = rows[ALL if title == "all prompts" else title, "auto"]["acceptance_by_pos"]
        positions = [i + 1 for i, a in enumerate(accepted) if a is not None]
        assert positions and list(line.get_xdata()) == positions
        assert list(line.get_ydata()) == pytest.approx([a for a in accepted if a is not None])
