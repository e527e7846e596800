"""`specchat ...`: thin command-line layers over the engine, the models, the app, the API and the benchmark.

Imports stay inside the commands, so that `specchat generate` and `specchat models list` never load Gradio."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from specchat.errors import SpecchatError

# Terminal colors by token kind; the same meaning as the app's overlay.
_COLORS = {"accepted": "\033[32m", "corrected": "\033[31m", "bonus": "\033[36m", "target": ""}
_RESET = "\033[0m"


def _generate_parser(sub) -> None:
    from specchat.engine import MODES
    from specchat.launch import add_answers_argument, add_model_arguments

    p = sub.add_parser("generate", help="generate one answer from the command line")
    add_model_arguments(p)
    add_answers_argument(p)
    p.add_argument("--prompt", required=True, help="the prompt ('-' reads standard input)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the target's chat template")
    p.add_argument("--system", help="system prompt (with --chat)")
    p.add_argument("--mode", choices=MODES, default="speculative" if "auto" not in MODES else "auto")
    p.add_argument("--k", type=int, default=4, help="draft length of speculative and lookup modes (auto picks its own)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 decodes greedily")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0, help="-1: a random one")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object: text, tokens, spans, stats")
    p.set_defaults(func=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    from specchat.engine import GenerationSettings, SamplingParams
    from specchat.engine.text import check_text
    from specchat.launch import load_engine, resolve_models

    try:
        prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    except UnicodeDecodeError as e:
        raise SpecchatError(f"standard input is not {e.encoding} text ({e.reason}); convert it to UTF-8") from None
    if not prompt.strip():  # before seconds of model loading: an empty pipe is a mistake, not a question
        raise SpecchatError("the prompt is empty: give --prompt TEXT, or --prompt - with the text on standard input")
    # The engine checks the same before it generates; checked here too, before the models load.
    check_text(prompt, "the prompt")
    if args.system:
        if not args.chat:  # a plain completion has no turns to put it in
            raise SpecchatError("--system is for chat prompts: add --chat, or drop --system")
        check_text(args.system, "--system")
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p)
    settings = GenerationSettings(
        mode=args.mode, k=args.k, sampling=sampling, seed=args.seed, max_tokens=args.max_tokens, stop=tuple(args.stop)
    )
    target, draft = resolve_models(args)
    draft = draft if args.mode in ("auto", "speculative") else None  # plain and lookup draft with no model
    engine = load_engine(args, target, draft, keep_answers=args.keep_answers)
    if args.mode == "auto":
        engine.calibration()  # before the answer, not in its first step; load_engine gave it print_progress
    if args.chat:
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": prompt}
        ]
        events = engine.chat(messages, settings, _show_reading)
    else:
        events = engine.generate(prompt, settings, _show_reading)
    color = sys.stdout.isatty() and not args.json
    tokens, spans = [], []
    interrupted = False
    try:
        for ev in events:
            tokens.append(ev.token)
            if spans and spans[-1]["kind"] == ev.kind:
                spans[-1]["text"] += ev.text
            elif ev.text:
                spans.append({"text": ev.text, "kind": ev.kind})
            if not args.json:
                sys.stdout.write(f"{_COLORS[ev.kind]}{ev.text}{_RESET}" if color and _COLORS[ev.kind] else ev.text)
                sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl+C: the answer so far and its stats are what the user waited for
        interrupted = True
        events.close()
    stats = engine.last_stats
    if args.json:
        text = "".join(s["text"] for s in spans)
        print(json.dumps({"text": text, "tokens": tokens, "spans": spans, "stats": stats.to_dict()}))
    else:
        finish = "context full: raise --n-ctx" if stats.finish_reason == "context" else stats.finish_reason
        finish = "interrupted" if interrupted else finish
        print(
            f"\n[{stats.tokens} tokens, {stats.tokens_per_s:.1f} tok/s, acceptance {stats.acceptance_rate:.0%}, "
            f"{stats.strategy}, {finish}]",
            file=sys.stderr,
        )
    engine.close()
    return 130 if interrupted else 0


def _show_reading(done: int, total: int) -> bool:
    """On a terminal, how far a prompt of several batches has been read (minutes, for a long one on a CPU)."""
    if sys.stderr.isatty():
        if 0 < done < total:
            print(f"\rreading the prompt: {done:,} of {total:,} tokens", end="", file=sys.stderr, flush=True)
        elif done == total:
            print("\r\033[K", end="", file=sys.stderr, flush=True)  # the answer takes the line
    return True


def _add_serving_arguments(p: argparse.ArgumentParser, default_port: int) -> None:
    from specchat.launch import add_answers_argument, add_model_arguments, port

    p.add_argument("--host", default="127.0.0.1", help="interface to serve on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=port, default=default_port, help=f"port to serve on (default {default_port})")
    p.add_argument(
        "--api-key",
        help="demand `Authorization: Bearer KEY` on the API's routes (default: $SPECCHAT_API_KEY; unset: no key)",
    )
    add_model_arguments(p)
    add_answers_argument(p)


def _cmd_ui(args: argparse.Namespace) -> int:
    from specchat.launch import bind

    sock = bind(args.host, args.port)  # before Gradio's seconds of importing
    from specchat.ui import app as ui_app  # Gradio loads here, for the commands that serve it only

    return ui_app.main(args, sock)


def _cmd_serve(args: argparse.Namespace) -> int:
    from specchat.api import serve  # FastAPI and uvicorn, never Gradio

    return serve.main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specchat", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    _generate_parser(sub)
    from specchat.bench import run as bench
    from specchat.cli import models as models_cli

    ui = sub.add_parser("ui", help="start the chat app in the browser, with the API beside it (the default command)")
    _add_serving_arguments(ui, 7860)
    ui.add_argument("--no-browser", action="store_true", help="do not open a browser window")
    ui.add_argument(
        "--auth",
        metavar="USER:PASSWORD",
        help="the login the page asks for (default: $SPECCHAT_AUTH; unset: none). Beyond 127.0.0.1 without one,"
        " the Models tab cannot add, remove or download files",
    )
    # Unset threads / GPU layers mean "as saved in the settings", not the command line's own defaults.
    ui.set_defaults(threads=None, gpu_layers=None, func=_cmd_ui)
    serve = sub.add_parser("serve", help="serve the OpenAI-compatible API alone (no browser app)")
    _add_serving_arguments(serve, 8000)
    serve.set_defaults(func=_cmd_serve)
    models_cli.register(sub)
    bench.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # Inside the try: Ctrl+C during the parser's imports is a Ctrl+C too.
        args = build_parser().parse_args(argv or ["ui"])
        return args.func(args)
    except SpecchatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`specchat generate ... | head`): nothing more to say
        # Python flushes standard output again at exit: aim it at nothing, as Python's signal docs advise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
