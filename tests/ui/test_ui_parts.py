"""The app's pure parts: overlay HTML, stats panel and plot, persisted settings, the engine host's line."""

from __future__ import annotations

import json
import re
import threading
import time
from html.parser import HTMLParser

import pytest

from specchat.engine import Stats
from specchat.host import EngineHost
from specchat.ui.overlay import Piece, code_regions, overlay_html, text_of
from specchat.ui.settings import Settings, load_settings, save_settings, settings_path
from specchat.ui.stats_view import acceptance_svg, stats_html


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
    text = text_of(pieces)
    assert code_regions(text) == [(5, text.index("Done"))]
    markup = overlay_html(pieces)
    pre = markup[markup.index("<pre") : markup.index("</pre>")]
    assert "".join(s["text"] for s in parse(pre).spans) == "```python\nx = 1\n```\n"
    assert "".join(s["text"] for s in parse(markup).spans) == text


def test_an_unclosed_code_block_runs_to_the_end_while_streaming():
    assert code_regions("a\n```js\nlet x") == [(2, 13)]
    assert code_regions("no fences") == []
    assert code_regions("```\na\n```\nb\n~~~~\nc\n~~~~") == [(0, 10), (12, 23)]


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
    assert any(m.startswith("Timing the models") for m in messages), messages
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
    from specchat.engine import BackendConfig

    return BackendConfig(n_ctx=512, n_threads=2)
