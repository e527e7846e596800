"""The Compare tab in a real browser (Debian's Chromium) over a real engine (SmolLM2 drafting for itself)."""

from __future__ import annotations

import re
import time

import pytest

from helpers import ARTIFACTS, free_port
from specchat.engine import BackendConfig, Engine, GenerationSettings
from specchat.host import EngineHost

pytestmark = [pytest.mark.browser, pytest.mark.models]


@pytest.fixture(scope="module")
def app(tiny_model, tmp_path_factory):
    """A Blocks holding only the Compare tab over a host with no model yet, in a specchat home of its own."""
    gr = pytest.importorskip("gradio")
    from specchat.ui import compare_tab

    with pytest.MonkeyPatch.context() as env:
        env.setenv("SPECCHAT_HOME", str(tmp_path_factory.mktemp("specchat-home")))
        host = EngineHost(draft_as_is=True)
        with gr.Blocks() as demo:
            with gr.Tab("Compare"):
                compare_tab.build(host)
        port = free_port()
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        yield f"http://127.0.0.1:{port}/", host, tiny_model
        demo.close()
        host.close()


def loaded(host: EngineHost, model) -> Engine:
    if host.engine is None:
        host.load(model, model, BackendConfig(n_ctx=1024, n_threads=1))
        assert host.wait_loaded(300).state == "ready"
    return host.engine


@pytest.fixture(scope="module")
def page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    yield page
    page.close()


def test_without_a_loaded_pair_it_asks_for_one(app, page):
    url, host, _ = app
    assert host.engine is None
    page.goto(url)
    page.click("#compare-run")
    page.wait_for_selector("#compare-status :text('Load a model pair first')", timeout=30_000)
    assert page.locator("#compare-text-plain textarea").input_value() == ""


def test_both_sides_fill_the_speedup_shows_and_the_plot_renders(app, page):
    url, host, model = app
    loaded(host, model)
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


def test_a_comparison_waits_in_the_engines_line_then_runs(app, page):
    url, host, model = app
    engine = loaded(host, model)
    page.goto(url)
    with host.turn(engine) as ahead:  # a chat or API request holding the engine, as theirs do
        assert ahead.wait(1) is None
        page.click("#compare-run")
        page.wait_for_selector("#compare-status :text('Waiting in line: 1 request ahead')", timeout=60_000)
        assert host.in_line() == 2
    page.wait_for_selector("#compare-status :text('Done.')", timeout=180_000)
    assert host.in_line() == 0 and not engine.lock.locked()


def test_an_error_mid_comparison_frees_the_line_for_the_next_request(app, page):
    url, host, model = app
    engine = loaded(host, model)
    steps = []

    def fail_in_the_second_run(step) -> None:  # compare keeps its own hook on the plain run, then restores this one
        steps.append(step)
        raise RuntimeError("a failure in the middle of the comparison")

    engine.on_verify = fail_in_the_second_run
    try:
        page.goto(url)
        page.click("#compare-run")
        page.wait_for_selector("#compare-status :text('a failure in the middle of the comparison')", timeout=180_000)
    finally:
        engine.on_verify = None
    assert len(steps) == 1 and page.locator("#compare-text-plain textarea").input_value()  # plain had finished
    assert host.in_line() == 0 and not engine.lock.locked()
    with host.turn(engine) as turn:  # the next request is served
        assert turn.wait(1) is None
        assert len(list(engine.chat([{"role": "user", "content": "Hi"}], GenerationSettings(max_tokens=4)))) > 0


def test_closing_the_tab_stops_its_comparison(app, browser):
    url, host, model = app
    engine = loaded(host, model)
    tab = browser.new_page()
    tab.goto(url)
    tab.fill("#compare-prompt textarea", "Count from 1 to 1000, one number per line, with nothing else.")
    tab.fill("#compare-max-tokens input[type=number]", "1024")
    tab.press("#compare-max-tokens input[type=number]", "Enter")
    tab.click("#compare-run")
    tab.wait_for_selector("#compare-status :text('Running plain')", timeout=60_000)
    tab.close()
    deadline = time.monotonic() + 300
    while host.in_line():
        assert time.monotonic() < deadline, "the closed tab's comparison still holds the line"
        time.sleep(0.1)
    stats = engine.last_stats
    assert stats.finish_reason == "closed" and stats.tokens < 1024, stats  # stopped mid-run, not run to its end
