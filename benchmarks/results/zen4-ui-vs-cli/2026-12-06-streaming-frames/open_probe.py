"""The frames a page asks for once it is open (2026-12-06, AMD EPYC Zen 4, 2 cores): the app with the Qwen pair, a
first page open until the model is ready, then a second page, its frames counted second by second from ready.

python open_probe.py OUT
"""

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path[:0] = [str(HERE.parent / "2026-12-06-where-the-chat-loses"), str(REPO / "benchmarks"), str(REPO / "tests")]
from where import READY, chat_page  # noqa: E402

COUNT = """window.__frames = []; const request = window.requestAnimationFrame.bind(window);
window.requestAnimationFrame = (cb) => { window.__frames.push(performance.now() | 0); return request(cb); };"""


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with chat_page(out, max_tokens=300) as (_, url, _, browser, _):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.add_init_script(COUNT)
        page = context.new_page()
        page.goto(url)
        page.wait_for_selector(READY)
        ready = page.evaluate("performance.now()")
        time.sleep(8)
        frames = page.evaluate("window.__frames")
        per_s = [sum(ready + 1000 * s <= f < ready + 1000 * (s + 1) for f in frames) for s in range(8)]
        print("frames before ready:", sum(f < ready for f in frames), "per second after:", per_s)


if __name__ == "__main__":
    main()
