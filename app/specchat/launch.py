"""What a command line asks for, shared by every command that loads models (generate, ui, serve, bench).

Below the CLI, the app, the API and the benchmark, so that none of them imports another to learn its arguments.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from pathlib import Path

from specchat.engine import BackendConfig, Engine
from specchat.engine.calibration import Calibration, cached_for
from specchat.errors import SpecchatError
from specchat.models import catalog


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """--target/--draft/--pair and the backend knobs, shared by generate, ui, serve and bench."""
    p.add_argument("--target", help="target model: a GGUF path or an installed model name")
    p.add_argument("--draft", help="draft model: a GGUF path or an installed model name")
    p.add_argument("--pair", help="an installed catalog pair (see `specchat models list`)")
    p.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    p.add_argument("--n-ctx", type=int, default=4096, help="context length in tokens (default 4096)")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers to offload to the GPU (-1: all)")
    p.add_argument(
        "--draft-as-is",
        action="store_true",
        help="draft with the draft file itself, never with a copy re-quantized for the CPU (made when it is faster)",
    )


def add_answers_argument(p: argparse.ArgumentParser) -> None:
    """--keep-answers, for the commands whose answers later requests may copy from: generate, ui and serve."""
    p.add_argument(
        "--keep-answers",
        action="store_true",
        help="keep answers in specchat's cache folder (as token ids, readable by whoever can read that folder) for auto"
        " mode to copy from after a restart too, as it does from earlier answers within one process: for agents and"
        " editors that send the same files again",
    )


def resolve_models(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """The (target, draft) paths the user asked for, or the installed default pair."""
    if args.pair and (args.target or args.draft):
        raise SpecchatError("give either --pair or --target/--draft, not both")
    if args.pair:
        return catalog.resolve_pair(args.pair)
    if args.target:
        return catalog.resolve_model(args.target), catalog.resolve_model(args.draft) if args.draft else None
    if args.draft:
        raise SpecchatError("--draft needs --target")
    default = catalog.installed_default_pair()
    if default is None:
        raise SpecchatError(
            "no model given and the default pair is not installed: run `specchat models download` "
            "with the default pair's name (see `specchat models list`), or pass --target PATH"
        )
    return default


def cpu_copy_dir(args: argparse.Namespace) -> Path | None:
    """Where Engine.load may keep a CPU copy of the draft (None: --draft-as-is)."""
    return None if args.draft_as_is else catalog.cache_dir()


def load_engine(args: argparse.Namespace, target: Path, draft: Path | None, keep_answers: bool = False) -> Engine:
    """The engine as the command line asked for it, with specchat's cache folder for the draft copy and calibration,
    and for its answers where keep_answers (--keep-answers; bench has none: each prompt of its suite answers alone)."""
    config, cache = backend_config(args), catalog.cache_dir()
    answers = cache if keep_answers else None
    return Engine.load(target, draft, config, cpu_copy_dir(args), print_progress, cache, answers_dir=answers)


def pair_calibration(name: str, cat: catalog.Catalog) -> Calibration | None:
    """The newest calibration of a catalog pair on this machine, measured when the pair first loaded here (in any
    front end: they share the cache folder); None while it is not installed or has not loaded yet."""
    try:
        target, draft = catalog.resolve_pair(name, cat)
    except SpecchatError:
        return None
    return cached_for(target, draft, catalog.cache_dir())


def port(text: str) -> int:
    """argparse type of --port: a TCP port number."""
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= 65535):
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number: choose one from 1 to 65535")
    return int(text)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket of `specchat ui` or `serve`, bound before any loading: an address the server cannot listen
    on (a port in use, a host that is not this machine's) is one clear line at once, not the server's own error after
    minutes of loading, naming neither. The socket is kept and served on, so no other program can take the port
    meanwhile."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise SpecchatError(f"cannot serve on --host {host}: {e.strerror}") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As Gradio and uvicorn do: a port lingering after a closed server (TIME_WAIT) is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise SpecchatError(
                f"port {port} on {host} is in use by another program; choose another with --port"
            ) from None
        reason = os.strerror(e.errno) if e.errno else str(e)  # the OSError's own text repeats the address
        raise SpecchatError(f"cannot serve on {host}:{port} ({reason}); choose another --port or --host") from None
    return sock


def print_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def backend_config(args: argparse.Namespace) -> BackendConfig:
    return BackendConfig(n_ctx=args.n_ctx, n_threads=args.threads, n_gpu_layers=args.gpu_layers)
