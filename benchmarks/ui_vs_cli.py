"""The chat tab against the CLI: tokens/s of an answer streamed through `specchat ui` in Chromium and of the same
answer made by `specchat generate --chat`, same prompt, settings, seed and machine, in one run.

The app stays up for the whole run, in a specchat home of its own (default settings but for those given here),
which `generate` shares so that it finds auto mode's calibration and the draft's CPU copy the app made. Repeat by
repeat the two run back to back, the order alternating. Each side's rate is the engine's own (Stats: generation
only, the prompt left out; the app's stats card, the CLI's --json stats); the page's own is tokens after the first
it showed over the time until the last, as the browser saw them. The CPU time of the app's process and of the
browser's processes (utime + stime in /proc) is taken before and after each answer, and given per token.

    python benchmarks/ui_vs_cli.py [--target T.gguf --draft D.gguf] [--mode auto] [--max-tokens 500] [--repeats 3]
        [--threads N] [--overlay on|off] [--app-path OTHER/app] [--out ui_vs_cli]

--app-path runs both sides from another checkout's app/ folder (e.g. main's, for "before"). Run it on a quiet
machine: anything else running moves both sides' rates.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from api_vs_cli import cli_run
from playwright.sync_api import Page, sync_playwright

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from helpers import CHROMIUM, CHROMIUM_ARGS, process_cpu_s  # noqa: E402  (the browser flags the UI tests use)

MODELS = Path.home() / ".cache" / "spec-test-models"
PROMPT = "Write a Python function that reverses a linked list."
SYSTEM = "You are a helpful assistant."
SETTLED = ("done", "stopped", "error")
# How often the benchmark looks whether the answer has ended: the end is timed by RECORDER, so this only delays
# reading the CPU counters, by an idle page's share.
ANSWER_POLL_MS = 500

# Records (time, status state, tokens stat) at every change the page shows.
RECORDER = """() => {
  window.__seen = [];
  const look = () => {
    const status = document.querySelector('#sc-status .sc-status');
    const tokens = document.querySelector('#sc-stats [data-stat="tokens"]');
    const entry = [performance.now(), status ? status.dataset.state : '', tokens ? Number(tokens.textContent) : 0];
    const last = window.__seen[window.__seen.length - 1];
    if (!last || last[1] !== entry[1] || last[2] !== entry[2]) window.__seen.push(entry);
  };
  // One observer a page: each run's own, left observing, would make every later run's page do the work again.
  if (window.__observer) window.__observer.disconnect();
  window.__observer = new MutationObserver(look);
  window.__observer.observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
  look();
}"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=str(MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    p.add_argument("--draft", default=str(MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    p.add_argument("--mode", default="auto")
    p.add_argument("--k", type=int, default=4, help="draft length of speculative and lookup modes")
    p.add_argument("--max-tokens", type=int, default=500)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, help="CPU threads for both (default: all cores)")
    p.add_argument("--overlay", choices=["on", "off"], default="on", help="the chat's token overlay")
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--app-path", default=str(REPO / "app"), help="the app/ folder both sides run from")
    p.add_argument("--out", default="ui_vs_cli", help="folder for results.json and summary.md")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = ["--target", args.target, *(["--draft", args.draft] if args.draft else [])]
    models += ["--threads", str(args.threads)] if args.threads else []
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": args.prompt}]
    home = Path(tempfile.mkdtemp(prefix="specchat-ui-vs-cli-"))
    (home / "config").mkdir()
    settings = {"mode": args.mode, "k": args.k, "temperature": 0.0, "seed": 0, "max_tokens": args.max_tokens}
    settings |= {"overlay": args.overlay == "on", "system_prompt": SYSTEM}
    (home / "config" / "ui_settings.json").write_text(json.dumps(settings))
    env = {**os.environ, "SPECCHAT_HOME": str(home), "PYTHONPATH": args.app_path, "HF_HUB_OFFLINE": "1"}
    server, url = start_app(models, env, out / "server.log")
    runs = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=1_800_000)
            header = page.locator("#sc-model").inner_text()
            print(header, flush=True)
            for repeat in range(args.repeats):
                run = {"repeat": repeat, "first": "chat" if repeat % 2 == 0 else "cli"}
                for side in ("chat", "cli") if repeat % 2 == 0 else ("cli", "chat"):
                    if side == "chat":
                        run["chat"] = chat_run(page, args.prompt, server.pid)
                    else:
                        run["cli"] = measured_cli_run(models, messages, args, env)
                run["ratio"] = run["chat"]["tokens_per_s"] / run["cli"]["tokens_per_s"]
                runs.append(run)
                print(
                    f"rep {repeat}: cli {run['cli']['tokens_per_s']:.2f}, chat {run['chat']['tokens_per_s']:.2f} "
                    f"(page {run['chat']['page_tokens_per_s']:.2f}) tok/s, ratio {run['ratio']:.3f}, "
                    f"{run['chat']['tokens']} / {run['cli']['tokens']} tokens",
                    flush=True,
                )
            browser.close()
    finally:
        server.terminate()
        server.wait(30)
    summary = summarize(runs)
    result = {"settings": vars(args), "header": header, "summary": summary, "runs": runs}
    (out / "results.json").write_text(json.dumps(result, indent=1))
    (out / "summary.md").write_text(markdown(args, header, summary, runs))
    print((out / "summary.md").read_text())
    return 0


def start_app(
    models: list[str], env: dict[str, str], log: Path, specchat: tuple[str, ...] = (sys.executable, "-m", "specchat")
) -> tuple[subprocess.Popen, str]:
    """`specchat ui` on a free port, its output in log; returned once the page answers (the models may still load)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [*specchat, "ui", "--no-browser", "--port", str(port), *models]
    with log.open("w") as output:
        server = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    while True:
        if server.poll() is not None:
            raise SystemExit(f"specchat ui exited with {server.returncode}: see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return server, url
        except OSError:
            time.sleep(0.5)


def chat_run(page: Page, prompt: str, server_pid: int) -> dict:
    """One answer in a new conversation of the chat tab, read from the page."""
    page.click("#sc-clear")
    page.wait_for_selector("#sc-stats .sc-stats-empty")  # the conversation is cleared
    page.evaluate(RECORDER)
    page.fill("#sc-input textarea", prompt)
    server, browser = process_cpu_s([server_pid]), process_cpu_s(browser_pids())
    page.click("#sc-send")
    page.wait_for_function(
        "ends => { const seen = window.__seen; const start = seen.findIndex(([, state]) => state === 'generating');"
        " return start >= 0 && seen.slice(start).some(([, state]) => ends.includes(state)); }",
        arg=list(SETTLED),
        # Not Playwright's default, which asks for every animation frame: that made the page render 60 frames a
        # second for the whole answer, the browser's CPU time charged to the chat.
        polling=ANSWER_POLL_MS,
        timeout=3_600_000,
    )
    server, browser = process_cpu_s([server_pid]) - server, process_cpu_s(browser_pids()) - browser
    seen = page.evaluate("window.__seen")
    state = seen[-1][1]
    if state != "done":
        raise SystemExit(f"the chat's answer ended {state!r}: {page.locator('#sc-status').inner_text()}")
    tokens = int(page.locator('#sc-stats [data-stat="tokens"]').inner_text())
    shown = [(t, n) for t, _, n in seen if n > 0]
    (t0, n0), (t1, n1) = shown[0], shown[-1]
    return {
        "tokens": tokens,
        "tokens_per_s": float(page.locator('#sc-stats [data-stat="tokens_per_s"]').inner_text()),
        "page_tokens_per_s": (n1 - n0) / (t1 - t0) * 1000 if t1 > t0 else 0.0,
        "page_updates": len(shown),
        "server_cpu_s_per_token": server / tokens,
        "browser_cpu_s_per_token": browser / tokens,
        "strategy": page.locator('#sc-stats [data-stat="strategy"]').inner_text(),
    }


def measured_cli_run(models: list[str], messages: list[dict], args: argparse.Namespace, env: dict) -> dict:
    """cli_run, with the CPU time of the `specchat generate` process (load included) per token."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = cli_run(models, messages, args.mode, args, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {**run, "process_cpu_s_per_token": cpu / run["tokens"]}


def browser_pids() -> list[int]:
    """The Chromium processes this process started (through Playwright's driver)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # gone since the listing
                continue
            name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
            names[int(entry.name)] = name
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return [pid for pid in found if names.get(pid, "").startswith(("chromium", "chrome"))]


def summarize(runs: list[dict]) -> dict:
    return {
        "repeats": len(runs),
        "cli_tokens_per_s": statistics.median(r["cli"]["tokens_per_s"] for r in runs),
        "chat_tokens_per_s": statistics.median(r["chat"]["tokens_per_s"] for r in runs),
        "page_tokens_per_s": statistics.median(r["chat"]["page_tokens_per_s"] for r in runs),
        "ratio_median": statistics.median(r["ratio"] for r in runs),
        "ratio_min": min(r["ratio"] for r in runs),
        "same_tokens": sum(r["chat"]["tokens"] == r["cli"]["tokens"] for r in runs),
        "server_cpu_s_per_token": statistics.median(r["chat"]["server_cpu_s_per_token"] for r in runs),
        "browser_cpu_s_per_token": statistics.median(r["chat"]["browser_cpu_s_per_token"] for r in runs),
        "cli_process_cpu_s_per_token": statistics.median(r["cli"]["process_cpu_s_per_token"] for r in runs),
    }


def markdown(args: argparse.Namespace, header: str, summary: dict, runs: list[dict]) -> str:
    lines = [
        "# The chat tab against `specchat generate`",
        "",
        f"`{' '.join(sys.argv[1:])}`; app from `{args.app_path}`; the page's header: {header}",
        "",
        "| repeat | first | CLI tok/s | chat tok/s | page tok/s | chat / CLI | tokens (chat / CLI) "
        "| server CPU s/token | browser CPU s/token | CLI process CPU s/token |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        chat, cli = r["chat"], r["cli"]
        lines.append(
            f"| {r['repeat']} | {r['first']} | {cli['tokens_per_s']:.2f} | {chat['tokens_per_s']:.2f} "
            f"| {chat['page_tokens_per_s']:.2f} | {r['ratio']:.3f} | {chat['tokens']} / {cli['tokens']} "
            f"| {chat['server_cpu_s_per_token']:.4f} | {chat['browser_cpu_s_per_token']:.4f} "
            f"| {cli['process_cpu_s_per_token']:.4f} |"
        )
    s = summary
    lines += [
        "",
        f"Medians over {s['repeats']} repeats: CLI {s['cli_tokens_per_s']:.2f} tok/s, chat {s['chat_tokens_per_s']:.2f}"
        f" (page {s['page_tokens_per_s']:.2f}), chat / CLI {s['ratio_median']:.3f} (lowest {s['ratio_min']:.3f});"
        f" same token count in {s['same_tokens']} of {s['repeats']}; CPU s per token: server"
        f" {s['server_cpu_s_per_token']:.4f}, browser {s['browser_cpu_s_per_token']:.4f}, CLI process"
        f" {s['cli_process_cpu_s_per_token']:.4f} (its load included).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
