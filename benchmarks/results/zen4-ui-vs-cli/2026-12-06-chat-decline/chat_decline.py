"""The chat's speed over an app's life, on this machine (2026-12-06, AMD EPYC Zen 4, 2 cores).

python chat_decline.py same-page OUT [--answers 10]
    one app, one page: the same 500-token answer again and again, each answer's rate and CPU
python chat_decline.py blocks OUT [--blocks 4] [--per-block 3]
    one app; blocks of answers on a fresh page without / with the tracker-frames script of
    ../2026-12-06-tracker-shim-ab (a page's first answer untimed), each timed answer beside `specchat generate`,
    the order alternating
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))
from ui_vs_cli import MODELS, SYSTEM, chat_run, measured_cli_run, start_app  # noqa: E402

from helpers import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

PROMPT = (
    "Write a Python module for a singly linked list class with methods to append, prepend, insert at an index, "
    "delete by value, find, reverse in place, and convert to a Python list, each with a docstring, followed by "
    "unittest tests for every method."
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("how", choices=["same-page", "blocks"])
    ap.add_argument("out", type=Path)
    ap.add_argument("--answers", type=int, default=10)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--per-block", type=int, default=3)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp())
    (home / "config").mkdir()
    settings = {"mode": "auto", "k": 4, "temperature": 0.0, "seed": 0, "max_tokens": 500, "overlay": True}
    (home / "config" / "ui_settings.json").write_text(json.dumps(settings | {"system_prompt": SYSTEM}))
    env = {**os.environ, "SPECCHAT_HOME": str(home), "PYTHONPATH": str(REPO / "app"), "HF_HUB_OFFLINE": "1"}
    models = ["--target", str(MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")]
    models += ["--draft", str(MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
    cli_args = argparse.Namespace(k=4, max_tokens=500, mode="auto")
    shim = (Path(__file__).parents[1] / "2026-12-06-tracker-shim-ab" / "tracker_frames_shim.js").read_text()
    server, url = start_app(models, env, args.out / "server.log")
    runs = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)

            def fresh_page(with_shim: bool):
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                page = context.new_page()
                if with_shim:
                    page.add_init_script(shim)
                page.goto(url)
                page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=1_800_000)
                return context, page

            if args.how == "same-page":
                _, page = fresh_page(False)
                for i in range(args.answers):
                    runs.append({"answer": i, "chat": chat_run(page, PROMPT, server.pid)})
                    print(json.dumps(runs[-1]), flush=True)
            for block in range(args.blocks if args.how == "blocks" else 0):
                arm = "shim" if block % 2 else "page as it is"
                context, page = fresh_page(arm == "shim")
                chat_run(page, PROMPT, server.pid)  # untimed: a fresh page animates until its first answer
                for i in range(args.per_block):
                    run = {"block": block, "arm": arm}
                    for side in ("chat", "cli") if i % 2 == 0 else ("cli", "chat"):
                        if side == "chat":
                            run["chat"] = chat_run(page, PROMPT, server.pid)
                        else:
                            run["cli"] = measured_cli_run(models, messages, cli_args, env)
                    run["ratio"] = run["chat"]["tokens_per_s"] / run["cli"]["tokens_per_s"]
                    runs.append(run)
                    print(json.dumps(run), flush=True)
                context.close()
            browser.close()
    finally:
        server.terminate()
        server.wait(30)
    (args.out / "runs.json").write_text(json.dumps(runs, indent=1))
    for arm in ("page as it is", "shim"):
        ratios = [r["ratio"] for r in runs if r.get("arm") == arm]
        if ratios:
            print(f"{arm}: chat / CLI median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
