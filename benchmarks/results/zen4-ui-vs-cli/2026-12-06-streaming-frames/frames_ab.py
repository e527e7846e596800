"""What the chat page's rendering costs the browser while an answer streams, by variant (2026-12-06, AMD EPYC Zen 4,
2 cores): the app with the Qwen pair on ONE thread (so that the browser has a core of its own and its CPU time reads
its own work, not the preemption of llama.cpp), a fresh page per answer (opened, then left 8 s for Gradio's own
page-open animation to end), the variants in rotating order round by round.

python frames_ab.py OUT [--rounds 3] [--variants base,tick500,...] [--old-app OTHER/app]

Each answer reports the browser's CPU seconds per second of answer (all its processes), and the renderer main
thread's task, layout, style and script time from the DevTools Performance metrics.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path[:0] = [str(HERE.parent / "2026-12-06-where-the-chat-loses"), str(REPO / "benchmarks"), str(REPO / "tests")]
from playwright.sync_api import sync_playwright  # noqa: E402
from ui_vs_cli import MODELS, SYSTEM, chat_run, start_app  # noqa: E402
from where import PROMPT  # noqa: E402

from helpers import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

# Each variant: (CSS added to the page, JS run in the page before its scripts, constants of specchat.ui.app).
# Slower ticks on the page of the app as it was before 16c7c74 (a tick every 250 ms); "base" there is 500 ms now.
SLOWER_TICKS = """const later = window.setTimeout;
window.setTimeout = (f, ms, ...a) => later(f, f && f.name === 'tick' && ms === 250 ? TICK_MS : ms, ...a);"""
VARIANTS = {
    "base": ("", "", ""),
    "tick500": ("", SLOWER_TICKS.replace("TICK_MS", "500"), ""),
    "tick1000": ("", SLOWER_TICKS.replace("TICK_MS", "1000"), ""),
    "noplot": ("#sc-plot { display: none; }", "", ""),
    "nopanels": ("#sc-plot, #sc-status { display: none; }", "", ""),
    "contain": ("#sc-chat-overlay .message-row, #sc-chat-overlay .sc-live { contain: content; }", "", ""),
    "layer": ("#sc-chat-overlay .bubble-wrap { will-change: scroll-position; }", "", ""),
    "strict": ("#sc-chat-overlay .bubble-wrap { contain: strict; }", "", ""),
    # The app's update interval and reveal tick (app.py), set in the server.
    "u1t50": ("", "", "REVEAL_TICK_S=0.5"),
    "u2t25": ("", "", "UPDATE_INTERVAL_S=2"),
    "u2t50": ("", "", "UPDATE_INTERVAL_S=2 REVEAL_TICK_S=0.5"),
    # The streamed answer neither laid out nor painted (Gradio's updates and live_js's work on them all run).
    "nolive": ("#sc-chat-overlay .sc-live { display: none; }", "", ""),
    # How often the stats panel, the plot and the status line are drawn again while streaming: PANELS_INTERVAL_S, a
    # constant of the app only while this was tried (not kept, never committed; ../2026-12-06-answer-feed/p-rates).
    "p1": ("", "", "PANELS_INTERVAL_S=1"),
    "p2": ("", "", "PANELS_INTERVAL_S=2"),
    "p4": ("", "", "PANELS_INTERVAL_S=4"),
    "pend": ("", "", "PANELS_INTERVAL_S=1e9"),
    # The status tracker's frames never delivered (no_tracker_frames.js instead of the app's pacing of them).
    "notracker": ("", "", f"TRACKER_FRAMES_JS=@{HERE / 'no_tracker_frames.js'}"),
    # The app at --old-app (the same page, the same constants): e.g. before the answer's feed (a git worktree).
    "old": ("", "", ""),
}
# Plain decoding: the apps of the server variants load (and would calibrate auto) side by side. ab1/ and ab2/ ran
# "auto" with one app.
MODE = "plain"
METRICS = ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration", "LayoutCount")


def one_answer(browser, url: str, server_pid: int, variant: str) -> dict:
    css, js, _ = VARIANTS[variant]
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        if js:
            context.add_init_script(js)
        page = context.new_page()
        page.goto(url)
        page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=1_800_000)
        if css:
            page.add_style_tag(content=css)
        time.sleep(8)
        cdp = context.new_cdp_session(page)
        cdp.send("Performance.enable")
        before = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
        t0 = time.perf_counter()
        run = chat_run(page, PROMPT, server_pid)
        wall = time.perf_counter() - t0
        after = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
        run |= {f"main_{m}": (after[m] - before[m]) / wall for m in METRICS}
        run |= {"wall_s": wall, "browser_cpu_per_s": run["browser_cpu_s_per_token"] * run["tokens"] / wall}
        return run
    finally:
        context.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--old-app", type=Path, help="the app source root of the variant 'old'")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    variants = args.variants.split(",")

    def server_key(variant: str) -> tuple[str, str]:
        return VARIANTS[variant][2], str(args.old_app if variant == "old" else REPO / "app")

    home = Path(tempfile.mkdtemp())
    (home / "config").mkdir()
    settings = {"mode": MODE, "k": 4, "temperature": 0.0, "seed": 0, "max_tokens": 300, "overlay": True}
    (home / "config" / "ui_settings.json").write_text(json.dumps(settings | {"system_prompt": SYSTEM}))
    env = {**os.environ, "SPECCHAT_HOME": str(home), "PYTHONPATH": str(REPO / "app")}
    models = ["--target", str(MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"), "--threads", "1"]
    servers = {}  # one app per distinct set of constants and source, started before any answer
    for key in dict.fromkeys(server_key(v) for v in variants):
        constants, app = key
        launcher = (sys.executable, str(HERE / "patched_app.py"), *constants.split(), "--")
        log = args.out / f"server{len(servers)}.log"
        servers[key] = start_app(models, env | {"HF_HUB_OFFLINE": "1", "PYTHONPATH": app}, log, launcher)
    runs = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            for server, url in servers.values():
                one_answer(browser, url, server.pid, "base")  # untimed
            for r in range(args.rounds):
                for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
                    server, url = servers[server_key(v)]
                    run = one_answer(browser, url, server.pid, v) | {"round": r, "variant": v}
                    runs.append(run)
                    keys = ("tokens_per_s", "browser_cpu_per_s", "main_TaskDuration", "main_LayoutCount")
                    print(v, {k: round(run[k], 4) for k in keys}, flush=True)
            browser.close()
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait(30)
    (args.out / "runs.json").write_text(json.dumps(runs, indent=1))
    for v in variants:
        mine = [r for r in runs if r["variant"] == v]
        cols = ["browser_cpu_per_s", *(f"main_{m}" for m in METRICS), "tokens_per_s"]
        print(v, {c: round(statistics.median(r[c] for r in mine), 4) for c in cols})


if __name__ == "__main__":
    main()
