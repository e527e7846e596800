"""A/B in one process: plain decoding and variants of auto, order rotating, on the suite's categories named; per
category the median over repeats of total tokens / total time, each variant's as a ratio to plain's.

A scratch harness for a policy change, when replay.py's noise-free prices are not enough: a results folder's script
defines the variants (what to set before each run) and calls main().

    python benchmarks/results/FOLDER/ab.py TARGET DRAFT CATEGORIES REPEATS [MAX_TOKENS]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from collections.abc import Callable

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.models.catalog import cache_dir


def main(variants: dict[str, Callable[[], None]]) -> None:
    target, draft, categories, repeats = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
    max_tokens = int(sys.argv[5]) if len(sys.argv) > 5 else 128
    engine = Engine.load(target, draft, cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
    print(engine.draft_note, flush=True)
    cal = engine.calibration()
    print(f"t1 {cal.t1 * 1000:.1f} ms, c {cal.c:.2f}, r: " + ", ".join(f"{n}:{v:.2f}" for n, v in cal.r.items()))
    items = load_suite(BUILTIN, categories)
    totals: dict[tuple[str, str, int], list[float]] = defaultdict(lambda: [0, 0.0])  # tokens, seconds

    def run(item, variant: str) -> tuple[int, float]:
        if variant != "plain":
            variants[variant]()
        engine._auto = None  # a fresh conversation each run
        mode = "plain" if variant == "plain" else "auto"
        stats = list(engine.chat(item.messages, GenerationSettings(mode=mode, max_tokens=max_tokens)))[-1].stats
        return stats.tokens, stats.wall_s

    run(items[0], "plain")  # warm-up
    names = ["plain", *variants]
    for rep in range(repeats):
        for i, item in enumerate(items):
            turn = (rep + i) % len(names)
            for name in names[turn:] + names[:turn]:
                n, s = run(item, name)
                totals[name, item.category, rep][0] += n
                totals[name, item.category, rep][1] += s
                print(f"rep {rep} {item.id} {name}: {n} tokens, {n / s:.2f} tok/s", flush=True)
    for cat in categories:
        rate = {v: [totals[v, cat, r][0] / totals[v, cat, r][1] for r in range(repeats)] for v in names}
        line = f"{cat}: plain {statistics.median(rate['plain']):.2f} tok/s"
        for name in variants:
            ratios = [a / p for a, p in zip(rate[name], rate["plain"])]
            line += f"; {name} " + " ".join(f"{x:.2f}" for x in ratios) + f" (median {statistics.median(ratios):.2f}x)"
        print(line)
