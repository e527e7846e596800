"""One request's answer, made on a thread of its own and handed to the event loop token by token."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

from specchat.api.params import ApiError
from specchat.engine import Engine, Reading, Stats, TokenEvent
from specchat.host import EngineHost, Turn
from specchat.logs import LOGGER

# How often a request looks whether its client went away: while it waits in line, and while a whole (not streamed)
# answer is being made. The line itself wakes a waiting request as soon as it moves.
POLL_S = 0.1
_END = object()

# What a request runs once it holds the engine: (prompt tokens, token events), given what hears of the prompt's reading.
Start = Callable[[Engine, Reading], tuple[list[int], Iterator[TokenEvent]]]


def log(message: str) -> None:
    """One line per answer in the server's log: what it made, or why it stopped."""
    LOGGER.info("api: %s", message)


class ClientGone(Exception):
    """The client disconnected before its answer was sent."""


def _shutting_down(tokens: int) -> ApiError:
    return ApiError(
        f"the server is shutting down: the answer stopped after {tokens} tokens",
        code="server_shutting_down",
        status=503,
        type="server_error",
    )


class Generation:
    """Joins the host's line now (arrival order), then waits and generates on a thread of its own, so that the event
    loop never waits on the engine; each token event reaches the loop as it comes.

    stop(), for a client that went away, ends the generation at its next token (or its wait in line) and frees the
    engine for the next request. The host's `closing` (the server shutting down) ends it too, with an error that says
    so: the client hears why its answer stopped, and the server need not cancel it.
    """

    def __init__(self, host: EngineHost, engine: Engine, start: Start, label: str):
        """start: run once this request holds the engine; the reading it is given stops at the prompt's next batch
        once the client has gone. label: the kind of request, for the log."""
        self._loop = asyncio.get_running_loop()
        self._items: asyncio.Queue[object] = asyncio.Queue()
        self._stop = threading.Event()
        self._looked = time.monotonic()  # when next() last asked whether the client is still there
        self.label = label
        self.prompt_tokens = 0
        self.stats: Stats | None = None
        self.ended = False  # next() has returned the end
        self._closing = host.closing
        turn = host.turn(engine)
        threading.Thread(target=self._run, args=(turn, start), daemon=True, name="specchat-api-answer").start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self, turn: Turn, start: Start) -> None:
        try:
            with turn:
                while turn.wait(POLL_S) is not None:
                    if self._stop.is_set():
                        log(f"{self.label}: the client went away while waiting in line")
                        return
                    if self._closing.is_set():
                        raise _shutting_down(0)
                prompt, events = start(turn.engine, self._reading)
                self.prompt_tokens = len(prompt)
                try:
                    for event in events:
                        self.stats = event.stats
                        self._hand(event)
                        if self._stop.is_set() or self._closing.is_set():
                            break
                finally:
                    events.close()  # the engine's loop ends here, before the turn frees the engine
                tokens = self.stats.tokens if self.stats else 0  # no stats: stopped while reading the prompt
                if self._stop.is_set():
                    log(f"{self.label}: the client went away; stopped after {tokens} tokens")
                elif self._closing.is_set() and (self.stats is None or self.stats.finish_reason == "closed"):
                    raise _shutting_down(tokens)
        except Exception as e:  # the client hears of it, as an error status or an error event
            self._hand(e)
        finally:
            self._hand(_END)

    def _reading(self, _done: int, _total: int) -> bool:
        return not (self._stop.is_set() or self._closing.is_set())

    def log_end(self) -> None:
        """Log what was made, before the client can see the end (so that the log is complete when it does)."""
        if self.stats is not None:
            log(f"{self.label}: {self.stats.tokens} tokens, {self.stats.finish_reason}; {self.stats.strategy}")

    def _hand(self, item: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self._items.put_nowait, item)
        except RuntimeError:  # the event loop has closed (the server is shutting down): nobody reads on
            self._stop.set()

    async def next(self, is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> TokenEvent | None:
        """The next token event; None once the generation has ended (and freed the engine). Re-raises its error.

        is_disconnected (Starlette's request.is_disconnected, usable until a response starts): asked every POLL_S,
        so that a client that leaves before its answer is sent stops it (ClientGone).
        """
        while not self.ended:
            if is_disconnected is not None and time.monotonic() - self._looked >= POLL_S:
                self._looked = time.monotonic()
                if await is_disconnected():
                    self.stop()
                    raise ClientGone()
            try:
                item = self._items.get_nowait()
            except asyncio.QueueEmpty:
                try:
                    item = await asyncio.wait_for(self._items.get(), POLL_S if is_disconnected else None)
                except TimeoutError:
                    continue
            if item is _END:
                self.ended = True
            elif isinstance(item, Exception):
                raise item
            else:
                return item
        return None
