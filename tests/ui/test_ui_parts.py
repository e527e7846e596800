"""The app's parts without a browser: overlay HTML, the Markdown view's escaping, stats panel and plot, persisted
settings, the engine host's line and loading, and what a chat request does when something unexpected fails."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from html.parser import HTMLParser

import gradio as gr
import pytest

from specchat import logs
from specchat.engine import BackendConfig, Engine, GenerationSettings, SamplingParams, Stats
from specchat.engine.calibration import ROUNDS, Calibration, cpu_name, pair_files
from specchat.errors import SpecchatError
from specchat.host import EngineHost
from specchat.models import catalog
from specchat.ui.app import SETTING_NAMES, ChatApp
from specchat.ui.feed import Feeds
from specchat.ui.models_view import pairs_html
from specchat.ui.overlay import (
    KINDS,
    OverlayStream,
    Piece,
    code_regions,
    displayable,
    overlay_html,
    safe_markdown,
)
from specchat.ui.settings import Settings, load_settings, save_settings, settings_path
from specchat.ui.stats_view import TICK_ROOM_PX, acceptance_svg, stats_html


class _Tokens(HTMLParser):
    """Collects (data-kind, data-pos, title, text) of every token span, and the tags seen."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[dict] = []
        self.tags: list[str] = []
        self._open: dict | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "span" and "data-kind" in attrs:
            self._open = {**attrs, "text": ""}
            self.spans.append(self._open)
        elif tag == "br" and self._open is not None:
            self._open["text"] += "\n"

    def handle_endtag(self, tag):
        if tag == "span":
            self._open = None

    def handle_data(self, data):
        if self._open is not None:
            self._open["text"] += data


def parse(markup: str) -> _Tokens:
    parser = _Tokens()
    parser.feed(markup)
    return parser


def test_overlay_marks_each_token_with_its_kind_and_position():
    pieces = [
        Piece("accepted", "Hello", 1),
        Piece("accepted", ",", 2),
        Piece("corrected", " world", 3),
        Piece("target", "!", None),
        Piece("bonus", "\n", 5),
    ]
    spans = parse(overlay_html(pieces)).spans
    assert [(s["data-kind"], s.get("data-pos"), s["text"]) for s in spans] == [
        ("accepted", "1", "Hello"),
        ("accepted", "2", ","),
        ("corrected", "3", " world"),
        ("target", None, "!"),
        ("bonus", "5", "\n"),
    ]
    assert spans[2]["title"] == "target's correction · draft position 3"
    assert spans[3]["title"] == "target token"


def test_overlay_escapes_untrusted_token_text():
    evil = ["<script>alert(1)</script>", '" onmouseover="x', "<img src=x onerror=alert(1)>", "&amp;"]
    markup = overlay_html([Piece("target", t, None) for t in evil])
    parsed = parse(markup)
    assert set(parsed.tags) <= {"div", "span"}, "token text became markup"
    assert [s["text"] for s in parsed.spans] == evil
    assert all(set(s) <= {"class", "data-kind", "data-pos", "title", "text"} for s in parsed.spans)


def test_overlay_is_one_line_so_markdown_cannot_split_it():
    markup = overlay_html([Piece("target", "a\n\n\nb", None), Piece("target", "\n\n", None)])
    assert "\n" not in markup
    assert parse(markup).spans[0]["text"] == "a\n\n\nb"


def test_code_blocks_become_pre_blocks_even_when_tokens_straddle_the_fences():
    pieces = [
        Piece("accepted", "Try:\n``", 1),
        Piece("accepted", "`py", 2),
        Piece("corrected", "thon\nx = 1", 3),
        Piece("bonus", "\n```\nDone", 5),
    ]
    text = "".join(p.text for p in pieces)
    assert code_regions(text) == [(5, text.index("Done"))]
    markup = overlay_html(pieces)
    pre = markup[markup.index("<pre") : markup.index("</pre>")]
    assert "".join(s["text"] for s in parse(pre).spans) == "```python\nx = 1\n```\n"
    assert "".join(s["text"] for s in parse(markup).spans) == text


def test_an_unclosed_code_block_runs_to_the_end_while_streaming():
    assert code_regions("a\n```js\nlet x") == [(2, 13)]
    assert code_regions("no fences") == []
    assert code_regions("```\na\n```\nb\n~~~~\nc\n~~~~") == [(0, 10), (12, 23)]


def test_a_streamed_answer_renders_as_overlay_html_does_whatever_its_fences_do_later():
    """Pieces arrive a few at a time, as from a streamed answer; what OverlayStream keeps from earlier updates must
    never differ from rendering the whole answer again, whatever a later piece does to a fence (open, grow, close,
    turn out not to close)."""
    rng = random.Random(26)
    texts = ["```", "`", "``", "~~~", "~", "\n", "\n\n", " ", "   ", "\t", "py", "a", "x = 1", "<&>", "````", ""]
    for _ in range(2000):
        pieces = [
            Piece(rng.choice(KINDS), "".join(rng.choices(texts, k=rng.randint(0, 3))), rng.choice([None, 1, 2]))
            for _ in range(rng.randint(1, 30))
        ]
        stream, shown = OverlayStream(), 0
        while shown < len(pieces):
            step = rng.randint(1, 4)
            stream.extend(pieces[shown : shown + step])
            shown += step
            whole = overlay_html(pieces[:shown])
            streamed = stream.html()
            # While streaming, the closing tags at the end are left to the browser.
            assert whole.startswith(streamed) and whole[len(streamed) :] in ("</div>", "</code></pre></div>")
            if rng.random() < 0.3:
                assert stream.html(final=True) == whole
        assert stream.html(final=True) == overlay_html(pieces) and stream.pieces == pieces


def test_each_update_of_an_answer_appends_to_the_last_unless_a_fence_changes_it():
    """Gradio then sends the browser only what was appended."""
    stream, shown = OverlayStream(), []
    texts = [
        "Hello",
        ",",
        " world",
        "\n",
        "",
        "Next ",
        "line",
        "\n\n",
        "``",
        "`py",
        "\n",
        "x = 1",
        "\n```",
        "\n",
        "end",
    ]
    for text in texts:
        stream.extend([Piece("target", text, None)])
        shown.append(stream.html())
    changed = [texts[i] for i in range(1, len(shown)) if not shown[i].startswith(shown[i - 1])]
    assert changed == ["`py"]  # the line becomes a fence: its code block starts before the "``" already shown
    assert stream.html(final=True) == overlay_html(stream.pieces)


def test_the_markdown_view_gets_raw_html_as_text_and_images_as_links_that_show_their_targets():
    # Entities, not backslashes: a bare URL right before a backslash takes it in (GFM), and the tag would be HTML again.
    assert safe_markdown('see <img src="http://x/a.png"> <form action="http://x/f"><input name="q">') == (
        'see &lt;img src="http://x/a.png"> &lt;form action="http://x/f">&lt;input name="q">'
    )
    # An image is a link to it; a link shows its target after it (escaped: shown, never read as markup).
    assert safe_markdown('![chart](http://x/c.png "t")') == (
        '[image: chart](http://x/c.png "t") (http\\:\\/\\/x\\/c\\.png)'
    )
    assert safe_markdown("[docs](https://d.org/(v)1)") == (
        "[docs](https://d.org/(v)1) (https\\:\\/\\/d\\.org\\/\\(v\\)1)"
    )
    assert safe_markdown("[https://d.org](https://d.org) <https://d.org>") == (
        "[https://d.org](https://d.org) &lt;https://d.org>"
    )
    assert safe_markdown("[a <b>](u) and ![r][ref]") == "[a &lt;b>](u) (u) and &#33;[r][ref]"
    # Code is left as written: fences (in lists too, unclosed while streaming) and code spans on one line.
    code = "1. Run:\n   - this:\n     ```html\n     <img src=x>\n     ```\n`a < b` and ``c ` <d>`` \n```\n<e"
    assert safe_markdown(code) == code
    # Lines as Markdown counts them: \r\n is one break, U+2028 none.
    assert safe_markdown("a\u2028b <c>\r\n```\r\n<d>\r\n```\r\n<e>") == "a\u2028b &lt;c>\r\n```\r\n<d>\r\n```\r\n&lt;e>"
    # No code span where the renderer may see none: after an escaped backtick, across lines, over a table cell's
    # border, or inside a bare URL (GFM links it up to the next space, backticks and all).
    assert safe_markdown("\\`<i>` and `a\n<b>` and `c|<d>`") == "\\`&lt;i>` and `a\n&lt;b>` and `c|&lt;d>`"
    assert safe_markdown("http://x/`<img src=y>`") == "http://x/`&lt;img src=y>`"
    assert safe_markdown("2 < 3, no markup!") == "2 &lt; 3, no markup!"


def test_text_goes_back_to_the_browser_as_valid_unicode():
    assert displayable("abc \ud800 def \U0001f600") == "abc \ufffd def \U0001f600"
    assert displayable("abc \ud800 def").encode("utf-8")


def test_stats_panel_and_plot_show_the_numbers():
    stats = Stats(mode="speculative", strategy="draft model, k=3")
    stats.tokens, stats.iterations, stats.draft_s, stats.verify_s = 12, 4, 0.1, 0.3
    stats.record_draft(3, 3)
    stats.record_draft(3, 1)
    panel = stats_html(stats)
    assert 'data-stat="acceptance_rate">67%<' in panel
    assert 'data-stat="mean_accepted">1.00<' in panel
    assert 'data-stat="strategy">draft model, k=3<' in panel
    svg = acceptance_svg(stats)
    heights = [float(h) for h in re.findall(r'class="sc-bar" data-pos="\d" [^>]*height="([\d.]+)"', svg)]
    assert len(heights) == 3 and heights[0] > heights[1] == heights[2] > 0
    assert "position 1: 2 of 2 accepted (100%)" in svg
    assert "sc-stats-empty" in stats_html(None) and "sc-plot-empty" in acceptance_svg(None)


@pytest.mark.parametrize(("k", "labelled"), [(3, [1, 2, 3]), (16, list(range(1, 17))), (31, list(range(2, 31, 2)))])
def test_the_plot_labels_draft_positions_without_running_one_label_into_the_next(k, labelled):
    stats = Stats(mode="auto")
    stats.record_draft(k, k)
    svg = acceptance_svg(stats)
    ticks = re.findall(r'<text x="([\d.]+)" y="\d+" text-anchor="middle" class="sc-tick">(\d+)</text>', svg)
    assert [int(label) for _, label in ticks] == labelled
    xs = [float(x) for x, _ in ticks]
    assert min(b - a for a, b in zip(xs, xs[1:])) >= TICK_ROOM_PX
    assert len(re.findall('class="sc-bar"', svg)) == k


def test_a_k4_answer_that_ends_at_max_tokens_shows_draft_length_4(tiny_model):
    engine = Engine.load(tiny_model, tiny_model, BackendConfig(n_ctx=512, n_threads=1))
    drafts = []
    engine.on_verify = lambda step: drafts.append(len(step.drafts))
    # The tiny model drafting for itself, greedy: every draft is kept, 5 tokens a step; the last step has 1 token
    # left under max tokens, so it drafts nothing.
    settings = GenerationSettings(mode="speculative", k=4, sampling=SamplingParams(0.0), seed=0, max_tokens=21)
    list(engine.chat([{"role": "user", "content": "Count from 1 to 50."}], settings))
    stats = engine.last_stats
    engine.close()
    assert stats.finish_reason == "length" and drafts == [4, 4, 4, 4, 0] and stats.k == 0
    assert 'data-stat="k">4<' in stats_html(stats)


def test_settings_round_trip_through_the_config_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    assert settings_path() == tmp_path / "config" / "ui_settings.json"
    assert load_settings() == Settings()
    chosen = Settings(
        mode="lookup",
        k=7,
        temperature=0.7,
        top_k=40,
        top_p=0.9,
        min_p=0.05,
        seed=3,
        max_tokens=99,
        threads=2,
        gpu_layers=-1,
        system_prompt="Be brief.",
        overlay=False,
    )
    save_settings(chosen)
    assert load_settings() == chosen
    assert json.loads(settings_path().read_text())["mode"] == "lookup"


def test_settings_keep_what_is_valid_and_default_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    settings_path().parent.mkdir(parents=True)
    settings_path().write_text(
        json.dumps(
            {
                "mode": "warp",
                "k": 4.0,
                "temperature": "hot",
                "top_p": 0,
                "max_tokens": 2.5,
                "overlay": 1,
                "seed": 12,
                "unknown": True,
            }
        )
    )
    s = load_settings()
    assert (s.mode, s.k, s.temperature, s.top_p, s.max_tokens, s.overlay, s.seed) == (
        Settings().mode,
        4,
        0.0,
        1.0,
        Settings().max_tokens,
        True,
        12,
    )
    settings_path().write_text("{not json")
    assert load_settings() == Settings()


def test_the_line_serves_requests_in_arrival_order():
    host = EngineHost()
    first, second, third = host.join_line(), host.join_line(), host.join_line()
    assert [host.place(t, 0) for t in (first, second, third)] == [0, 1, 2]
    moved = []
    waiter = threading.Thread(target=lambda: moved.append(host.place(third, 5)))
    waiter.start()
    host.leave_line(first)
    waiter.join()
    assert moved == [1]
    host.leave_line(second)
    assert host.place(third, 0) == 0


def _messages_until_loaded(host: EngineHost, timeout: float = 120) -> list[str]:
    """Every message the banner shows while a load runs (polled fast: some last only a second)."""
    seen, deadline = [host.status().message], time.monotonic() + timeout
    while (status := host.status()).state == "loading":
        if time.monotonic() > deadline:
            pytest.fail(f"still loading after {timeout} s: {seen}")
        if status.message != seen[-1]:
            seen.append(status.message)
        time.sleep(0.002)
    return [*seen, status.message]


@pytest.mark.models
def test_loading_reports_ready_or_the_reason(tiny_model, qwen_pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    host = EngineHost()
    host.load(tiny_model, tiny_model, _config())
    messages = _messages_until_loaded(host)
    status = host.status()
    assert status.state == "ready" and host.engine is not None, status.message
    # The CPU copy of the draft and auto mode's timing of this machine are part of loading, said while they run,
    # and kept for the next load; the banner says when the copy drafts.
    assert any(m.startswith("Making a Q4_0 copy of the draft") for m in messages), messages
    timing = [m.split(": ", 1)[1] for m in messages if m.startswith("Timing the models on this machine")]
    assert timing[0].startswith("reading a sample text"), messages  # then each round, in order
    assert [m.split(",")[0] for m in timing[1:]] == [f"round {i} of {ROUNDS}" for i in range(1, ROUNDS + 1)], messages
    assert ("re-quantized for this CPU" in status.message) == (host.engine.draft.path != tiny_model)
    (calibration,) = (tmp_path / "cache").glob("calibration-*.json")
    stamp = calibration.stat().st_mtime_ns
    host.load(tiny_model, tiny_model, _config())
    assert not any(m.startswith(("Timing", "Making")) for m in _messages_until_loaded(host))
    assert host.status().state == "ready" and calibration.stat().st_mtime_ns == stamp
    host.load(qwen_pair[0], tiny_model, _config())
    status = host.wait_loaded(120)
    assert status.state == "error" and host.engine is None
    assert "cannot draft for" in status.message
    host.close()


def _config():
    return BackendConfig(n_ctx=512, n_threads=2)


def test_a_turn_taken_while_a_model_loads_waits_for_it_in_arrival_order(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))  # a new home: the load copies the draft and times the models
    host = EngineHost()
    host.load(tiny_model, tiny_model, _config())
    first, second = host.turn(None), host.turn(None)
    assert first.wait(0.01) == 0 and host.status().state == "loading"  # next, waiting for the model
    assert second.wait(0.01) == 1
    while (ahead := first.wait(0.25)) is not None:
        assert ahead == 0
    assert host.status().state == "ready" and first.engine is host.engine and host.engine.lock.locked()
    assert second.wait(0.01) == 1
    first.close()
    while second.wait(0.25) is not None:
        pass
    second.close()
    assert host.in_line() == 0 and not host.engine.lock.locked()

    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model")
    host.load(broken, None, _config())
    with host.turn(None) as turn, pytest.raises(SpecchatError, match="^Could not load the model"):
        while turn.wait(0.25) is not None:
            pass
    assert host.in_line() == 0
    host.close()


SEEN_ELSEWHERE = """
import json
from specchat.models.in_use import held_elsewhere
print(json.dumps({str(path): pid for path, pid in held_elsewhere().items()}))
"""


def _held_as_another_process_sees_it() -> dict[str, int]:
    seen = subprocess.run([sys.executable, "-c", SEEN_ELSEWHERE], capture_output=True, text=True, check=True)
    return json.loads(seen.stdout)


@pytest.mark.models
def test_a_load_asked_for_while_a_removal_checks_the_files_waits_for_it_and_others_see_what_it_holds(
    tiny_model, tmp_path, monkeypatch
):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    host = EngineHost(draft_as_is=True)
    loader = threading.Thread(target=host.load, args=(tiny_model, None, _config()))
    with host.files_held() as held:
        assert held == []
        loader.start()
        loader.join(0.5)
        assert loader.is_alive()  # held back: the removal may still delete the file it would open
    loader.join(10)
    with host.files_held() as held:
        assert held == [tiny_model]
    # Another process (a terminal's `specchat models remove`) sees it from the moment the load begins.
    assert _held_as_another_process_sees_it() == {str(tiny_model.resolve()): os.getpid()}
    assert host.wait_loaded(120).state == "ready"
    host.close()
    assert _held_as_another_process_sees_it() == {}


@pytest.fixture
def log_file(tmp_path, monkeypatch):
    """specchat's log set up as a server sets it up, in a home of the test's own; undone afterwards."""
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    path = logs.configure()
    yield path
    for handler in list(logs.LOGGER.handlers):
        logs.LOGGER.removeHandler(handler)
        handler.close()
    logs.LOGGER.propagate = True


def test_an_unexpected_error_is_logged_with_its_traceback_and_told_in_one_line(capsys, log_file):
    assert log_file == logs.log_file() and logs.configure() == log_file  # once per process
    try:
        raise RuntimeError("the decoder broke\nbadly")
    except RuntimeError as e:
        line = logs.unexpected(e, "Answering")
    assert (
        line == f"Answering failed unexpectedly (RuntimeError: the decoder broke badly); the details are in {log_file}."
    )
    written = log_file.read_text()
    assert "ERROR specchat: Answering failed" in written and "Traceback" in written
    assert 'raise RuntimeError("the decoder broke' in written and "Traceback" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_host(tiny_model, tmp_path_factory) -> Iterator[EngineHost]:
    """SmolLM2 drafting for itself, loaded as the app loads it (in a specchat home of its own)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCHAT_HOME", str(tmp_path_factory.mktemp("specchat-home")))
        host = EngineHost(draft_as_is=True)
        host.load(tiny_model, tiny_model, _config())
        # Loading times the models for auto mode: minutes at worst on two busy cores.
        assert host.wait_loaded(600).state == "ready", host.status().message
    yield host
    host.close()


def _chat_values(**changes) -> tuple:
    settings = Settings(mode="speculative", k=4, temperature=0.0, seed=0, max_tokens=12, **changes)
    return tuple(getattr(settings, name) for name in SETTING_NAMES)


def _status(update: tuple) -> str:
    return re.sub("<[^>]+>", "", update[-1])


def test_a_failure_at_the_start_of_an_answer_frees_the_engine_and_the_next_message_is_answered(
    tiny_host, log_file, monkeypatch
):
    app = ChatApp(tiny_host, 512, {}, Feeds())
    request = gr.Request(session_hash="tab")
    engine = tiny_host.engine

    def broken_chat(messages, settings, reading=None):  # a fault no check foresaw, in the real engine
        raise RuntimeError("the tokenizer broke")

    monkeypatch.setattr(engine, "chat", broken_chat)
    updates = list(app.respond(request, "Hello", [], *_chat_values()))
    textbox, conv, *_ = updates[-1]
    assert (textbox, conv) == ("Hello", [])  # the message is back in the box, the conversation as it was
    assert _status(updates[-1]).startswith("Answering failed unexpectedly (RuntimeError: the tokenizer broke)")
    assert "Traceback" in log_file.read_text()
    assert not engine.lock.locked() and tiny_host.in_line() == 0 and not app._busy

    monkeypatch.undo()
    updates = list(app.respond(request, "Hello", [], *_chat_values()))
    assert _status(updates[-1]) in ("Done.", "Stopped at the max tokens setting.")
    assert updates[-1][1][-1]["content"]


def test_a_failure_mid_answer_keeps_the_text_so_far_and_frees_the_engine(tiny_host, log_file, monkeypatch):
    app = ChatApp(tiny_host, 512, {}, Feeds())
    engine = tiny_host.engine
    real_chat = engine.chat

    def failing_after_3_tokens(messages, settings, reading=None):
        for i, event in enumerate(real_chat(messages, settings, reading)):
            if i == 3:
                raise OSError("the disk went away")
            yield event

    monkeypatch.setattr(engine, "chat", failing_after_3_tokens)
    updates = list(app.respond(gr.Request(session_hash="tab"), "Count to ten.", [], *_chat_values()))
    textbox, conv, *_ = updates[-1]
    assert textbox == "" and [m["role"] for m in conv] == ["user", "assistant"]
    assert len(conv[-1]["pieces"]) == 3 and conv[-1]["content"]
    assert _status(updates[-1]).startswith("Answering failed unexpectedly (OSError: the disk went away)")
    assert not engine.lock.locked() and tiny_host.in_line() == 0 and not app._busy


def test_the_pairs_table_says_what_speculation_buys_with_each_pair_here(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    catalog.add_local_model(tiny_model, "smol")
    catalog.user_catalog_path().parent.mkdir(parents=True)
    catalog.user_catalog_path().write_text('[pairs.smol-pair]\ntarget = "smol"\ndraft = "smol"\n')

    def cell() -> str:
        table = pairs_html(catalog.load_catalog())
        assert "<th>Speculation here</th>" in table
        row = re.search(r'<tr data-pair="smol-pair".*?</tr>', table).group(0)
        return re.search(r"<td class='sc-speculation'>(.*?)</td>", row).group(1)

    assert cell() == "not measured yet (load the pair once)"
    # What a first load keeps (calibration.load_or_measure), here at the 7B-cost target's costs.
    files = pair_files(tiny_model, tiny_model)
    cal = Calibration(0.365, {2: 1.41, 4: 1.71, 8: 3.13}, 0.118, "key", files, cpu_name())
    catalog.cache_dir().mkdir(parents=True)
    (catalog.cache_dir() / "calibration-key.json").write_text(cal.to_json())
    assert cell() == "auto: about 1.4x here"
