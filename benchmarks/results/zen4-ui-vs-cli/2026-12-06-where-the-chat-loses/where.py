"""Where the chat tab loses against the CLI (2026-12-06, AMD EPYC Zen 4, 2 cores): the same answer made, round by
round in rotating order, by `specchat generate`, by the chat tab in headless Chromium, and by the same app's chat event
driven from Python (gradio_client: Gradio's queue, updates and streaming, no browser rendering them).

python where.py OUT [--rounds 4]    (before/: 9b3fc9b; after/: the app serving TRACKER_FRAMES_JS)
"""

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(HERE.parent / "2026-12-06-chat-decline"))
from chat_decline import PROMPT  # noqa: E402
from gradio_client import Client  # noqa: E402
from playwright.sync_api import Browser, Page, sync_playwright  # noqa: E402
from ui_vs_cli import MODELS, SYSTEM, chat_run, measured_cli_run, start_app  # noqa: E402

from helpers import CHROMIUM, CHROMIUM_ARGS, process_cpu_s  # noqa: E402

MODEL_ARGS = ["--target", str(MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")]
MODEL_ARGS += ["--draft", str(MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")]


def start_chat_app(out: Path, max_tokens: int = 500) -> tuple[subprocess.Popen, str, dict[str, str]]:
    """`specchat ui` with the Qwen pair, greedy auto and the overlay on, in a home of its own: (server, url, env)."""
    home = Path(tempfile.mkdtemp())
    (home / "config").mkdir()
    settings = {"mode": "auto", "k": 4, "temperature": 0.0, "seed": 0, "max_tokens": max_tokens, "overlay": True}
    (home / "config" / "ui_settings.json").write_text(json.dumps(settings | {"system_prompt": SYSTEM}))
    env = {**os.environ, "SPECCHAT_HOME": str(home), "PYTHONPATH": str(REPO / "app"), "HF_HUB_OFFLINE": "1"}
    return *start_app(MODEL_ARGS, env, out / "server.log"), env


READY = '#sc-model .sc-model[data-state="ready"]'


@contextmanager
def chat_page(
    out: Path, max_tokens: int = 500
) -> Iterator[tuple[subprocess.Popen, str, dict[str, str], Browser, Page]]:
    """start_chat_app, and a page of it in headless Chromium once the model is ready: (server, url, env, browser,
    page)."""
    server, url, env = start_chat_app(out, max_tokens)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            page.goto(url)
            page.wait_for_selector(READY, timeout=1_800_000)
            yield server, url, env, browser, page
            browser.close()
    finally:
        server.terminate()
        server.wait(30)


def rotate(arms: dict[str, Callable[[], dict]], rounds: int, against: str, out: Path) -> None:
    """Every arm once a round, the order rotating round by round; each other arm's rate read against `against`'s in
    its round. Writes out/runs.json and prints the medians."""
    runs, order = [], list(arms)
    for r in range(rounds):
        run = {"round": r}
        for arm in order[r % len(order) :] + order[: r % len(order)]:
            run[arm] = arms[arm]()
        for arm in order:
            if arm != against:
                run[f"{arm}_vs_{against}"] = run[arm]["tokens_per_s"] / run[against]["tokens_per_s"]
        runs.append(run)
        print(json.dumps(run), flush=True)
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    for arm in order:
        if arm != against:
            ratios = [r[f"{arm}_vs_{against}"] for r in runs]
            print(f"{arm} / {against}: median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")


def client_run(url: str, server_pid: int) -> dict:
    client = Client(url, verbose=False)  # a session of its own: a new conversation, as the page's Clear gives
    server, me = process_cpu_s([server_pid]), resource.getrusage(resource.RUSAGE_SELF)
    result = client.submit(PROMPT, api_name="/respond").result(timeout=3600)
    server = process_cpu_s([server_pid]) - server
    after = resource.getrusage(resource.RUSAGE_SELF)
    me = after.ru_utime + after.ru_stime - me.ru_utime - me.ru_stime
    text = next(x for x in result if isinstance(x, str) and 'data-stat="tokens_per_s"' in x)
    stat = lambda name: re.search(rf'data-stat="{name}">([^<]*)<', text).group(1)  # noqa: E731
    tokens = int(stat("tokens"))
    return {
        "tokens": tokens,
        "tokens_per_s": float(stat("tokens_per_s")),
        "server_cpu_s_per_token": server / tokens,
        "client_cpu_s_per_token": me / tokens,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
    cli_args = argparse.Namespace(k=4, max_tokens=500, mode="auto")
    with chat_page(args.out) as (server, url, env, _, page):
        chat_run(page, PROMPT, server.pid)  # untimed: a fresh page animates until its first answer
        arms = {
            "cli": lambda: measured_cli_run(MODEL_ARGS, messages, cli_args, env),
            "browser": lambda: chat_run(page, PROMPT, server.pid),
            "client": lambda: client_run(url, server.pid),
        }
        rotate(arms, args.rounds, "cli", args.out)


if __name__ == "__main__":
    main()
