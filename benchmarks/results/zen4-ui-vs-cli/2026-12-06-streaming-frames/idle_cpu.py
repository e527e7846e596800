"""An idle chat page's browser CPU (2026-12-06, AMD EPYC Zen 4, 2 cores): the app with the Qwen pair, one page, left
10 s once the model is ready, then its browser's CPU time over 40 s, in cores.

python idle_cpu.py OUT    (run on the app with the tracker paced at 10 and at 1 a second: see the README row)
"""

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path[:0] = [str(HERE.parent / "2026-12-06-where-the-chat-loses"), str(REPO / "benchmarks"), str(REPO / "tests")]
from ui_vs_cli import browser_pids  # noqa: E402
from where import chat_page  # noqa: E402

from helpers import process_cpu_s  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with chat_page(out, max_tokens=300):
        time.sleep(10)
        cpu, start = process_cpu_s(browser_pids()), time.perf_counter()
        time.sleep(40)
        print("idle page, browser cores:", (process_cpu_s(browser_pids()) - cpu) / (time.perf_counter() - start))


if __name__ == "__main__":
    main()
