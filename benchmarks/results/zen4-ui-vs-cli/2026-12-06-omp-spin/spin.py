"""Does how llama.cpp's OpenMP threads wait change what the page costs them? (2026-12-06, AMD EPYC Zen 4, 2 cores.)
One app per variant of libgomp's waiting (its environment), the same answer made round by round, in rotating order,
by the chat tab in headless Chromium and by `specchat generate` under each variant; greedy auto, the Qwen pair.

python spin.py OUT [--rounds 3] [--variants default,spin30k,passive] [--old-app OTHER/app]

(Also used for the app before and after the answer's feed: --variants default,old --old-app a worktree's app.)
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path[:0] = [str(HERE.parent / "2026-12-06-where-the-chat-loses"), str(REPO / "benchmarks"), str(REPO / "tests")]
from playwright.sync_api import sync_playwright  # noqa: E402
from ui_vs_cli import SYSTEM, chat_run, measured_cli_run, start_app  # noqa: E402
from where import MODEL_ARGS, PROMPT, READY, rotate  # noqa: E402

from helpers import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

# libgomp's waiting at a barrier and between parallel regions: by default it spins 300000 times before it sleeps.
VARIANTS = {
    "default": {},
    "spin30k": {"GOMP_SPINCOUNT": "30000"},
    "spin3k": {"GOMP_SPINCOUNT": "3000"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default="default,spin30k,passive")
    ap.add_argument("--old-app", type=Path, help="variant 'old': the app from this source root, as it comes")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    variants = args.variants.split(",")
    home = Path(tempfile.mkdtemp())  # one home: the first app calibrates auto, the rest and the CLI find it
    (home / "config").mkdir()
    settings = {"mode": "auto", "k": 4, "temperature": 0.0, "seed": 0, "max_tokens": 500, "overlay": True}
    (home / "config" / "ui_settings.json").write_text(json.dumps(settings | {"system_prompt": SYSTEM}))
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    base |= {"SPECCHAT_HOME": str(home), "PYTHONPATH": str(REPO / "app"), "HF_HUB_OFFLINE": "1"}
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
    cli_args = argparse.Namespace(k=4, max_tokens=500, mode="auto")
    variant_env = VARIANTS | ({"old": {"PYTHONPATH": str(args.old_app)}} if args.old_app else {})
    servers = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            pages = {}
            for v in variants:  # one at a time: the first calibrates
                env = base | variant_env[v]
                servers[v] = (*start_app(MODEL_ARGS, env, args.out / f"server-{v}.log"), env)
                page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
                page.goto(servers[v][1])
                page.wait_for_selector(READY, timeout=1_800_000)
                chat_run(page, PROMPT, servers[v][0].pid)  # untimed: a fresh page animates until its first answer
                pages[v] = page
            arms = {}
            for v in variants:
                server, _, env = servers[v]
                arms[f"cli_{v}"] = lambda env=env: measured_cli_run(MODEL_ARGS, messages, cli_args, env)
                arms[f"chat_{v}"] = lambda v=v, server=server: chat_run(pages[v], PROMPT, server.pid)
            rotate(arms, args.rounds, "cli_default", args.out)
            browser.close()
    finally:
        for server, _, _ in servers.values():
            server.terminate()
            server.wait(30)
        shutil.rmtree(home, ignore_errors=True)
    runs = json.loads((args.out / "runs.json").read_text())
    for v in variants:
        for arm in (f"cli_{v}", f"chat_{v}"):
            rates = [r[arm]["tokens_per_s"] for r in runs]
            own = [r[f"chat_{v}"]["tokens_per_s"] / r[f"cli_{v}"]["tokens_per_s"] for r in runs]
            print(arm, "tok/s median", round(statistics.median(rates), 2), "chat/own cli", [round(x, 3) for x in own])


if __name__ == "__main__":
    main()
