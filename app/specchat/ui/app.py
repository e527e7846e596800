"""The chat app: streaming chat with the token overlay, live stats, settings and the models view.

A thin layer over the engine: it renders token events and never calls llama.cpp itself.
"""

from __future__ import annotations

import argparse
import html
import os
import queue
import socket
import sys
import threading
import time
import webbrowser
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from functools import lru_cache, partial
from pathlib import Path

import gradio as gr
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specchat import logs
from specchat.api import serve
from specchat.api.server import create_app
from specchat.engine import MODES, BackendConfig, Engine, GenerationSettings, Reading, Stats, TokenEvent
from specchat.errors import SpecchatError
from specchat.host import WAIT_POLL_S, EngineHost, Turn
from specchat.launch import resolve_models
from specchat.models import catalog
from specchat.ui import SPINNER_HIDDEN, compare_tab
from specchat.ui.feed import FEED_PATH, Feed, Feeds, feed_js
from specchat.ui.models_view import ModelsView, model_banner
from specchat.ui.overlay import (
    LIVE,
    OverlayStream,
    Piece,
    displayable,
    legend_html,
    safe_markdown,
    stylesheet,
)
from specchat.ui.settings import LIMITS, Settings, clamp, load_settings, save_settings
from specchat.ui.stats_view import acceptance_svg, stats_html

SETTING_NAMES = [f.name for f in fields(Settings)]
MODE_LABELS = {
    "auto": "Auto (chooses for you)",
    "speculative": "Speculative (draft model)",
    "lookup": "Prompt lookup (no draft model)",
    "plain": "Plain (target only)",
}
# How often a streamed answer updates the page: each update costs the browser CPU time (Gradio's own work on it,
# whatever is rendered) that llama.cpp's threads could use, and on two cores every stolen slice stalls both threads.
# Once a second, not four times, raised the chat's share of the CLI's tokens/s most (docs/performance.md, "The chat
# tab against the CLI").
UPDATE_INTERVAL_S = 1.0
# How often the page shows the next few tokens of what arrived, so that the answer reads as a stream, not a line a
# second. Each tick repaints the chat, which costs the browser a good part of what an update does: twice a second (a
# line or so each) cost it less than four a second while streaming (docs/performance.md, "The chat tab against the
# CLI").
REVEAL_TICK_S = 0.5
# Until the first tokens arrive, how often to look for them: the wait for the first words is the one a user feels.
FIRST_TOKENS_POLL_S = 0.05
# How often the header asks the host how the model is: each ask is a request through Gradio, which costs the server
# and the browser CPU time that a streaming answer's llama.cpp threads could use; while nothing loads, asking now and
# then only shows a load started from another tab.
HEADER_POLL_S = {"loading": 1.0, "settled": 5.0}
# How often Gradio's queue looks for an event to start, and for progress to send, while it has none: as it comes on
# Linux, every millisecond and every 10 ms, which kept the app's event loop at 0.047 of a core with nothing to do (a
# Zen 4). Gradio's own choice on Windows: 0.006 of a core, and a queued event starts at most 50 ms later.
QUEUE_POLL_S = (0.05, 0.1)
AUTH_ENV = "SPECCHAT_AUTH"
# Where the page may load from, post to and connect to: its own server. Whatever a model's answer holds, and however
# it renders, the browser then fetches nothing from elsewhere (an image's URL can carry conversation text out).
# Gradio's page needs its inline script and styles, and its HTML component builds its templates with Function (eval).
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline' 'unsafe-eval'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "media-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "frame-src 'self'",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "form-action 'self'",
        "base-uri 'self'",
        "frame-ancestors 'self'",
    ]
)


def main(args: argparse.Namespace, sock: socket.socket) -> int:
    """Serve the app on sock (bound to --host and --port) until interrupted."""
    logs.configure()
    auth = web_auth(args)
    overrides = {name: getattr(args, name) for name in ("threads", "gpu_layers") if getattr(args, name) is not None}
    host = EngineHost(draft_as_is=args.draft_as_is, keep_answers=args.keep_answers)
    try:
        chosen = chosen_models(args)
    except catalog.NotInstalledError as e:
        if not args.pair:
            raise
        # A catalog pair not downloaded yet: open on the models view with that pair one click from downloading.
        print(f"{e}; opening the models view to download it", file=sys.stderr)
        chosen = None
    if chosen is not None:
        host.load(*chosen, backend_config(replace(load_settings(), **overrides), args.n_ctx))
    # Beyond this machine, and with no password, the page must not offer the server's files to whoever reaches it.
    file_actions = auth is not None or serve.is_loopback(args.host)
    feeds = Feeds()
    demo = build_app(host, feeds, args.n_ctx, overrides, args.pair, file_actions)
    try:
        launch(demo, host, feeds, args, sock, auth)
    finally:
        host.close()
    return 0


def chosen_models(args: argparse.Namespace) -> tuple[Path, Path | None] | None:
    """The models named on the command line, else the installed default pair, else None (open the models view)."""
    if args.pair or args.target or args.draft:
        return resolve_models(args)
    return catalog.installed_default_pair(catalog.load_catalog_or_shipped()[0])


def backend_config(settings: Settings, n_ctx: int) -> BackendConfig:
    return BackendConfig(n_ctx=n_ctx, n_threads=settings.threads or None, n_gpu_layers=settings.gpu_layers)


def web_auth(args: argparse.Namespace) -> tuple[str, str] | None:
    """--auth USER:PASSWORD, else $SPECCHAT_AUTH: the login the page asks for. Without one beyond this machine, warns
    that the Models tab's file actions are off."""
    given = args.auth or os.environ.get(AUTH_ENV) or None
    if given is None:
        if not serve.is_loopback(args.host):
            print(
                f"warning: serving the app on {args.host} without --auth: anyone who can reach this port can chat;"
                " the Models tab's file actions (add a file, remove, download) are off."
                f" Give --auth USER:PASSWORD (or set {AUTH_ENV}) to log in and have them.",
                file=sys.stderr,
                flush=True,
            )
        return None
    user, colon, password = given.partition(":")
    if not (user and colon and password):
        raise SpecchatError("--auth takes USER:PASSWORD, both not empty")
    return user, password


# Gradio 6.31's status tracker shows an event's elapsed time by asking for an animation frame at every frame while the
# event is pending, and stops only when the status changes: the page's own "Loading..." tracker is unmounted while
# pending, so an open page renders 60 frames a second for as long as it is open, idle or streaming, and on a small
# machine that CPU time is taken from llama.cpp's threads (docs/performance.md, the chat tab against the CLI). No event
# of this app shows Gradio's progress (SPINNER_HIDDEN), so no tracker's timer is seen: its frames come from a
# once-a-second timer instead, everything else's as before.
# The tracker's module keeps requestAnimationFrame as it is when the module loads, so this runs first in the page's
# <head> (FirstInHead), before the page's modules; Gradio's own `head` is added by the page's script, too late.
TRACKER_FRAMES_JS = """(() => {
  const frame = window.requestAnimationFrame.bind(window);
  const cancel = window.cancelAnimationFrame.bind(window);
  window.requestAnimationFrame = (callback) => {
    if (!(new Error().stack || '').includes('/statustracker-')) return frame(callback);
    return -setTimeout(() => callback(performance.now()), 1000);
  };
  window.cancelAnimationFrame = (id) => (id < 0 ? clearTimeout(-id) : cancel(id));
})();"""


class FirstInHead:
    """ASGI middleware: a script put first in the <head> of the app's page, before the page's own scripts."""

    def __init__(self, app: ASGIApp, script: str) -> None:
        self.app = app
        self.tag = f"<head><script>{script}</script>".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] != "/":
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        body: list[bytes] = []

        async def send_with_script(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                if headers.get(b"content-type", b"").startswith(b"text/html") and b"content-encoding" not in headers:
                    start = message  # held until the whole page is here: its length changes
                    return
            if start is None:
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            page = b"".join(body).replace(b"<head>", self.tag, 1)
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, send_with_script)


class SecurityHeaders:
    """ASGI middleware: the Content-Security-Policy on every response, pages, files and API alike."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_policy(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"content-security-policy"]
                headers.append((b"content-security-policy", CONTENT_SECURITY_POLICY.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_policy)


def launch(
    demo: gr.Blocks,
    host: EngineHost,
    feeds: Feeds,
    args: argparse.Namespace,
    sock: socket.socket,
    auth: tuple[str, str] | None = None,
) -> None:
    """Serve the app, with the OpenAI-compatible API beside it on the same engine and line, until interrupted.

    feeds: the app's (build_app's); auth: the user name and password the page asks for (the API has its own key)."""
    key = serve.api_key(args)
    try:
        server = create_app(host, key)
        # Before Gradio's app, mounted at the root, which would take every path.
        server.add_route(f"/{FEED_PATH}/{{token}}", feeds.stream, methods=["GET"])
        app = gr.mount_gradio_app(
            server,
            demo,
            path="/",
            css=stylesheet(),
            theme=gr.themes.Default(primary_hue="indigo", neutral_hue="slate"),
            footer_links=["settings"],
            auth=auth,
        )
        # Private to Gradio's Queue, which has no setting for them: see QUEUE_POLL_S.
        demo._queue.sleep_when_free, demo._queue.progress_update_sleep_when_free = QUEUE_POLL_S
        app.add_middleware(SecurityHeaders)
        app.add_middleware(FirstInHead, script=TRACKER_FRAMES_JS)
        url = serve.base_url(args.host, args.port)

        def ready(_stop: Callable[[], None]) -> None:
            print(f"* Running on local URL:  {url}", flush=True)  # Gradio's own line, for whoever reads it
            print(f"* OpenAI-compatible API: {url}/v1", flush=True)
            if not args.no_browser:
                webbrowser.open(url)

        serve.run(app, sock, ready, host)
    finally:
        sock.close()


# Rendering


@lru_cache(maxsize=256)  # a streamed update shows every message again; only the answer being streamed changes
def _user_html(text: str) -> str:
    return f'<div class="sc-user">{html.escape(displayable(text)).replace(chr(10), "<br>")}</div>'


def overlay_messages(conv: list[dict]) -> list[dict]:
    """The conversation for the overlay chat, which shows HTML as is: every model or user text is escaped.

    An answer keeps its overlay HTML (rendered as it streamed, see OverlayStream), so that an update's cost does not
    grow with the conversation."""
    return [
        {"role": m["role"], "content": m["html"] if m["role"] == "assistant" else _user_html(m["content"])}
        for m in conv
    ]


def markdown_messages(conv: list[dict]) -> list[dict]:
    """The conversation for the Markdown chat, which renders Markdown and some HTML: see safe_markdown."""
    return [{"role": m["role"], "content": safe_markdown(displayable(m["content"]))} for m in conv]


def chat_views(conv: list[dict], overlay: bool) -> tuple:
    """New values for (overlay chat, Markdown chat); only the visible one is rendered."""
    return (overlay_messages(conv), gr.skip()) if overlay else (gr.skip(), markdown_messages(conv))


_UNCHANGED = object()


def _update(
    textbox: object,
    conv: list[dict],
    overlay: bool,
    state: str,
    text: str,
    stats: object = _UNCHANGED,
    feed: Feed | None = None,
) -> tuple:
    """One update of the chat's outputs: (textbox, conversation, overlay chat, Markdown chat, live answer, stats,
    plot, status). feed: the streamed answer's, which the page then reads (feed_js); none: the page reads none."""
    shown = displayable(textbox) if isinstance(textbox, str) else textbox
    live = feed.url if feed is not None else ""
    return (shown, conv, *chat_views(conv, overlay), live, *_panels(stats), status_html(state, text))


def reading_status(done: int, total: int) -> str:
    return f"Reading the prompt: {done:,} of {total:,} tokens…"


def _streaming(stats: Stats) -> tuple[str, str]:
    return "generating", f"Generating… {stats.tokens} tokens"


def _streamed(conv: list[dict], stats: Stats) -> tuple:
    """An update of the Markdown view while an answer streams: it renders the conversation as usual."""
    return (gr.skip(), conv, *chat_views(conv, False), gr.skip(), *_panels(stats), status_html(*_streaming(stats)))


def feed_update(stream: OverlayStream, stats: Stats) -> dict[str, str]:
    """An update of the overlay chat while an answer streams, for its feed: the overlay chat keeps its placeholder
    for the answer (LIVE), which the page fills (live_js), so that the chat renders the answer once, when done."""
    panels = {"stats": stats_html(stats), "plot": acceptance_svg(stats), "status": status_html(*_streaming(stats))}
    return {"html": stream.html(), **panels}


def _panels(stats: object) -> tuple:
    return (gr.skip(), gr.skip()) if stats is _UNCHANGED else (stats_html(stats), acceptance_svg(stats))


def header_poll_s(host: EngineHost) -> float:
    return HEADER_POLL_S["loading" if host.status().state == "loading" else "settled"]


def status_html(state: str, text: str) -> str:
    return f'<div class="sc-status" data-state="{state}">{html.escape(displayable(text))}</div>'


_FINISHED = {
    "eog": "Done.",
    "length": "Stopped at the max tokens setting.",
    "context": "Stopped: the conversation fills the model's context; Clear it to go on.",
    "stop": "Stopped at a stop string.",
    "closed": "Stopped.",
}


def _add(answer: dict, stream: OverlayStream, events: list[TokenEvent]) -> None:
    """Adds the events' tokens to the answer being streamed (its text; stream renders its overlay)."""
    stream.extend(Piece(ev.kind, ev.text, ev.draft_pos) for ev in events)
    answer["content"] += "".join(ev.text for ev in events)


class Decoding:
    """An answer's token loop in a thread of its own, so that decoding never waits for the page: the page takes the
    events that arrived whenever it updates. However the loop ends (done, Stop, a closed tab, an error), the thread
    closes it, then gives up the turn, so the next request in line starts before the page's last update."""

    def __init__(self, turn: Turn, start: Callable[[Reading], Iterator[TokenEvent]], stop: threading.Event) -> None:
        """start: the answer's events, given what hears of the prompt's reading (its errors are raised here, before
        the loop starts); stop: the tab's Stop button (set by a closed tab too)."""
        self.ended = threading.Event()
        self.stats: Stats | None = None  # once ended: the answer's
        self.failure: Exception | None = None  # once ended: what broke the loop, if anything
        self.read = (0, 0)  # how much of the prompt the target has read: (tokens read, tokens to read)
        self._events: queue.SimpleQueue[TokenEvent] = queue.SimpleQueue()
        self._stop = stop
        # Apart from stop, which the tab's next message clears: this loop must end even if that comes first.
        self._cancelled = threading.Event()
        events = start(self._reading)
        threading.Thread(target=self._run, args=(turn, events), name="specchat-answer", daemon=True).start()

    def _reading(self, done: int, total: int) -> bool:
        self.read = (done, total)
        return not (self._stop.is_set() or self._cancelled.is_set())

    def _run(self, turn: Turn, events: Iterator[TokenEvent]) -> None:
        stats = None
        try:
            for ev in events:
                stats = ev.stats
                self._events.put(ev)
                if self._stop.is_set() or self._cancelled.is_set():
                    break
        except Exception as e:  # told by the page, with the answer so far
            self.failure = e
        finally:
            events.close()
            self.stats = stats or turn.engine.last_stats  # while the engine is still this answer's
            turn.close()
            self.ended.set()

    def take(self) -> list[TokenEvent]:
        """The events that arrived since the last take."""
        taken = []
        while True:
            try:
                taken.append(self._events.get_nowait())
            except queue.Empty:
                return taken

    def cancel(self) -> None:
        """End the loop at its next token (nothing, once it has ended). Returns at once: the page's side may be
        closing the answer in Gradio's event loop, which must not wait for a token."""
        self._cancelled.set()


class ChatApp:
    """Event handlers of one app; each browser tab is a session with its own conversation and Stop button."""

    def __init__(self, host: EngineHost, n_ctx: int, overrides: dict, feeds: Feeds):
        self.host = host
        self.feeds = feeds
        self.n_ctx = n_ctx
        self.overrides = overrides
        self._stops: dict[str, threading.Event] = {}
        self._busy: set[str] = set()  # sessions with an answer in progress

    def settings(self) -> Settings:
        return replace(load_settings(), **self.overrides)

    def _stop_event(self, request: gr.Request) -> threading.Event:
        return self._stops.setdefault(request.session_hash or "", threading.Event())

    def stop(self, request: gr.Request) -> None:
        self._stop_event(request).set()

    def forget_session(self, request: gr.Request) -> None:
        """A closed tab: end its answer, if any, so the next request in line need not wait for max tokens."""
        self._stops.pop(request.session_hash or "", threading.Event()).set()

    def save(self, *values) -> None:
        save_settings(self._from(values))

    def respond(self, request: gr.Request, message: str, conv: list[dict], *values) -> Iterator[tuple]:
        """Stream one answer. Yields (textbox, conversation, overlay chat, Markdown chat, live answer, stats, plot,
        status)."""
        s = self._from(values)
        session = request.session_hash or ""
        if session in self._busy:
            # A second Enter while this tab's answer streams would interleave two answers in one conversation.
            yield *[gr.skip()] * 7, status_html("busy", "Still answering: wait, or press Stop first.")
            return
        if not message.strip():
            yield _update(gr.skip(), conv, s.overlay, "idle", "")
            return
        status = self.host.status()
        # While a model loads, the message waits in line for it (with None, the turn takes the model once loaded).
        engine = None if status.state == "loading" else self.host.engine
        if engine is None and status.state != "loading":
            text = status.message if status.state != "empty" else "No model is loaded: load one in the Models tab."
            yield _update(message, conv, s.overlay, "error", text)
            return
        try:
            seed = None if s.seed < 0 else s.seed
            settings = GenerationSettings(mode=s.mode, k=s.k, sampling=s.sampling, seed=seed, max_tokens=s.max_tokens)
        except ValueError as e:
            yield _update(message, conv, s.overlay, "error", str(e))
            return
        self._busy.add(session)
        stop = self._stop_event(request)
        stop.clear()
        try:
            yield from self._answer(engine, message, conv, s, settings, stop)
        except Exception as e:  # the turn is given up by now (or soon, by the decoding): the next request goes on
            yield _update(message, conv, s.overlay, "error", logs.unexpected(e, "Answering"))
        finally:
            self._busy.discard(session)

    def _answer(
        self,
        engine: Engine | None,
        message: str,
        conv: list[dict],
        s: Settings,
        settings: GenerationSettings,
        stop: threading.Event,
    ) -> Iterator[tuple]:
        system = [{"role": "system", "content": s.system_prompt}] if s.system_prompt.strip() else []
        prompt = [*system, *({"role": m["role"], "content": m["content"]} for m in conv)]
        prompt.append({"role": "user", "content": message})
        asked = [*conv, {"role": "user", "content": message}]
        turn = self.host.turn(engine)
        decoding = None
        try:
            while (ahead := turn.wait(WAIT_POLL_S)) is not None:
                if stop.is_set():
                    yield _update(message, conv, s.overlay, "stopped", "Stopped before the answer started.")
                    return
                yield _update("", asked, s.overlay, "waiting", turn.waiting(ahead))
            start = partial(turn.engine.chat, prompt, settings)
            decoding = Decoding(turn, start, stop)  # from here on, the decoding gives up the turn
        except Exception as e:
            turn.close()
            text = str(e) if isinstance(e, SpecchatError) else logs.unexpected(e, "Answering")
            yield _update(message, conv, s.overlay, "error", text)
            return
        finally:  # also when the page gives up while the request waits
            if decoding is None:
                turn.close()
        stream = OverlayStream()
        # Until it is done, the answer shows in the overlay chat as the placeholder that its feed fills.
        answer = {"role": "assistant", "content": "", "pieces": stream.pieces, "html": LIVE}
        conv = [*asked, answer]
        feed = self.feeds.open() if s.overlay else None
        try:
            yield _update("", conv, s.overlay, "generating", "Reading the prompt…", feed=feed)
            last, interval = time.perf_counter(), FIRST_TOKENS_POLL_S
            shown = decoding.read
            while not decoding.ended.wait(max(0.0, last + interval - time.perf_counter())):
                last = time.perf_counter()
                if (read := decoding.read) != shown and 0 < read[0] < read[1]:  # a prompt of several batches
                    shown = read
                    yield *[gr.skip()] * 7, status_html("generating", reading_status(*read))
                if new := decoding.take():
                    interval = UPDATE_INTERVAL_S
                    _add(answer, stream, new)
                    if feed is not None:
                        feed.publish(feed_update(stream, new[-1].stats))
                    else:
                        yield _streamed(conv, new[-1].stats)
        finally:  # the page gave up on the answer (Clear, a closed tab), or an update failed: end the loop too
            if feed is not None:
                self.feeds.close(feed)
            decoding.cancel()
            _add(answer, stream, decoding.take())
            answer["html"] = stream.html(final=True)  # kept in the conversation, whatever ended the answer
        stats = decoding.stats
        if decoding.failure is not None:  # the answer so far stays in the conversation, with the error under it
            yield _update("", conv, s.overlay, "error", logs.unexpected(decoding.failure, "Answering"), stats)
            return
        finish = stats.finish_reason if stats is not None else "closed"
        state = "stopped" if finish == "closed" else "done"
        yield _update("", conv, s.overlay, state, _FINISHED.get(finish, "Done."), stats)

    def regenerate(self, request: gr.Request, conv: list[dict], *values) -> Iterator[tuple]:
        last_user = max((i for i, m in enumerate(conv) if m["role"] == "user"), default=None)
        if last_user is None:
            yield _update(gr.skip(), conv, self._from(values).overlay, "idle", "Nothing to regenerate yet.")
            return
        yield from self.respond(request, conv[last_user]["content"], conv[:last_user], *values)

    def clear(self, request: gr.Request, overlay: bool) -> tuple:
        self.stop(request)
        return [], *chat_views([], overlay), "", stats_html(None), acceptance_svg(None), status_html("idle", "")

    def switch_view(self, conv: list[dict], overlay: bool) -> tuple:
        overlay_chat, md_chat = overlay_messages(conv), markdown_messages(conv)
        return gr.update(value=overlay_chat, visible=overlay), gr.update(value=md_chat, visible=not overlay)

    def reload(self, *values) -> str:
        """Load the current pair again, with the threads and GPU layers now set."""
        status = self.host.status()
        if status.target is None:
            gr.Warning("No model has been loaded yet: choose one in the Models tab.")
        else:
            try:
                self.host.load(status.target, status.draft, backend_config(self._from(values), self.n_ctx))
            except SpecchatError as e:
                gr.Warning(str(e))
        return model_banner(self.host)

    @staticmethod
    def _from(values: tuple) -> Settings:
        return Settings.from_dict({name: clamp(name, value) for name, value in zip(SETTING_NAMES, values)})


def build_app(
    host: EngineHost,
    feeds: Feeds,
    n_ctx: int = 4096,
    overrides: dict | None = None,
    pair: str | None = None,
    file_actions: bool = True,
) -> gr.Blocks:
    """The whole app over one shared engine host (loading or loaded by the caller, or empty), its streamed answers
    through feeds (which launch serves).

    overrides: settings given on the command line, over the saved ones; pair: the pair the models view offers first
    (default: the catalog's default pair); file_actions: whether the models view offers to add, remove and download
    model files (off for a page served beyond this machine without a login).
    """
    app = ChatApp(host, n_ctx, overrides or {}, feeds)
    initial = app.settings()
    with gr.Blocks(title="specchat", analytics_enabled=False) as demo:
        with gr.Row(elem_classes="sc-header"):
            gr.HTML('<div class="sc-title">specchat <span>exact speculative decoding, locally</span></div>')
            banner = gr.HTML(model_banner(host), elem_id="sc-model")
        conv = gr.State([])
        with gr.Tabs(selected="models" if host.status().state == "empty" else "chat"):
            with gr.Tab("Chat", id="chat"):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3, min_width=420):
                        with gr.Row(elem_classes="sc-legend-row"):
                            gr.HTML(legend_html())
                            overlay_switch = gr.Checkbox(
                                initial.overlay, label="Token overlay", container=False, elem_id="sc-overlay-switch"
                            )
                        common = dict(
                            # The window's height less what sits above and below the chat (the header, the legend,
                            # the status line, the input, Regenerate and Clear), so that all of it is in sight: at a
                            # fixed height, Clear fell below the edge of a 900 px window.
                            height="calc(100vh - 410px)",
                            min_height=320,
                            latex_delimiters=[],
                            show_label=False,
                            feedback_options=None,
                            layout="panel",
                            placeholder="Ask something: each answer token shows where it came from.",
                        )
                        # The overlay's HTML is escaped here (overlay.py) and needs its data-kind attributes, which
                        # Gradio's sanitizer would strip; the Markdown view keeps Gradio's own sanitizing.
                        overlay_chat = gr.Chatbot(
                            elem_id="sc-chat-overlay",
                            visible=initial.overlay,
                            render_markdown=False,
                            sanitize_html=False,
                            buttons=[],
                            **common,
                        )
                        md_chat = gr.Chatbot(
                            elem_id="sc-chat-markdown",
                            visible=not initial.overlay,
                            buttons=["copy", "copy_all"],
                            **common,
                        )
                        # Between the chat and the input, not under the buttons: there, at a window 1000 px high, the
                        # error of a message that failed (one too long for the context) was out of sight.
                        status = gr.HTML(status_html("idle", ""), elem_id="sc-status")
                        with gr.Row():
                            textbox = gr.Textbox(
                                placeholder="Message (Enter sends, Shift+Enter for a new line)",
                                show_label=False,
                                scale=5,
                                lines=1,
                                max_lines=8,
                                elem_id="sc-input",
                                autofocus=True,
                            )
                            send = gr.Button("Send", variant="primary", scale=1, min_width=80, elem_id="sc-send")
                            stop = gr.Button("Stop", variant="stop", scale=1, min_width=80, elem_id="sc-stop")
                        with gr.Row():
                            regen = gr.Button("Regenerate", size="sm", elem_id="sc-regenerate")
                            clear = gr.Button("Clear", size="sm", elem_id="sc-clear")
                        # Tells the page where the streamed answer's feed is (feed_js); never shown.
                        live = gr.Textbox(visible=False)
                    with gr.Column(scale=1, min_width=300):
                        stats = gr.HTML(stats_html(None), elem_id="sc-stats")
                        plot = gr.HTML(acceptance_svg(None), elem_id="sc-plot")
                        with gr.Accordion("Settings", open=False, elem_id="sc-settings"):
                            controls = _settings_controls(initial)
                            controls["overlay"] = overlay_switch
                            reload = gr.Button("Reload the model with these threads / GPU layers", size="sm")
            with gr.Tab("Compare", id="compare"):
                compare_tab.build(host)
            with gr.Tab("Models", id="models"):
                models = ModelsView(host, n_ctx, file_actions)
                models.build(controls["threads"], controls["gpu_layers"], banner, pair)

        setting_inputs = [controls[name] for name in SETTING_NAMES]
        outputs = [textbox, conv, overlay_chat, md_chat, live, stats, plot, status]
        chat_args = dict(**SPINNER_HIDDEN, concurrency_limit=None)
        runs = [
            textbox.submit(app.respond, [textbox, conv, *setting_inputs], outputs, **chat_args),
            send.click(app.respond, [textbox, conv, *setting_inputs], outputs, **chat_args),
            regen.click(app.regenerate, [conv, *setting_inputs], outputs, **chat_args),
        ]
        stop.click(app.stop, None, None, queue=False)
        # The chats' own trash buttons clear the conversation too, not just what is shown. One event, outside the
        # queue, that cancels at the click: a clear queued behind its stop cancelled a message sent right after it.
        for clearing in (clear.click, overlay_chat.clear, md_chat.clear):
            clear_outputs = [conv, overlay_chat, md_chat, live, stats, plot, status]
            clearing(app.clear, [overlay_switch], clear_outputs, queue=False, cancels=runs, **SPINNER_HIDDEN)
        live.change(None, live, None, js=feed_js(UPDATE_INTERVAL_S, REVEAL_TICK_S), queue=False)
        overlay_switch.change(app.switch_view, [conv, overlay_switch], [overlay_chat, md_chat], **SPINNER_HIDDEN)
        for control in setting_inputs:
            control.change(app.save, setting_inputs, None, queue=False, **SPINNER_HIDDEN)
        reload.click(app.reload, setting_inputs, banner, **SPINNER_HIDDEN)

        # A new tab shows the settings as saved now (another tab may have changed them since start-up).
        demo.load(
            lambda: [getattr(app.settings(), n) for n in SETTING_NAMES],
            None,
            setting_inputs,
            queue=False,
            **SPINNER_HIDDEN,
        )
        timer = gr.Timer(HEADER_POLL_S["loading"])
        demo.load(lambda: model_banner(host), None, banner, queue=False, **SPINNER_HIDDEN)
        demo.load(models.pairs_now, None, models.pairs_view, queue=False, **SPINNER_HIDDEN)
        timer.tick(
            lambda: (model_banner(host), header_poll_s(host)),
            None,
            [banner, timer],
            queue=False,
            **SPINNER_HIDDEN,
        )
        # A load started here shows its progress at once, not at the next slow tick; once it ends, the pairs table
        # shows what the load measured (what speculation buys with the pair here).
        banner.change(
            lambda: (header_poll_s(host), gr.skip() if host.status().state == "loading" else models.pairs_now()),
            None,
            [timer, models.pairs_view],
            queue=False,
            **SPINNER_HIDDEN,
        )
        demo.unload(app.forget_session)
    return demo


def _settings_controls(s: Settings) -> dict[str, gr.components.Component]:
    def slider(name: str, label: str, step: float, info: str | None = None) -> gr.Slider:
        lo, hi = LIMITS[name]
        return gr.Slider(lo, hi, value=getattr(s, name), step=step, label=label, info=info, elem_id=f"sc-set-{name}")

    def number(name: str, label: str) -> gr.Number:
        # No minimum or maximum for Gradio: it refuses every event given a value past them, each message sent
        # included, in a toast that does not name the field. A value typed past a bound becomes the bound instead.
        field = gr.Number(getattr(s, name), label=label, precision=0, elem_id=f"sc-set-{name}")
        for typed in (field.submit, field.blur):
            typed(partial(clamp, name), field, field, queue=False, **SPINNER_HIDDEN)
        return field

    return {
        "system_prompt": gr.Textbox(s.system_prompt, label="System prompt", lines=2, elem_id="sc-set-system_prompt"),
        "mode": gr.Radio(
            [(MODE_LABELS.get(m, m), m) for m in MODES], value=s.mode, label="Decoding", elem_id="sc-set-mode"
        ),
        "k": slider("k", "Draft length", 1, "per verify step, in speculative and lookup modes (auto picks its own)"),
        "temperature": slider("temperature", "Temperature", 0.05, "0 decodes greedily"),
        "top_k": slider("top_k", "Top-k", 1, "0: off"),
        "top_p": slider("top_p", "Top-p", 0.01, "1: off"),
        "min_p": slider("min_p", "Min-p", 0.01, "0: off"),
        "seed": number("seed", "Seed (-1: random)"),
        "max_tokens": slider("max_tokens", "Max tokens", 1),
        "threads": number("threads", "CPU threads (0: all cores; applies on load)"),
        "gpu_layers": number("gpu_layers", "GPU layers (-1: all; applies on load)"),
    }
