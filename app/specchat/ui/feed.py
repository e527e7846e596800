"""A streamed answer's updates to the page, beside Gradio's queue: Server-Sent Events the page reads itself.

Through Gradio, each update of a streaming event costs the browser Gradio's own work on it (its status bookkeeping,
the components' updates) on top of rendering what changed, and on a small machine that CPU time is taken from
llama.cpp's threads (docs/performance.md, "The chat tab against the CLI"). So while an answer streams in the overlay
chat, the event tells the page once where its feed is, and the feed carries the answer's HTML, the stats panel, the
plot and the status line; Gradio's event renders the finished answer as before.

A feed's address holds a random token that only the page of the answer is told (through its own Gradio event, behind
the app's login if it has one): knowing it is what entitles a reader, as with Gradio's own session ids.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from specchat.ui.overlay import live_js

# Relative to the page, so that it resolves under whatever path the app is served at.
FEED_PATH = "specchat/live"


class Feed:
    """One answer's updates: only the latest matters (each carries the whole answer so far), so a reader that falls
    behind skips to it."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.url = f"{FEED_PATH}/{token}"
        self._lock = threading.Lock()
        self._latest: dict[str, str] = {}
        self._ended = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def publish(self, update: dict[str, str]) -> None:
        """From any thread: the page's next update (answer HTML, panels), replacing any not sent yet."""
        with self._lock:
            self._latest = update
        self._wake()

    def end(self) -> None:
        with self._lock:
            self._ended = True
        self._wake()

    def _wake(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the server's loop has closed (shutting down): that reader is gone
                pass

    async def events(self) -> AsyncIterator[str]:
        """The updates as Server-Sent Events, from the latest one on, then an `end` event."""
        event = asyncio.Event()
        waiter = (asyncio.get_running_loop(), event)
        with self._lock:
            self._waiters.append(waiter)
        shown: dict[str, str] = {}
        try:
            while True:
                event.clear()  # before reading: an update published after the read sets it again
                with self._lock:
                    latest, ended = self._latest, self._ended
                if changed := changes(shown, latest):
                    yield f"data: {json.dumps(changed)}\n\n"
                shown = latest
                if ended:
                    yield "event: end\ndata: \n\n"
                    return
                await event.wait()
        finally:
            with self._lock:
                self._waiters.remove(waiter)


def changes(shown: dict[str, str], latest: dict[str, str]) -> dict[str, str]:
    """What a reader that was sent `shown` gets of `latest`: only what changed (a panel redrawn unchanged costs the
    page a paint), and of an answer's HTML that grew by appending (as it mostly does), what was appended."""
    changed = {name: value for name, value in latest.items() if shown.get(name) != value}
    before, html = shown.get("html"), changed.get("html")
    if before is not None and html is not None and html.startswith(before):
        changed["append"] = html[len(before) :]
        del changed["html"]
    return changed


class Feeds:
    """The feeds of the answers streaming now, by token."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._feeds: dict[str, Feed] = {}

    def open(self) -> Feed:
        feed = Feed(secrets.token_urlsafe(24))
        with self._lock:
            self._feeds[feed.token] = feed
        return feed

    def close(self, feed: Feed) -> None:
        """The answer is done: its readers get an end, and the token is forgotten."""
        feed.end()
        with self._lock:
            self._feeds.pop(feed.token, None)

    async def stream(self, request: Request) -> Response:
        """GET FEED_PATH/{token}: the feed's events; 404 once the answer is done (the page has it from Gradio then)."""
        with self._lock:
            feed = self._feeds.get(request.path_params["token"])
        if feed is None:
            return PlainTextResponse("no answer is streaming under this address", status_code=404)
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(feed.events(), media_type="text/event-stream", headers=headers)


# Panels the feed updates, by the selector of the root element their HTML has (stats_view's, status_html's).
PANELS = {"stats": "#sc-stats .sc-stats", "plot": "#sc-plot .sc-plot-box", "status": "#sc-status .sc-status"}


def feed_js(reveal_s: float, tick_s: float) -> str:
    """The page's reader of a feed, given its address (the live textbox's value; empty: no answer streams). Each
    update's answer HTML goes to live_js; a panel's HTML replaces the children and attributes of the panel's root
    element, which stays the one Gradio rendered (Gradio renders the finished answer's panels over it)."""
    return f"""(url) => {{
  const render = {live_js(reveal_s, tick_s)};
  const panels = {json.dumps(PANELS)};
  const patch = (selector, html) => {{
    const old = document.querySelector(selector);
    const template = document.createElement('template');
    template.innerHTML = html;
    const fresh = template.content.firstElementChild;
    if (!old || !fresh || fresh.tagName !== old.tagName) return;
    for (const a of [...old.attributes]) if (!fresh.hasAttribute(a.name)) old.removeAttribute(a.name);
    for (const a of [...fresh.attributes]) if (old.getAttribute(a.name) !== a.value) old.setAttribute(a.name, a.value);
    old.replaceChildren(...fresh.childNodes);
  }};
  if (window.scFeed) window.scFeed.close();
  window.scFeed = null;
  if (!url) return;
  const feed = new EventSource(url);
  window.scFeed = feed;
  let html = '';
  feed.onmessage = (message) => {{
    const update = JSON.parse(message.data);
    if (update.html !== undefined || update.append !== undefined) {{
      html = update.html !== undefined ? update.html : html + update.append;
      render(html);
    }}
    for (const [name, selector] of Object.entries(panels)) if (update[name]) patch(selector, update[name]);
  }};
  // The end of the answer, or no such feed (the answer ended before the page asked): Gradio's event shows the rest.
  const close = () => {{ feed.close(); if (window.scFeed === feed) window.scFeed = null; }};
  feed.addEventListener('end', close);
  feed.onerror = close;
}}"""
