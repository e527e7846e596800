"""Soak: many chat requests in a row through a real `specchat serve`, from several clients at once, every tenth one bad.

Each client sends its share of the requests one after another with the official `openai` client; a bad request is
one of: text with a lone surrogate, a prompt longer than the context, an empty message, a temperature out of range.
Counts what came back: answers to good requests, clear 4xx refusals of bad ones, and anything else (hangs past
--timeout, 5xx, a bad request answered, a good one refused). Exit status 0 only when there is nothing else.

    python benchmarks/soak_api.py --target T.gguf [--requests 200] [--clients 2] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai

REPO = Path(__file__).resolve().parents[1]
BAD = {
    "surrogate": {"messages": [{"role": "user", "content": "abc \ud800 def"}]},
    "huge": {"messages": [{"role": "user", "content": "word " * 20000}]},
    "empty": {"messages": [{"role": "user", "content": ""}]},
    "temperature": {"messages": [{"role": "user", "content": "Hi"}], "temperature": -1},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True)
    p.add_argument("--draft")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a request may take before it counts as a hang")
    args = p.parse_args()
    port = free_port()
    models = ["--target", args.target, *(["--draft", args.draft] if args.draft else [])]
    env = {**os.environ, "PYTHONPATH": str(REPO / "app")}
    server = subprocess.Popen(
        [sys.executable, "-m", "specchat", "serve", "--port", str(port), "--n-ctx", "2048", *models],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        for line in server.stdout:  # the server prints one line when it accepts connections
            if line.startswith("Ready at"):
                break
        else:
            raise SystemExit(f"the server exited ({server.wait()}) before it was ready")
        threading.Thread(target=lambda: collections.deque(server.stdout, maxlen=0), daemon=True).start()
        return soak(f"http://127.0.0.1:{port}/v1", args)
    finally:
        server.terminate()
        server.wait(30)


def raw_post(url: str, body: dict, timeout: float) -> None:
    """POST body as JSON with non-ASCII characters escaped (as json.dumps does), raising HTTPError on a refusal."""
    data = json.dumps({"model": "specchat", "max_tokens": 4, **body}).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()


def soak(base_url: str, args: argparse.Namespace) -> int:
    outcomes: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    lock = threading.Lock()
    bad_kinds = list(BAD)

    def client(number: int) -> None:
        api = openai.OpenAI(base_url=base_url, api_key="none", timeout=args.timeout, max_retries=0)
        for i in range(number, args.requests, args.clients):
            bad = bad_kinds[(i // 10) % len(bad_kinds)] if i % 10 == 9 else None
            body = BAD[bad] if bad else {"messages": [{"role": "user", "content": f"Count to {i % 7 + 3}."}]}
            started = time.monotonic()
            try:
                if bad == "surrogate":  # the openai client cannot encode it; a browser or curl sends it escaped
                    raw_post(f"{base_url}/chat/completions", body, args.timeout)
                    outcome = "answered"
                else:
                    answer = api.chat.completions.create(
                        **{"model": "specchat", "max_tokens": args.max_tokens, "temperature": 0, **body}
                    )
                    outcome = "answered" if bad or answer.choices[0].message.content else "answered empty"
            except (openai.APITimeoutError, TimeoutError):
                outcome = "hang"
            except urllib.error.HTTPError as e:
                outcome = f"refused {e.code}"
            except openai.APIStatusError as e:
                outcome = f"refused {e.status_code}"
            except openai.APIConnectionError as e:
                outcome = f"connection error: {e}"
            # An empty message may be answered or refused; any other bad one must be refused, every good one answered.
            expected = {"answered", "refused 400"} if bad == "empty" else {"refused 400" if bad else "answered"}
            took = time.monotonic() - started
            with lock:
                outcomes[f"{'bad' if bad else 'good'} {outcome}"] += 1
                if outcome not in expected:
                    problems.append(f"request {i} ({bad or 'good'}): {outcome} after {took:.1f} s")

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{args.requests} requests from {args.clients} clients in {time.monotonic() - started:.0f} s")
    for outcome, n in sorted(outcomes.items()):
        print(f"  {outcome}: {n}")
    for problem in problems:
        print(f"  problem: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
