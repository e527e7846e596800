"""A streamed answer's feed (ui/feed.py): what a reader gets of it, in process and from the app's own server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from gradio_client import Client

from specchat.ui.feed import Feeds, changes


def test_a_reader_is_sent_what_changed_and_of_a_growing_answer_what_was_appended():
    shown = {"html": "<div>ab", "stats": "S1", "status": "T1"}
    assert changes(shown, {"html": "<div>abc", "stats": "S1", "status": "T2"}) == {"append": "c", "status": "T2"}
    # A fence that changed the last line: the answer's HTML is no longer the last one with text appended.
    assert changes(shown, {"html": "<div>a<pre>b", "stats": "S2"}) == {"html": "<div>a<pre>b", "stats": "S2"}
    assert changes({}, {"html": "<div>", "plot": "P"}) == {"html": "<div>", "plot": "P"}
    assert changes(shown, dict(shown)) == {}


def test_a_reader_gets_the_latest_update_then_an_end_whatever_thread_publishes():
    feeds = Feeds()
    feed = feeds.open()

    async def read() -> list[str]:
        events, started = [], False
        async for event in feed.events():
            if not started:  # the reader waits: now the answer's thread publishes
                started = True
                threading.Thread(target=answer).start()
            events.append(event)
        return events

    def answer() -> None:
        for n in range(1, 4):
            feed.publish({"html": "<div>" + "x" * n, "stats": "S"})
        feeds.close(feed)

    feed.publish({"html": "<div>", "stats": "S"})
    events = asyncio.run(asyncio.wait_for(read(), 30))
    assert events[0] == 'data: {"html": "<div>", "stats": "S"}\n\n'
    assert events[-1] == "event: end\ndata: \n\n"
    appended = "".join(json.loads(e[len("data: ") :])["append"] for e in events[1:-1])
    assert appended == "xxx"  # however many updates the reader skipped, it ends with the latest


@pytest.mark.models
def test_the_app_streams_an_answer_through_its_feed_and_forgets_it_once_done(chat_server):
    client = Client(chat_server.url, verbose=False)
    job = client.submit("Write a short poem about the sea.", api_name="/respond")
    # The update that says the prompt is being read tells the page where the feed is (the live answer, 4th output).
    while not (told := [out[3] for out in job.outputs() if isinstance(out[3], str) and out[3]]):
        assert not job.done(), job.outputs()
        time.sleep(0.01)
    url = told[0]
    assert url.startswith("specchat/live/"), url
    html, stats, ended = "", None, False
    with urllib.request.urlopen(chat_server.url + url, timeout=120) as feed:
        assert feed.headers["Content-Type"].startswith("text/event-stream")
        for line in feed:
            line = line.decode().rstrip("\n")
            if line == "event: end":
                ended = True
            elif line.startswith("data: {"):
                update = json.loads(line[len("data: ") :])
                html = update.get("html", html + update.get("append", ""))
                stats = update.get("stats", stats)
    final = job.result(timeout=120)
    assert ended and html.startswith('<div class="sc-overlay">') and 'data-kind="' in html
    assert 'data-stat="tokens"' in stats
    answer = final[1][-1]["content"][0]["text"]  # the overlay chat, once done: the whole answer's HTML
    assert answer.startswith(html)  # prose: what streamed is the start of it
    with pytest.raises(urllib.error.HTTPError) as gone:
        urllib.request.urlopen(chat_server.url + url, timeout=30)
    assert gone.value.code == 404
