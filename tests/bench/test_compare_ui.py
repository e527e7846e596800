"""The Compare tab in a real browser (Debian's Chromium) over a real engine (SmolLM2 drafting for itself)."""

from __future__ import annotations

import re

import pytest

from helpers import ARTIFACTS, free_port
from specchat.engine import Engine

pytestmark = [pytest.mark.browser, pytest.mark.models]


@pytest.fixture(scope="module")
def app(tiny_model):
    """A Blocks holding only the Compare tab; `holder` decides what get_engine returns."""
    gr = pytest.importorskip("gradio")
    from specchat.ui import compare_tab

    engine = Engine.load(tiny_model, tiny_model)
    holder: dict[str, Engine | None] = {"engine": None}
    with gr.Blocks() as demo:
        with gr.Tab("Compare"):
            compare_tab.build(lambda: holder["engine"])
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/", holder, engine
    demo.close()
    engine.close()


@pytest.fixture(scope="module")
def page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    yield page
    page.close()


def test_without_a_loaded_pair_it_asks_for_one(app, page):
    url, holder, _ = app
    holder["engine"] = None
    page.goto(url)
    page.click("#compare-run")
    page.wait_for_selector("#compare-status :text('Load a model pair first')", timeout=30_000)
    assert page.locator("#compare-text-plain textarea").input_value() == ""


def test_both_sides_fill_the_speedup_shows_and_the_plot_renders(app, page):
    url, holder, engine = app
    holder["engine"] = engine
    page.goto(url)
    page.fill("#compare-prompt textarea", "Write a Python function that reverses a string.")
    page.click("#compare-run")
    page.wait_for_selector("#compare-status :text('Done.')", timeout=180_000)

    texts = {mode: page.locator(f"#compare-text-{mode} textarea").input_value() for mode in ("plain", "speculative")}
    assert all(len(text) > 20 for text in texts.values()), texts
    for mode in ("plain", "speculative", "lookup"):
        assert re.search(r"\d+\.\d tok/s · \d+ tokens · done", page.inner_text(f"#compare-header-{mode}"))
    summary = page.inner_text("#compare-summary")
    assert re.search(r"speculative k=4\s+[\d.]+\s+\d+\.\d\dx\s+\d+%", summary), summary
    assert re.search(r"lookup k=4\s+[\d.]+\s+\d+\.\d\dx", summary), summary

    plot = page.locator("#compare-plot img")
    plot.wait_for(timeout=30_000)
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=plot.element_handle(), timeout=30_000)
    assert plot.evaluate("img => [img.naturalWidth, img.naturalHeight]") == [800, 450]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "compare_tab.png"), full_page=True)
