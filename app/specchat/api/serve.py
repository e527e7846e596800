"""`specchat serve`, and the serving both it and `specchat ui` do: the port, the API key, uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI

from specchat import logs
from specchat.api.server import create_app
from specchat.errors import SpecchatError
from specchat.host import EngineHost
from specchat.launch import backend_config, bind, print_progress, resolve_models

API_KEY_ENV = "SPECCHAT_API_KEY"
# On shutdown (Ctrl+C), streams still open get this long to finish before their connections are closed.
GRACEFUL_SHUTDOWN_S = 2


def main(args: argparse.Namespace) -> int:
    """Serve the API until interrupted, answering 503 while the model loads (and auto mode times this machine), as
    llama-server does; a model that cannot load ends it."""
    logs.configure()
    key = api_key(args)
    target, draft = resolve_models(args)
    sock = bind(args.host, args.port)  # before seconds of loading: a port in use is known at once
    host = EngineHost(draft_as_is=args.draft_as_is, keep_answers=args.keep_answers)
    failed: list[str] = []

    def until_loaded(stop: Callable[[], None]) -> None:
        status = host.wait_loaded(on_message=print_progress)
        if status.state == "ready":
            loaded = status.message.removeprefix("Ready: ")
            print(f"Ready at {base_url(args.host, args.port)}/v1 (OpenAI-compatible API): {loaded}", flush=True)
        else:
            failed.append(status.message)
            stop()

    try:
        host.load(target, draft, backend_config(args))
        app = create_app(host, key)
        run(app, sock, lambda stop: threading.Thread(target=until_loaded, args=(stop,), daemon=True).start(), host)
        if failed:
            raise SpecchatError(failed[0])
    finally:
        sock.close()
        host.close()
    return 0


def api_key(args: argparse.Namespace) -> str | None:
    """--api-key, else $SPECCHAT_API_KEY; warns when serving beyond this machine without one."""
    key = args.api_key or os.environ.get(API_KEY_ENV) or None
    if key is None and not is_loopback(args.host):
        print(
            f"warning: serving on {args.host} without an API key: anyone who can reach this port can use the model;"
            f" set --api-key or {API_KEY_ENV}",
            file=sys.stderr,
            flush=True,
        )
    return key


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def base_url(host: str, port: int) -> str:
    """The address to print: an "any interface" bind is reached on this machine at 127.0.0.1."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


def run(app: FastAPI, sock: socket.socket, on_ready: Callable[[Callable[[], None]], None], host: EngineHost) -> None:
    """Serve app on sock until interrupted; on_ready runs once connections are being accepted, given a function that
    stops the serving. On Ctrl+C the host's answers under way end at their next token, each saying why."""
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    server = _Server(config, host)

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            on_ready(lambda: setattr(server, "should_exit", True))
        await task

    asyncio.run(serve())


class _Server(uvicorn.Server):
    """uvicorn's server, telling the host first when a signal asks it to stop: an answer streaming on would be
    cancelled once the graceful shutdown's time is up, unended, with a traceback in the log."""

    def __init__(self, config: uvicorn.Config, host: EngineHost):
        super().__init__(config)
        self.host = host

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.host.closing.set()
        super().handle_exit(sig, frame)
