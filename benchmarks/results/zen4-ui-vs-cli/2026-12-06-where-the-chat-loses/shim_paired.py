"""The tracker-frames script, paired against the app without a browser (2026-12-06, AMD EPYC Zen 4, 2 cores).

Round by round in rotating order, one app: the chat event driven from Python (gradio_client, no browser), a fresh
page as it is, and a fresh page with ../2026-12-06-tracker-shim-ab/tracker_frames_shim.js; each page gets a short
untimed answer first (a fresh page animates until its first answer), then the timed one, and is closed. Each page's
rate is read against the no-browser rate of its round. Run at 9b3fc9b, before the app served that script itself
(TRACKER_FRAMES_JS in app/specchat/ui/app.py): on a later app both pages have it.

python shim_paired.py OUT [--rounds 9]
"""

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
REPO = HERE.parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))
from playwright.sync_api import sync_playwright  # noqa: E402
from ui_vs_cli import chat_run  # noqa: E402
from where import PROMPT, client_run, rotate, start_chat_app  # noqa: E402

from helpers import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

SHIM = (HERE.parent / "2026-12-06-tracker-shim-ab" / "tracker_frames_shim.js").read_text()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    server, url, _ = start_chat_app(args.out)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)

            def page_run(with_shim: bool) -> dict:
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                page = context.new_page()
                if with_shim:
                    page.add_init_script(SHIM)
                page.goto(url)
                page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=1_800_000)
                chat_run(page, "Say hi.", server.pid)  # untimed, short
                run = chat_run(page, PROMPT, server.pid)
                context.close()
                return run

            arms = {
                "client": lambda: client_run(url, server.pid),
                "page": lambda: page_run(False),
                "page+shim": lambda: page_run(True),
            }
            rotate(arms, args.rounds, "client", args.out)
            browser.close()
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
