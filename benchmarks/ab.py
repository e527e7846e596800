"""A/B in one process: plain decoding and variants of auto's policy, order rotating, on the suite's categories named;
per category the median over repeats of total tokens / total time, each variant's as a ratio to plain's.

For a policy change when replay.py's noise-free prices are not enough. Each variant is a name and the fields of
AutoPolicy (engine/policy.py) that differ from DEFAULT_POLICY, as a JSON object; with none, auto as it is:

    python benchmarks/ab.py TARGET DRAFT CATEGORIES REPEATS [MAX_TOKENS] [--temperature T] \\
        [--variant before '{"judge_shadow": false}' --variant after '{}']

Sampled (--temperature above 0), every variant of a prompt draws with the same seed, the repeat's (as specchat bench).

A results folder's script may name its variants in Python and call main(variants).
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import DEFAULT_POLICY, AutoPolicy, Engine, GenerationSettings, SamplingParams
from specchat.models.catalog import cache_dir


def main(variants: dict[str, AutoPolicy] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target")
    ap.add_argument("draft")
    ap.add_argument("categories", type=lambda s: s.split(","))
    ap.add_argument("repeats", type=int)
    ap.add_argument("max_tokens", type=int, nargs="?", default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--variant", nargs=2, action="append", default=[], metavar=("NAME", "POLICY_JSON"))
    args = ap.parse_args()
    variants = dict(variants or {})
    for name, text in args.variant:
        try:
            variants[name] = DEFAULT_POLICY.with_changes(text)
        except ValueError as e:
            ap.error(f"--variant {name}: {e}")
    if "plain" in variants:
        ap.error("plain is the baseline: name the variants otherwise")
    variants = variants or {"auto": DEFAULT_POLICY}

    engine = Engine.load(args.target, args.draft, cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
    print(engine.draft_note, flush=True)
    cal = engine.calibration()
    print(f"t1 {cal.t1 * 1000:.1f} ms, c {cal.c:.2f}, r: " + ", ".join(f"{n}:{v:.2f}" for n, v in cal.r.items()))
    items = load_suite(BUILTIN, args.categories)
    sampling = SamplingParams(args.temperature)
    totals: dict[tuple[str, str, int], list[float]] = defaultdict(lambda: [0, 0.0])  # tokens, seconds

    def run(item, variant: str, rep: int = 0) -> tuple[int, float]:
        if variant != "plain":
            engine.policy = variants[variant]
        engine._auto = None  # a fresh conversation each run
        engine.answers.clear()  # and no earlier answers: each prompt on its own
        mode = "plain" if variant == "plain" else "auto"
        settings = GenerationSettings(mode, sampling=sampling, seed=rep, max_tokens=args.max_tokens)
        stats = list(engine.chat(item.messages, settings))[-1].stats
        return stats.tokens, stats.wall_s

    run(items[0], "plain")  # warm-up
    names = ["plain", *variants]
    for rep in range(args.repeats):
        for i, item in enumerate(items):
            turn = (rep + i) % len(names)
            for name in names[turn:] + names[:turn]:
                n, s = run(item, name, rep)
                totals[name, item.category, rep][0] += n
                totals[name, item.category, rep][1] += s
                print(f"rep {rep} {item.id} {name}: {n} tokens, {n / s:.2f} tok/s", flush=True)
    for cat in args.categories:
        rate = {v: [totals[v, cat, r][0] / totals[v, cat, r][1] for r in range(args.repeats)] for v in names}
        line = f"{cat}: plain {statistics.median(rate['plain']):.2f} tok/s"
        for name in variants:
            ratios = [a / p for a, p in zip(rate[name], rate["plain"])]
            line += f"; {name} " + " ".join(f"{x:.2f}" for x in ratios) + f" (median {statistics.median(ratios):.2f}x)"
        print(line)


if __name__ == "__main__":
    main()
