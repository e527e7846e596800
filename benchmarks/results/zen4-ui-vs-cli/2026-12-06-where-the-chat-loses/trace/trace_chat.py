"""Trace the chat page (9b3fc9b) while it streams one answer of MAXTOK (300) tokens: python trace_chat.py OUT [shim]."""

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
REPO = HERE.parents[4]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))
from playwright.sync_api import sync_playwright  # noqa: E402
from ui_vs_cli import chat_run  # noqa: E402
from where import PROMPT, start_chat_app  # noqa: E402

from helpers import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
shim = len(sys.argv) > 2 and sys.argv[2] == "shim"
server, url, _ = start_chat_app(out, max_tokens=int(os.environ.get("MAXTOK", "300")))
cats = [
    "devtools.timeline",
    "disabled-by-default-devtools.timeline",
    "toplevel",
    "v8.execute",
    "blink",
    "cc",
    "gpu",
    "viz",
    "disabled-by-default-devtools.timeline.frame",
    "benchmark",
]
try:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        if shim:
            page.add_init_script(
                (
                    REPO / "benchmarks/results/zen4-ui-vs-cli/2026-12-06-tracker-shim-ab/tracker_frames_shim.js"
                ).read_text()
            )
        page.goto(url)
        page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=1_800_000)
        print("untimed", chat_run(page, PROMPT, server.pid), flush=True)

        def threads():
            out = {}
            for t in os.listdir(f"/proc/{server.pid}/task"):
                try:
                    f = open(f"/proc/{server.pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
                    out[t] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
                except OSError:
                    pass
            return out

        before = threads()
        browser.start_tracing(page=page, path=str(out / "trace.json"), categories=cats)
        r = chat_run(page, PROMPT, server.pid)
        browser.stop_tracing()
        after = threads()
        per = sorted(((after[t] - before.get(t, 0.0), t) for t in after), reverse=True)
        print("server threads cpu s:", [(t, round(c, 2)) for c, t in per if c > 0], "main", server.pid, flush=True)
        print("traced", r, flush=True)
        (out / "run.json").write_text(json.dumps(r))
        browser.close()
finally:
    server.terminate()
    server.wait(30)
