"""The one engine a process serves to every browser tab and API client: loading it in the background, and the line
they take turns in."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from specchat.engine import BackendConfig, Engine
from specchat.errors import SpecchatError
from specchat.logs import LOGGER
from specchat.models.catalog import cache_dir
from specchat.models.in_use import LoadedFiles

# How long a page's request waiting in line sleeps between looks at its place (and at its Stop button).
WAIT_POLL_S = 0.25


@dataclass(frozen=True)
class HostStatus:
    state: str  # "empty" | "loading" | "ready" | "error"
    message: str
    target: Path | None
    draft: Path | None
    seconds: float  # how long the current load has run, or how long the finished one took


class EngineHost:
    def __init__(self, draft_as_is: bool = False, keep_answers: bool = False) -> None:
        """draft_as_is: never draft with a copy of the draft re-quantized for the CPU; keep_answers: keep answers in
        the cache folder for auto mode to copy from after a restart (see Engine.load)."""
        self.draft_as_is, self.keep_answers = draft_as_is, keep_answers
        self.engine: Engine | None = None
        self._status = HostStatus(
            "empty", "No model loaded: choose or download a pair in the Models tab.", None, None, 0
        )
        self._started = 0.0
        self._guard = threading.Lock()  # guards engine and _status
        self._loaded_files = LoadedFiles()  # what other processes' removals must leave alone
        self._line: list[object] = []  # chat requests in arrival order; the first one holds the turn
        # Set as the process shuts down: answers under way end at their next token and say why (api/generation.py).
        self.closing = threading.Event()
        self._line_changed = threading.Condition()

    def status(self) -> HostStatus:
        with self._guard:
            s = self._status
            if s.state == "loading":
                return HostStatus(s.state, s.message, s.target, s.draft, time.perf_counter() - self._started)
            return s

    # Loading

    def load(self, target: Path, draft: Path | None, config: BackendConfig) -> None:
        """Start loading a pair in the background; the old engine is closed once no answer is using it."""
        with self._guard:
            if self._status.state == "loading":
                raise SpecchatError("a model is still loading; wait until it is ready, then choose again")
            names = target.name + (f" drafted by {draft.name}" if draft else "")
            self._status = HostStatus("loading", f"Loading {names}…", target, draft, 0)
            self._started = time.perf_counter()
            self._record([target] + ([draft] if draft else []))
        threading.Thread(target=self._load, args=(target, draft, config), daemon=True, name="specchat-load").start()

    def _load(self, target: Path, draft: Path | None, config: BackendConfig) -> None:
        old = self.engine
        if old is not None:
            with old.lock:
                self.engine = None
                old.close()
        engine = None
        try:
            copy_dir = None if self.draft_as_is else cache_dir()
            answers = cache_dir() if self.keep_answers else None
            engine = Engine.load(target, draft, config, copy_dir, self._progress, cache_dir(), answers_dir=answers)
            # auto mode (the default) needs this machine's costs: measure them now, not in the first answer.
            engine.calibration()
        except Exception as e:  # a load thread that died silently would leave the app "loading" forever
            if engine is not None:
                engine.close()
            reason = e if isinstance(e, SpecchatError) else f"{type(e).__name__}: {e}"
            self._finish("error", f"Could not load the model: {reason}", target, draft)
            return
        self.engine = engine
        names = engine.target.name + (f" + {engine.draft.name} (draft)" if engine.draft else " (no draft model)")
        if engine.draft is not None and engine.draft.path != draft:
            names += " re-quantized for this CPU"
        # What a reload with other settings changed, so that the user can see it took effect.
        n_threads = config.threads[0]
        setup = f"{n_threads} thread{'s' * (n_threads != 1)}"
        if config.n_gpu_layers:
            setup += ", all layers on the GPU" if config.n_gpu_layers < 0 else f", {config.n_gpu_layers} GPU layers"
        self._finish("ready", f"Ready: {names} · {setup}", target, draft)

    def _progress(self, message: str) -> None:
        with self._guard:
            self._status = replace(self._status, message=message)

    def _finish(self, state: str, message: str, target: Path, draft: Path | None) -> None:
        with self._guard:
            self._status = HostStatus(state, message, target, draft, time.perf_counter() - self._started)
            if state == "error":  # the old engine was closed before the load began: nothing is held
                self._record([])

    def _record(self, files: list[Path]) -> None:
        try:
            self._loaded_files.hold(files)
        except OSError as e:  # a read-only cache folder: only another process's removal goes unwarned
            LOGGER.warning("could not record the loaded model in the cache folder (%s)", e)

    @contextmanager
    def files_held(self) -> Iterator[list[Path]]:
        """The files the engine holds, or a load under way will hold. No load starts until the block ends, so that a
        removal that checked them cannot delete a file that a load then opens."""
        with self._guard:
            s = self._status
            yield [p for p in (s.target, s.draft) if p is not None] if s.state in ("loading", "ready") else []

    def wait_loaded(self, timeout: float | None = None, on_message: Callable[[str], None] | None = None) -> HostStatus:
        """Block until no load is running: for callers that need the outcome before going on.

        on_message hears each new message of the load (what it is doing) while it runs."""
        deadline = None if timeout is None else time.monotonic() + timeout
        said = None
        while (status := self.status()).state == "loading":
            if on_message is not None and status.message != said:
                said = status.message
                on_message(said)
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return status

    def close(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            with engine.lock:
                engine.close()
        with self._guard:
            self._record([])

    # Taking turns: the engine answers one request at a time, first come first served.

    def turn(self, engine: Engine | None) -> Turn:
        """A place at the end of the line for a request to engine (the one loaded now), or, with None while a model
        loads, to the model being loaded."""
        return Turn(self, engine)

    def in_line(self) -> int:
        """Requests in the line: the one answered now, if any, and those waiting."""
        with self._line_changed:
            return len(self._line)

    def join_line(self) -> object:
        ticket = object()
        with self._line_changed:
            self._line.append(ticket)
        return ticket

    def leave_line(self, ticket: object) -> None:
        with self._line_changed:
            self._line.remove(ticket)
            self._line_changed.notify_all()

    def place(self, ticket: object, timeout: float) -> int:
        """How many requests are ahead of this one, after waiting up to timeout for the line to move."""
        with self._line_changed:
            if self._line.index(ticket) > 0:
                self._line_changed.wait(timeout)
            return self._line.index(ticket)


class Turn:
    """One request's place in the line, then its hold on the engine; close() (or leaving a with block) gives up both.

    Both the chat tab and the API take turns this way, so that they share one line in arrival order.
    """

    def __init__(self, host: EngineHost, engine: Engine | None):
        self.host, self.engine = host, engine
        self._ticket: object | None = host.join_line()
        self._holding = False

    def wait(self, timeout: float) -> int | None:
        """None once the engine is this request's (its lock held); else, after waiting up to about 2 x timeout, how
        many requests are ahead (0: next, while the model loads, or while the engine finishes work from outside the
        line, a comparison).

        Raises SpecchatError when the model was changed while this request waited (its settings were for the other),
        or when the load it waited for failed.
        """
        ahead = self.host.place(self._ticket, timeout)
        if ahead > 0:
            return ahead
        if self.engine is None:  # the turn was taken while a model loaded: it is for that model
            status = self.host.wait_loaded(timeout)
            if status.state == "loading":
                return 0
            self.engine = self.host.engine
            if self.engine is None:
                raise SpecchatError(status.message)
        if not self.engine.lock.acquire(timeout=timeout):
            return 0
        self._holding = True
        if self.host.engine is not self.engine:
            raise SpecchatError("the model was changed while this request waited; send it again")
        return None

    def waiting(self, ahead: int) -> str:
        """What a page tells its user while wait() says ahead."""
        if self.host.status().state == "loading":
            return "Waiting for the model to load…"
        waiting = f"{ahead} request{'s' * (ahead != 1)} ahead" if ahead else "the engine is busy"
        return f"Waiting in line: {waiting}. This model answers one request at a time."

    def close(self) -> None:
        """Free the engine, then the place in line: the next request starts at once. Safe to call again."""
        if self._holding:
            self._holding = False
            self.engine.lock.release()
        if self._ticket is not None:
            ticket, self._ticket = self._ticket, None
            self.host.leave_line(ticket)

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
