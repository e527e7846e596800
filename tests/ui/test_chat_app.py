"""The chat app in a real browser, over real models: streaming with the overlay, stats, Stop, tabs, models view, bad
input, and a Markdown view that loads nothing from elsewhere."""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from helpers import Server

pytestmark = [pytest.mark.browser, pytest.mark.models]

KINDS = {"accepted", "corrected", "bonus", "target"}
LONG_PROMPT = "Count from 1 to 500, one number per line, with nothing else."
SETTLED = ("done", "stopped", "error")

# Records every change of the status line's state and of the tokens stat, so that a test can tell what the
# page showed while an answer streamed, however briefly.
RECORDER = """() => {
  window.__seen = [];
  const look = () => {
    const status = document.querySelector('#sc-status .sc-status');
    const tokens = document.querySelector('#sc-stats [data-stat="tokens"]');
    const entry = [status ? status.dataset.state : '', tokens ? tokens.textContent : ''];
    const last = window.__seen[window.__seen.length - 1];
    if (!last || last[0] !== entry[0] || last[1] !== entry[1]) window.__seen.push(entry);
  };
  new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true,
                                                      attributes: true});
  look();
}"""


def open_chat(new_page, url: str):
    page = new_page(url)
    page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=180_000)
    page.wait_for_selector("#sc-input textarea")
    page.evaluate(RECORDER)
    return page


def send(page, text: str) -> int:
    """Send a message; returns the mark to give `settle` (how many states were seen before it)."""
    mark = page.evaluate("window.__seen.length")
    page.fill("#sc-input textarea", text)
    page.click("#sc-send")
    return mark


def settled_status(page, timeout: float = 60_000) -> tuple[str, str]:
    """(state, text) of the status line once it shows an end; else fails with what it shows (CI's output is all
    there is to go on)."""
    status = page.locator("#sc-status .sc-status")
    try:
        page.wait_for_function(
            "ends => ends.includes(document.querySelector('#sc-status .sc-status')?.dataset.state)",
            arg=list(SETTLED),
            timeout=timeout,
        )
    except PlaywrightTimeoutError:
        pytest.fail(
            f"the status line shows no end after {timeout / 1000:.0f} s: {status.get_attribute('data-state')}, "
            f"{status.inner_text()!r}"
        )
    return status.get_attribute("data-state"), status.inner_text()


def settle(page, mark: int, timeout: float = 180_000) -> list[tuple[str, str]]:
    """Wait until the answer sent at `mark` has ended; returns the (state, tokens) pairs seen since.

    Only an end after the answer started counts: the status of the previous answer may be drawn again (a
    re-render) after the mark, and taking that for this answer's end would race the new one.
    """
    page.wait_for_function(
        "([mark, ends]) => { const seen = window.__seen.slice(mark);"
        " const start = seen.findIndex(([state]) => state === 'generating');"
        " return start >= 0 && seen.slice(start).some(([state]) => ends.includes(state)); }",
        arg=[mark, list(SETTLED)],
        timeout=timeout,
    )
    return [tuple(e) for e in page.evaluate("mark => window.__seen.slice(mark)", mark)]


def answers(page):
    return page.locator("#sc-chat-overlay .sc-overlay")


def user_messages(page) -> list[str]:
    return page.locator("#sc-chat-overlay .sc-user").all_inner_texts()


def token_count(page) -> int:
    return answers(page).last.locator("[data-kind]").count()


def set_setting(page, name: str, value: int | str, settings_file: Path) -> None:
    """Set one of the Settings controls and wait until the app saved it to the config file (what the next tab
    and the next run start from)."""
    accordion = page.locator("#sc-settings")
    if not accordion.locator(f"#sc-set-{name}").is_visible():
        accordion.locator("button.label-wrap").click()
    box = page.locator(f"#sc-set-{name} " + ("textarea" if isinstance(value, str) else "input[type=number]"))
    # Typed again if needed: the page's own load event may still be filling in the saved settings.
    for _ in range(50):
        box.fill(str(value))
        if not isinstance(value, str):
            box.press("Enter")
        page.wait_for_timeout(200)
        if box.input_value() == str(value) and json.loads(settings_file.read_text()).get(name) == value:
            return
    pytest.fail(f"{name}={value!r} was not shown and saved to {settings_file}")


def set_max_tokens(page, n: int, settings_file: Path) -> None:
    set_setting(page, "max_tokens", n, settings_file)
    assert page.locator("#sc-set-max_tokens input[type=range]").input_value() == str(n)


def stat(page, key: str) -> str:
    return page.locator(f'#sc-stats [data-stat="{key}"]').inner_text()


def settings_file(server) -> Path:
    return server.home / "config" / "ui_settings.json"


def test_answer_streams_with_token_kinds_and_live_stats(chat_server, new_page, artifacts):
    page = open_chat(new_page, chat_server.url)
    seen = settle(page, send(page, "Write a short poem about the sea."))
    assert seen[-1][0] == "done", seen[-1]

    streamed_counts = {int(tokens) for state, tokens in seen if state == "generating" and tokens}
    assert len(streamed_counts) >= 2, f"the stats did not change while the answer streamed: {seen}"

    tokens = answers(page).last.locator("[data-kind]")
    kinds = set(tokens.evaluate_all("els => els.map(e => e.dataset.kind)"))
    assert kinds <= KINDS and len(kinds) >= 2, kinds
    accepted = answers(page).last.locator('[data-kind="accepted"]').first
    assert accepted.get_attribute("title").startswith("accepted draft token · draft position ")
    accepted.hover()

    final_tokens = int(stat(page, "tokens"))
    assert max(streamed_counts) <= final_tokens and tokens.count() <= final_tokens
    assert page.locator("#sc-stats .sc-stats").get_attribute("data-finish") in ("eog", "length")
    assert page.locator("#sc-plot rect.sc-bar").count() >= 1
    assert stat(page, "strategy").strip()
    page.screenshot(path=str(artifacts / "chat.png"))


def test_stop_ends_a_long_answer_and_the_chat_goes_on(chat_server, new_page, artifacts):
    page = open_chat(new_page, chat_server.url)
    set_max_tokens(page, 3000, settings_file(chat_server))
    try:
        mark = send(page, LONG_PROMPT)
        page.wait_for_function(
            "() => { const a = document.querySelectorAll('#sc-chat-overlay .sc-overlay');"
            " return a.length && a[a.length - 1].querySelectorAll('[data-kind]').length >= 40; }",
            timeout=120_000,
        )
        # Enter is another trigger than the Send button, so Gradio lets it through while the answer streams.
        page.fill("#sc-input textarea", "A second message while the first answer streams.")
        page.press("#sc-input textarea", "Enter")
        page.wait_for_function("mark => window.__seen.slice(mark).some(([state]) => state === 'busy')", arg=mark)
        page.click("#sc-stop")
        seen = settle(page, mark)
        assert seen[-1][0] == "stopped", seen[-1]
        count = token_count(page)
        page.wait_for_timeout(1500)
        assert token_count(page) == count, "tokens arrived after Stop settled"
        assert page.locator("#sc-stats .sc-stats").get_attribute("data-finish") == "closed"
        assert int(stat(page, "tokens")) < 3000

        seen = settle(page, send(page, "Now say hello in one short sentence."))
        assert seen[-1][0] == "done", seen[-1]
        assert answers(page).count() == 2 and token_count(page) > 0
        assert user_messages(page) == [LONG_PROMPT, "Now say hello in one short sentence."]
    finally:
        set_max_tokens(page, 160, settings_file(chat_server))


def test_stop_while_a_long_prompt_is_read_ends_it_at_the_next_batch_and_the_chat_goes_on(chat_server, new_page):
    page = open_chat(new_page, chat_server.url)
    mark = send(page, "word " * 3500)  # 7 of llama.cpp's batches of 512 tokens: many seconds on one thread
    reading = page.locator('#sc-status .sc-status[data-state="generating"]')
    reading.get_by_text(re.compile(r"^Reading the prompt: [\d,]+ of [\d,]+ tokens…$")).wait_for(timeout=120_000)
    page.click("#sc-stop")
    seen = settle(page, mark)
    assert seen[-1][0] == "stopped", seen[-1]
    assert stat(page, "tokens") == "0"  # not one token: the read stopped between batches, not at its end
    page.click("#sc-clear")
    seen = settle(page, send(page, "Now say hello in one short sentence."))
    assert seen[-1][0] == "done", seen[-1]
    assert token_count(page) > 0


def test_markdown_view_regenerate_and_clear(chat_server, new_page):
    page = open_chat(new_page, chat_server.url)
    settle(page, send(page, "Write a Python function that adds two numbers."))
    overlay_text = answers(page).last.inner_text()

    page.locator("#sc-overlay-switch input").uncheck()
    markdown = page.locator("#sc-chat-markdown")
    markdown.wait_for(state="visible")
    assert page.locator("#sc-chat-overlay").is_hidden()
    assert markdown.locator("[data-kind]").count() == 0
    markdown.locator("pre code").first.wait_for(timeout=10_000)  # the code block renders as code (once loaded)
    rendered = markdown.locator(".message-content").last.inner_text()
    assert "def " in rendered and "```" not in rendered and "def " in overlay_text
    page.locator("#sc-overlay-switch input").check()
    page.locator("#sc-chat-overlay").wait_for(state="visible")

    mark = page.evaluate("window.__seen.length")
    page.click("#sc-regenerate")
    seen = settle(page, mark)
    assert seen[-1][0] == "done"
    assert answers(page).count() == 1 and user_messages(page) == ["Write a Python function that adds two numbers."]

    page.click("#sc-clear")
    page.wait_for_function("() => !document.querySelector('#sc-chat-overlay .sc-overlay')")
    assert user_messages(page) == []
    assert page.locator("#sc-stats .sc-stats-empty").count() == 1


def test_a_message_sent_right_after_clear_is_answered(chat_server, new_page):
    page = open_chat(new_page, chat_server.url)
    assert settle(page, send(page, "Hi"))[-1][0] == "done"
    page.click("#sc-clear")
    # No wait for the clear to show: the next message follows at once, as a quick user's does.
    assert settle(page, send(page, "Hello"), timeout=60_000)[-1][0] == "done"
    assert user_messages(page) == ["Hello"]
    assert page.locator("#sc-input textarea").input_value() == ""


# Counts the animation frames that Gradio's status tracker asks for; it runs before the page's scripts, as an init
# script, so the app's own pacing of them (app.py, TRACKER_FRAMES_JS) sits in front of it.
TRACKER_FRAME_COUNTER = """
window.__trackerFrames = 0;
const requestFrame = window.requestAnimationFrame.bind(window);
window.requestAnimationFrame = (callback) => {
  if ((new Error().stack || '').includes('/statustracker-')) window.__trackerFrames += 1;
  return requestFrame(callback);
};
"""


def test_gradios_status_tracker_renders_no_frames_on_an_idle_page(chat_server, browser):
    # The tracker asks for a frame at every frame forever once it is unmounted while pending, as the page's own
    # "Loading..." one is: without the app's pacing, an open page rendered 60 frames a second, idle or not.
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        context.add_init_script(TRACKER_FRAME_COUNTER)
        page = context.new_page()
        page.goto(chat_server.url)
        page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=180_000)
        loaded = "performance.getEntriesByType('resource').some(e => e.name.includes('/statustracker-'))"
        assert page.evaluate(loaded), "Gradio's status tracker module is no longer named so: the pacing misses it"
        page.wait_for_timeout(1000)
        before = page.evaluate("window.__trackerFrames")
        page.wait_for_timeout(3000)
        per_s = (page.evaluate("window.__trackerFrames") - before) / 3
        assert per_s < 1, f"the idle page rendered {per_s:.0f} frames a second for Gradio's status tracker"
    finally:
        context.close()


def test_clear_leaves_no_animation_running(chat_server, new_page):
    # Gradio's full progress mounts a spinner on each output of an event; its spring animation runs on for seconds
    # after the spinner is gone, which a Clear just before a message put into the answer.
    page = open_chat(new_page, chat_server.url)
    assert settle(page, send(page, "Hi"))[-1][0] == "done"
    page.evaluate(
        "() => { window.__frames = 0; const request = window.requestAnimationFrame.bind(window);"
        " window.requestAnimationFrame = (callback) => { window.__frames += 1; return request(callback); }; }"
    )
    # A page just opened runs Gradio's own loading animation for a few seconds: Clear once the page is quiet.
    page.wait_for_function(
        "() => { const quiet = window.__frames === window.__seen; window.__seen = window.__frames; return quiet; }",
        polling=1000,
        timeout=30_000,
    )
    page.evaluate("window.__frames = 0")
    page.click("#sc-clear")
    page.wait_for_selector("#sc-stats .sc-stats-empty")
    page.wait_for_timeout(2000)
    frames = page.evaluate("window.__frames")
    assert frames < 20, f"the page asked for {frames} animation frames in the 2 s after Clear"


def test_no_event_shows_gradios_progress_spinner(chat_server):
    # Each event says its own progress; Gradio's spinner would animate on into whatever runs next (the test above).
    with urllib.request.urlopen(chat_server.url + "config", timeout=30) as response:
        config = json.load(response)
    shown = [d["id"] for d in config["dependencies"] if d["outputs"] and d["show_progress"] != "hidden"]
    assert shown == [], f"events {shown} show Gradio's progress"


def test_the_system_prompt_is_saved_and_reaches_the_model(chat_server, new_page):
    page = open_chat(new_page, chat_server.url)
    file = settings_file(chat_server)
    longer = "Be brief. " + "Answer as a patient teacher who explains every step, names each idea, and checks " * 3
    try:
        set_setting(page, "system_prompt", "Be brief.", file)
        assert settle(page, send(page, "Hi"))[-1][0] == "done"
        short_prompt = int(stat(page, "prompt_tokens"))
        page.click("#sc-clear")
        page.wait_for_function("() => !document.querySelector('#sc-chat-overlay .sc-overlay')")
        set_setting(page, "system_prompt", longer, file)
        assert settle(page, send(page, "Hi"))[-1][0] == "done"
        # The same first message: the model read the longer system prompt (less the prefix its cache kept).
        assert int(stat(page, "prompt_tokens")) >= short_prompt + 25
        other = open_chat(new_page, chat_server.url)
        other.locator("#sc-settings button.label-wrap").click()
        # A new tab fills in the saved settings on load: wait for that rather than read the built-in default.
        other.wait_for_function(
            "text => document.querySelector('#sc-set-system_prompt textarea')?.value === text", arg=longer
        )
    finally:
        set_setting(page, "system_prompt", "You are a helpful assistant.", file)


def test_reload_applies_the_thread_setting(chat_server, new_page):
    page = open_chat(new_page, chat_server.url)
    file = settings_file(chat_server)
    banner = page.locator("#sc-model .sc-model")
    assert banner.inner_text().endswith("· 1 thread"), banner.inner_text()  # the command line's --threads 1

    def reload_with(threads: int) -> None:
        set_setting(page, "threads", threads, file)
        page.get_by_role("button", name="Reload the model with these threads / GPU layers").click()
        page.wait_for_function(
            "text => { const b = document.querySelector('#sc-model .sc-model');"
            " return b && b.dataset.state === 'ready' && b.textContent.endsWith(text); }",
            arg=f"· {threads} thread{'s' * (threads != 1)}",
            timeout=180_000,
        )

    try:
        reload_with(2)
        assert settle(page, send(page, "Say hello."))[-1][0] == "done"
        assert token_count(page) > 0
    finally:
        reload_with(1)  # the machine's two cores are shared: the other tests run with one thread


def test_a_number_typed_past_its_bounds_becomes_the_bound_and_the_message_is_answered(chat_server, new_page):
    page = open_chat(new_page, chat_server.url)
    file = settings_file(chat_server)
    page.locator("#sc-settings button.label-wrap").click()
    seed = page.locator("#sc-set-seed input[type=number]")
    try:
        seed.fill("99999999999")
        seed.press("Enter")
        assert settle(page, send(page, "Say hello."), timeout=60_000)[-1][0] == "done"
        page.wait_for_function("() => document.querySelector('#sc-set-seed input').value === '2147483647'")
        for _ in range(50):  # the save, an event of its own, may land after the field shows the bound
            if json.loads(file.read_text())["seed"] == 2**31 - 1:
                break
            page.wait_for_timeout(100)
        assert json.loads(file.read_text())["seed"] == 2**31 - 1
    finally:
        set_setting(page, "seed", 0, file)


@contextmanager
def streaming_a_long_answer(new_page, server) -> Iterator[tuple]:
    """(a tab, the mark of its answer): a long answer that holds the engine until stopped; max tokens is 3000 for as
    long as the block lasts."""
    page = open_chat(new_page, server.url)
    set_max_tokens(page, 3000, settings_file(server))
    try:
        mark = send(page, LONG_PROMPT)
        page.wait_for_selector('#sc-status .sc-status[data-state="generating"]', timeout=120_000)
        yield page, mark
    finally:
        set_max_tokens(page, 160, settings_file(server))


def test_two_tabs_share_the_engine_in_turn(chat_server, new_page):
    second = open_chat(new_page, chat_server.url)
    with streaming_a_long_answer(new_page, chat_server) as (first, first_mark):
        second_mark = send(second, "What is the capital of France?")
        second.wait_for_selector('#sc-status .sc-status[data-state="waiting"]', timeout=30_000)
        assert "Waiting in line" in second.locator("#sc-status").inner_text()
        first.click("#sc-stop")
        assert settle(first, first_mark)[-1][0] == "stopped"
        assert settle(second, second_mark)[-1][0] == "done"
    assert user_messages(first) == [LONG_PROMPT]
    assert user_messages(second) == ["What is the capital of France?"]
    assert answers(second).count() == 1 and token_count(second) > 0


def test_stop_ends_a_long_comparison_and_the_engine_serves_the_next_one_and_the_chat(chat_server, new_page):
    page = open_chat(new_page, chat_server.url)
    page.get_by_role("tab", name="Compare").click()
    texts = [page.locator(f"#compare-text-{mode} textarea") for mode in ("plain", "speculative", "lookup")]
    status = page.locator("#compare-status")
    set_compare_max_tokens(page, 1024)
    page.fill("#compare-prompt textarea", LONG_PROMPT)
    page.click("#compare-run")
    page.wait_for_function(
        "() => document.querySelector('#compare-text-plain textarea').value.length >= 40", timeout=120_000
    )
    page.click("#compare-stop")
    status.get_by_text("Stopped.", exact=True).wait_for(timeout=30_000)
    shown = [text.input_value() for text in texts]
    page.wait_for_timeout(1500)
    assert [text.input_value() for text in texts] == shown, "the comparison went on after Stop"
    assert shown[1:] == ["", ""], "the comparison was stopped in its first run, plain"
    headers = [page.locator(f"#compare-header-{mode}").inner_text() for mode in ("plain", "speculative", "lookup")]
    assert headers[0].endswith("tokens · stopped"), headers
    assert all(header.endswith("· not run (stopped)") for header in headers[1:]), headers

    # Nothing holds the engine: the next comparison runs to its end, and the chat answers.
    set_compare_max_tokens(page, 16)
    page.fill("#compare-prompt textarea", "Say hello.")
    page.click("#compare-run")
    status.get_by_text("Done.", exact=True).wait_for(timeout=120_000)
    assert all(text.input_value() for text in texts)
    page.get_by_role("tab", name="Chat").click()
    assert settle(page, send(page, "Say hello."))[-1][0] == "done"


def set_compare_max_tokens(page, n: int) -> None:
    box = page.locator("#compare-max-tokens input[type=number]")
    box.fill(str(n))
    box.press("Enter")
    page.wait_for_function(
        "n => document.querySelector('#compare-max-tokens input[type=range]').value === String(n)", arg=n
    )


def test_models_view_lists_the_catalog_and_explains_a_mismatch(chat_server, new_page, model_paths, artifacts):
    from specchat.models import catalog

    page = new_page(chat_server.url)
    page.get_by_role("tab", name="Models").click()
    page.wait_for_selector("#sc-pairs tr[data-pair]")
    shipped = catalog.load_catalog(Path(catalog.shipped_catalog()[0]))
    rows = page.locator("#sc-pairs tr[data-pair]").evaluate_all("els => els.map(e => e.dataset.pair)")
    assert rows == list(shipped.pairs)
    # None of them installed in this home, none measured: the column says so rather than guessing.
    assert page.locator("#sc-pairs th").all_inner_texts()[-1] == "Speculation here"
    cells = page.locator("#sc-pairs td.sc-speculation").all_inner_texts()
    assert cells == ["not measured yet (load the pair once)"] * len(rows)

    tiny = str(next(p for n, p in model_paths.items() if n.startswith("smollm2")))
    qwen_draft = str(next(p for n, p in model_paths.items() if "0.5b" in n))
    for path, name in ((tiny, "smollm-local"), (qwen_draft, "qwen-small")):
        page.fill("#sc-local-path textarea, #sc-local-path input", path)
        page.fill("#sc-local-name textarea, #sc-local-name input", name)
        page.click("#sc-add")
        page.wait_for_selector(f'#sc-models tr[data-model="{name}"][data-state="installed"]')

    choose(page, "#sc-target", "smollm-local")
    choose(page, "#sc-draft", "qwen-small")
    verdict = page.locator('#sc-compat .sc-compat[data-ok="false"]')
    verdict.wait_for()
    assert "cannot draft for smollm-local" in verdict.inner_text()
    page.screenshot(path=str(artifacts / "models.png"), full_page=True)
    choose(page, "#sc-draft", "smollm-local")
    page.wait_for_selector('#sc-compat .sc-compat[data-ok="true"]')

    choose(page, "#sc-remove-model", "qwen-small")
    page.click("#sc-remove-model-button")
    page.wait_for_selector('#sc-models tr[data-model="qwen-small"]', state="detached")


def choose(page, dropdown: str, option: str) -> None:
    box = page.locator(f"{dropdown} input")
    box.click()
    listbox = page.locator(f"#{box.get_attribute('aria-controls')}")
    listbox.get_by_role("option", name=option, exact=True).click()


def test_without_models_the_app_opens_on_the_models_view(empty_server, new_page, artifacts):
    page = new_page(empty_server.url)
    page.wait_for_selector("#sc-pairs tr[data-pair]")
    assert page.get_by_role("tab", name="Models").get_attribute("aria-selected") == "true"
    assert page.locator("#sc-model .sc-model").get_attribute("data-state") == "empty"
    from specchat.models import catalog

    default = catalog.load_catalog(Path(catalog.shipped_catalog()[0])).default
    assert page.locator("#sc-pair input").input_value() == default
    assert page.locator("#sc-download").is_visible()
    assert page.locator(f'#sc-pairs tr[data-pair="{default}"]').get_attribute("data-state") == "missing"

    page.get_by_role("tab", name="Chat").click()
    page.fill("#sc-input textarea", "Hello?")
    page.click("#sc-send")
    page.wait_for_selector('#sc-status .sc-status[data-state="error"]')
    assert "No model is loaded" in page.locator("#sc-status").inner_text()


def test_the_server_listens_on_loopback_only_by_default(empty_server):
    tables = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]
    if not tables[0].is_file():
        pytest.skip("/proc/net/tcp is absent: this check reads Linux's socket tables")
    listening = []
    for table in tables:
        for line in table.read_text().splitlines()[1:] if table.is_file() else []:
            local, state = line.split()[1], line.split()[3]
            address, port = local.rsplit(":", 1)
            if state == "0A" and int(port, 16) == empty_server.port:  # 0A: LISTEN
                listening.append(address)
    assert listening == ["0100007F"], f"listening on {listening}, wanted 127.0.0.1 only"


def test_the_default_pair_downloads_in_one_click_with_progress_and_cancel(hub_server, new_page, artifacts):
    server, hub, _ = hub_server
    page = new_page(server.url)
    page.wait_for_selector('#sc-pairs tr[data-pair="smol-pair"][data-state="missing"]')
    assert page.locator("#sc-pair input").input_value() == "smol-pair"

    page.click("#sc-download")
    page.wait_for_selector('#sc-pairs tr[data-pair="smol-pair"][data-state="downloading"]')
    progress = page.locator("#sc-download-progress .sc-download")
    page.wait_for_selector(
        '#sc-download-progress .sc-download[data-state="downloading"] .sc-progress span[style]', state="attached"
    )
    assert "of 98 MB" in progress.inner_text()
    page.screenshot(path=str(artifacts / "models-downloading.png"))
    # A page opened mid-download shows it too (its table is made at load, which once landed after the click).
    other = new_page(server.url)
    other.wait_for_selector('#sc-pairs tr[data-pair="smol-pair"][data-state="downloading"]')
    page.click("#sc-cancel")
    page.wait_for_selector('#sc-download-progress .sc-download[data-state="cancelling"]')
    hub.release.set()  # the stalled transfer goes on, and the next chunk sees the cancel
    page.wait_for_selector('#sc-download-progress .sc-download[data-state="error"]', timeout=60_000)
    assert "Cancelled" in page.locator("#sc-download-progress").inner_text()
    assert page.locator('#sc-pairs tr[data-pair="smol-pair"]').get_attribute("data-state") == "missing"

    page.click("#sc-download")
    page.wait_for_selector('#sc-download-progress .sc-download[data-state="done"]', timeout=120_000)
    assert "Loading it now" in page.locator("#sc-download-progress").inner_text()
    assert page.locator('#sc-pairs tr[data-pair="smol-pair"]').get_attribute("data-state") == "installed"
    page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=120_000)
    # The first load measured what speculation buys here: the table says so without a reload of the page.
    page.wait_for_function(
        "() => !document.querySelector('#sc-pairs tr[data-pair=\"smol-pair\"] td.sc-speculation')"
        ".textContent.startsWith('not measured yet')",
        timeout=10_000,
    )


def remove_from_the_command_line(server: Server, name: str) -> subprocess.CompletedProcess:
    """`specchat models remove NAME` in a process of its own, with the server's home and catalog."""
    env = {**os.environ, "SPECCHAT_HOME": str(server.home), "SPECCHAT_CATALOG": str(server.home / "catalog.toml")}
    command = [sys.executable, "-m", "specchat", "models", "remove", name]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_the_loaded_pair_is_not_removed_until_another_is_loaded(installed_server, new_page, tiny_model):
    server, installed = installed_server
    page = new_page(server.url)
    page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=180_000)
    page.get_by_role("tab", name="Models").click()
    page.wait_for_selector('#sc-pairs tr[data-pair="smol-pair"][data-state="installed"]')
    progress = page.locator("#sc-download-progress .sc-download")
    page.click("#sc-remove")
    page.wait_for_selector('#sc-download-progress .sc-download:not([data-state="idle"])')
    assert progress.inner_text() == "smol-pair is loaded; load another pair before removing it"
    choose(page, "#sc-remove-model", "smol")  # the pair's model on its own, by the other Remove button
    page.click("#sc-remove-model-button")
    page.get_by_text("smol is loaded; load another pair before removing it", exact=True).wait_for()
    assert installed.is_file()
    assert page.locator('#sc-pairs tr[data-pair="smol-pair"]').get_attribute("data-state") == "installed"
    # From a terminal, the command line refuses it too: it knows what the running app holds.
    refused = remove_from_the_command_line(server, "smol-pair")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"error: smol-pair is loaded by the specchat running as process {server.proc.pid}; load another pair there,"
        " or quit it, before removing it\n"
    )
    assert installed.is_file()

    # Another model loaded (the same weights from another file), the pair's file is no longer in use.
    page.fill("#sc-local-path textarea, #sc-local-path input", str(tiny_model))
    page.fill("#sc-local-name textarea, #sc-local-name input", "smol-elsewhere")
    page.click("#sc-add")
    page.wait_for_selector('#sc-models tr[data-model="smol-elsewhere"][data-state="installed"]')
    choose(page, "#sc-target", "smol-elsewhere")
    page.click("#sc-load")
    page.wait_for_selector('#sc-model .sc-model[data-state="loading"]')
    page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=180_000)
    page.click("#sc-remove")
    page.get_by_text(f"Removed smol-pair: deleted {installed.name}.", exact=True).wait_for()
    assert not installed.exists()
    assert page.locator('#sc-pairs tr[data-pair="smol-pair"]').get_attribute("data-state") == "missing"


# A lone surrogate, as a browser sends one (JavaScript strings may hold them; Playwright's fill would refuse it).
TYPE_LONE_SURROGATE = """box => {
  const input = document.querySelector(box);
  input.value = 'abc \\ud800 def';
  input.dispatchEvent(new Event('input', {bubbles: true}));
}"""


def test_a_lone_surrogate_gets_one_clear_line_and_the_app_serves_the_next_messages(chat_server, new_page):
    second = open_chat(new_page, chat_server.url)
    with streaming_a_long_answer(new_page, chat_server) as (first, first_mark):
        # Waiting in line, the message is shown in the conversation (the page can show what the browser sent).
        second.evaluate(TYPE_LONE_SURROGATE, "#sc-input textarea")
        second.click("#sc-send")
        second.wait_for_selector('#sc-status .sc-status[data-state="waiting"]', timeout=30_000)
        assert user_messages(second) == ["abc \ufffd def"]
        first.click("#sc-stop")
        assert settle(first, first_mark)[-1][0] == "stopped"
    second.wait_for_selector('#sc-status .sc-status[data-state="error"]', timeout=60_000)
    said = second.locator("#sc-status").inner_text()
    assert "surrogate" in said and "\n" not in said.strip(), said
    # The message is back in the box to be fixed, the conversation as it was; nothing holds the engine.
    assert second.locator("#sc-input textarea").input_value() == "abc \ufffd def"
    assert user_messages(second) == []
    # The Compare tab takes the engine's lock on its own: it too says what went wrong and lets it go.
    second.get_by_role("tab", name="Compare").click()
    second.evaluate(TYPE_LONE_SURROGATE, "#compare-prompt textarea")
    second.click("#compare-run")
    second.locator("#compare-status").get_by_text("surrogate").wait_for(timeout=60_000)
    second.get_by_role("tab", name="Chat").click()
    for page in (second, first):
        assert settle(page, send(page, "Say hello."))[-1][0] == "done"


@pytest.fixture
def elsewhere() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on another loopback address, standing for any server off this machine: (its URL, the paths
    it was asked for)."""
    asked: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(204)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.2:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_the_markdown_view_loads_nothing_a_message_points_at(chat_server, new_page, elsewhere, artifacts):
    url, asked = elsewhere
    text = (
        f'An image <img src="{url}/raw.png"> and ![a chart]({url}/chart.png) and [a link]({url}/link).\n\n'
        f'<form action="{url}/form"><input name="q"><button>Send</button></form>\n\n<iframe src="{url}/frame"></iframe>'
    )
    page = open_chat(new_page, chat_server.url)
    settle(page, send(page, text))
    page.locator("#sc-overlay-switch input").uncheck()
    markdown = page.locator("#sc-chat-markdown")
    shown = markdown.locator(".message-content").first
    shown.get_by_text("image: a chart").wait_for()
    page.wait_for_timeout(1000)  # whatever the page would fetch, it would have asked for by now
    loading = markdown.locator(".message-content").locator("img, form, iframe, input")
    assert loading.count() == 0, loading.evaluate_all("els => els.map(e => e.outerHTML)")
    said = shown.inner_text()
    assert f'<img src="{url}/raw.png">' in said and f'<form action="{url}/form">' in said
    assert f'<iframe src="{url}/frame">' in said and f"({url}/chart.png)" in said and f"a link ({url}/link)" in said
    link = shown.get_by_role("link", name="a link")
    assert link.get_attribute("href") == f"{url}/link"
    assert {"noreferrer", "noopener"} <= set(link.get_attribute("rel").split())
    page.screenshot(path=str(artifacts / "markdown-escaped.png"))
    assert asked == []


def test_the_page_loads_posts_and_frames_nothing_from_elsewhere_whatever_renders(chat_server, browser, elsewhere):
    """The Content-Security-Policy on its own: markup put straight into the page, past the Markdown view's escaping."""
    from specchat.ui.app import CONTENT_SECURITY_POLICY

    url, asked = elsewhere
    for path in ("", "health", "v1/models"):
        with urllib.request.urlopen(chat_server.url + path, timeout=30) as response:
            assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(chat_server.url)
        page.wait_for_selector("#sc-input textarea")
        page.evaluate(
            """url => {
              window.__refused = [];
              document.addEventListener('securitypolicyviolation', e => window.__refused.push(e.effectiveDirective));
              document.body.insertAdjacentHTML('beforeend',
                `<img src="${url}/img.png"><iframe src="${url}/frame"></iframe>` +
                `<form id="out" action="${url}/form" method="post"><input name="q" value="secret"></form>`);
              document.getElementById('out').submit();
            }""",
            url,
        )
        page.wait_for_function("() => window.__refused.length >= 3", timeout=10_000)
        assert {"img-src", "frame-src", "form-action"} <= set(page.evaluate("window.__refused"))
        page.wait_for_timeout(1000)
    finally:
        context.close()
    assert asked == []


def test_a_path_the_file_system_refuses_is_one_line_and_the_next_file_is_added(empty_server, new_page, tiny_model):
    page = new_page(empty_server.url)
    page.wait_for_selector("#sc-pairs tr[data-pair]")
    progress = page.locator("#sc-download-progress .sc-download")
    page.fill("#sc-local-path textarea, #sc-local-path input", "/tmp/a\x00b.gguf")  # a NUL, which no path may hold
    page.click("#sc-add")
    page.wait_for_selector('#sc-download-progress .sc-download[data-state="error"]')
    said = progress.inner_text()
    assert said == "the path holds a NUL character, which no file name can; give the file's path again"
    page.fill("#sc-local-path textarea, #sc-local-path input", str(tiny_model))
    page.fill("#sc-local-name textarea, #sc-local-name input", "smollm-added")
    page.click("#sc-add")
    page.wait_for_selector('#sc-models tr[data-model="smollm-added"][data-state="installed"]')


def test_add_with_no_path_asks_for_one(empty_server, new_page):
    page = new_page(empty_server.url)
    page.wait_for_selector("#sc-pairs tr[data-pair]")
    page.fill("#sc-local-path textarea, #sc-local-path input", "  ")
    page.click("#sc-add")
    page.wait_for_selector('#sc-download-progress .sc-download[data-state="error"]')
    # Not the server's working folder, which an empty path resolved to: "/work/main is a folder, not a GGUF file".
    assert page.locator("#sc-download-progress").inner_text() == "give the path of the GGUF file to add"


def test_a_taken_name_is_refused_with_what_the_page_offers_not_the_cli_flag(empty_server, new_page, tiny_model):
    from specchat.models import catalog

    taken = catalog.load_catalog(Path(catalog.shipped_catalog()[0])).default
    page = new_page(empty_server.url)
    page.wait_for_selector("#sc-pairs tr[data-pair]")
    progress = page.locator("#sc-download-progress .sc-download")
    page.fill("#sc-local-path textarea, #sc-local-path input", str(tiny_model))
    page.fill("#sc-local-name textarea, #sc-local-name input", taken)
    page.click("#sc-add")
    page.wait_for_selector('#sc-download-progress .sc-download[data-state="error"]')
    assert progress.inner_text() == f"'{taken}' is already a catalog name; choose another name"


def test_a_download_that_cannot_start_offers_the_pages_own_add_field(empty_server, new_page):
    """The remedy an error names is worded for the page: its field, not the command line's `specchat models add`."""
    page = new_page(empty_server.url)
    page.wait_for_selector("#sc-pairs tr[data-pair]")
    page.click("#sc-download")  # the app runs with HF_HUB_OFFLINE=1 here
    page.wait_for_selector('#sc-download-progress .sc-download[data-state="error"]')
    said = page.locator("#sc-download-progress .sc-download").inner_text()
    assert said.startswith("HF_HUB_OFFLINE is set, so "), said
    assert said.endswith(" or register a GGUF file you already have in 'Add a local GGUF file' below"), said
    assert page.locator("#sc-local-path").get_by_text("Add a local GGUF file").is_visible()


def test_a_prompt_longer_than_the_context_says_so_in_sight_of_the_input(chat_server, new_page):
    page = new_page(chat_server.url, width=1280, height=1000)
    page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=180_000)
    page.fill("#sc-input textarea", "word " * 5000)  # the app's context holds 4096 tokens
    page.click("#sc-send")
    state, text = settled_status(page)
    assert state == "error" and "the context holds 4096" in text, (state, text)
    error = page.locator('#sc-status .sc-status[data-state="error"]')
    box = error.bounding_box()  # where the window shows it, as it is scrolled now
    assert box["y"] >= 0 and box["y"] + box["height"] <= 1000, f"the error is out of sight at {box}"


@pytest.mark.parametrize("height", [800, 900, 1080])
def test_the_chat_and_every_control_under_it_are_in_sight_of_a_window_so_high(chat_server, new_page, height):
    page = new_page(chat_server.url, width=1400, height=height)
    page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=180_000)
    # The view the saved settings name (an earlier test may have left the Markdown view on), once the page shows it.
    overlay = json.loads(settings_file(chat_server).read_text())["overlay"]
    shown, hidden = ("#sc-chat-overlay", "#sc-chat-markdown")[:: 1 if overlay else -1]
    page.locator(hidden).wait_for(state="hidden")
    chat = page.locator(shown).bounding_box()
    for control in ("#sc-status", "#sc-input", "#sc-send", "#sc-regenerate", "#sc-clear"):
        box = page.locator(control).bounding_box()
        assert box["y"] >= chat["y"] + chat["height"] and box["y"] + box["height"] <= height, (control, box, chat)
    assert chat["y"] >= 0 and chat["height"] >= 320, chat
