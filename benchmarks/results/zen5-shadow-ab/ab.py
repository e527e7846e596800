"""A/B in one process: plain, auto without shadow judging ('before'), auto with it ('after'), alternating order,
on the suite's categories named; per category the median over repeats of total tokens / total time."""
import statistics
import sys
from collections import defaultdict

from specchat.bench import BUILTIN, load_suite
from specchat.catalog import cache_dir
from specchat.engine import Engine, GenerationSettings
from specchat.engine.adaptive import AutoDrafter

target, draft, categories, repeats = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
engine = Engine.load(target, draft, cpu_copy_dir=cache_dir())
print(engine.draft_note, flush=True)
judge = AutoDrafter._judge_shadow
items = load_suite(BUILTIN, categories)
totals = defaultdict(lambda: [0, 0.0])  # (variant, category, repeat) -> tokens, seconds


def run(item, variant):
    AutoDrafter._judge_shadow = judge if variant == "after" else (lambda self, context: None)
    engine._auto = None  # a fresh conversation each run
    mode = "plain" if variant == "plain" else "auto"
    events = list(engine.chat(item.messages, GenerationSettings(mode=mode, max_tokens=128)))
    stats = events[-1].stats
    return stats.tokens, stats.wall_s


engine.calibration()
run(items[0], "plain")  # warm-up
variants = ["plain", "before", "after"]
for rep in range(repeats):
    for i, item in enumerate(items):
        order = variants[(rep + i) % 3 :] + variants[: (rep + i) % 3]
        for v in order:
            n, s = run(item, v)
            totals[v, item.category, rep][0] += n
            totals[v, item.category, rep][1] += s
            print(f"rep {rep} {item.id} {v}: {n / s:.2f} tok/s", flush=True)
for cat in categories:
    rate = {v: [totals[v, cat, r][0] / totals[v, cat, r][1] for r in range(repeats)] for v in variants}
    ratios = {v: [a / p for a, p in zip(rate[v], rate["plain"])] for v in ("before", "after")}
    print(
        f"{cat}: plain {statistics.median(rate['plain']):.2f} tok/s; before "
        + " ".join(f"{x:.2f}" for x in ratios["before"])
        + f" (median {statistics.median(ratios['before']):.2f}x); after "
        + " ".join(f"{x:.2f}" for x in ratios["after"])
        + f" (median {statistics.median(ratios['after']):.2f}x)"
    )
