"""What an open, idle chat page costs the browser, with and without the app's tracker-frames script (2026-12-06,
AMD EPYC Zen 4, 2 cores): one app from OLD/app (9b3fc9b, without it) and one from this checkout (with it), the Qwen
pair loaded in each; a fresh page on each in turn, its browser CPU over 10 s once ready.

python idle_page.py OLD OUT [--rounds 3]
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))
from playwright.sync_api import sync_playwright  # noqa: E402
from ui_vs_cli import MODELS, browser_pids, start_app  # noqa: E402

from helpers import CHROMIUM, CHROMIUM_ARGS, process_cpu_s  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    models = ["--target", str(MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")]
    models += ["--draft", str(MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")]
    apps = {}
    for name, app_path in (("without", args.old / "app"), ("with", REPO / "app")):
        env = {**os.environ, "SPECCHAT_HOME": tempfile.mkdtemp(), "PYTHONPATH": str(app_path), "HF_HUB_OFFLINE": "1"}
        apps[name] = start_app(models, env, args.out / f"server-{name}.log")
    runs = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            for r in range(args.rounds):
                for name in ("without", "with") if r % 2 == 0 else ("with", "without"):
                    context = browser.new_context(viewport={"width": 1400, "height": 1000})
                    page = context.new_page()
                    page.goto(apps[name][1])
                    page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=1_800_000)
                    time.sleep(2)
                    before, start = process_cpu_s(browser_pids()), time.monotonic()
                    time.sleep(10)
                    share = (process_cpu_s(browser_pids()) - before) / (time.monotonic() - start)
                    context.close()
                    runs.append({"round": r, "script": name, "browser_cores": share})
                    print(json.dumps(runs[-1]), flush=True)
            browser.close()
    finally:
        for server, _ in apps.values():
            server.terminate()
            server.wait(30)
    (args.out / "runs.json").write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
