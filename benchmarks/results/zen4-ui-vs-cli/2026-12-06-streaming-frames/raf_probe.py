"""Which code asks the chat page for animation frames (2026-12-06, AMD EPYC Zen 4, 2 cores): the app with the Qwen
pair, a page opened while it loads; frames counted by the stack that asked for them, idle for 5 s, over an answer of
300 tokens (after Clear, as ui_vs_cli.py's answers are), idle again, a second answer.

python raf_probe.py OUT    (raf-before.json: at 652b3f3; raf-after.json: the Clear event's progress hidden)
"""

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path[:0] = [str(HERE.parent / "2026-12-06-where-the-chat-loses"), str(REPO / "benchmarks"), str(REPO / "tests")]
from ui_vs_cli import chat_run  # noqa: E402
from where import PROMPT, chat_page  # noqa: E402

# Svelte's animation loop asks for its frames through window.requestAnimationFrame as it is at each call, so a wrapper
# installed after load sees them (Gradio's status tracker keeps its own copy: its frames count from the app's pacing).
COUNT_BY_STACK = r"""() => {
  window.__raf = {};
  const request = window.requestAnimationFrame.bind(window);
  window.requestAnimationFrame = (callback) => {
    const stack = (new Error().stack || '').split('\n').slice(2, 9).map(s => s.trim()).join(' | ');
    window.__raf[stack] = (window.__raf[stack] || 0) + 1;
    return request(callback);
  };
}"""


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    windows = {}
    with chat_page(out, max_tokens=300) as (server, _, _, _, page):
        page.evaluate(COUNT_BY_STACK)
        for name in ("idle", "first", "idle2", "second"):
            if name.startswith("idle"):
                time.sleep(5)
            else:
                print(name, chat_run(page, PROMPT, server.pid), flush=True)
            windows[name] = page.evaluate("window.__raf")
            page.evaluate("window.__raf = {}")
    (out / "raf.json").write_text(json.dumps(windows, indent=1))
    for name, stacks in windows.items():
        print(name, sum(stacks.values()), "frames asked for")


if __name__ == "__main__":
    main()
