"""Auto at two calibrations of the same pair, with plain decoding, in one process, order rotating prompt by prompt.

    python benchmarks/results/zen4-7bcost-calibration-ab/calibration_ab.py TARGET DRAFT CATEGORIES REPEATS

The calibrations are this folder's JSON files: calibration-quiet.json (measured on a quiet machine) and
calibration-peer-run.json (the one zen4-peer-llama-server-7bcost measured and ran at, whose batches read cheaper).
Each variant is auto deciding at that calibration; the machine's real costs are whatever they are.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.engine.calibration import Calibration
from specchat.models.catalog import cache_dir

HERE = Path(__file__).parent


def main() -> None:
    target, draft, categories, repeats = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
    engine = Engine.load(target, draft, cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
    calibrations = {
        name: Calibration.from_json((HERE / f"calibration-{name}.json").read_text()) for name in ("quiet", "peer-run")
    }
    items = load_suite(BUILTIN, categories)
    names = ["plain", *(f"auto@{n}" for n in calibrations)]
    totals: dict[tuple[str, str, int], list[float]] = defaultdict(lambda: [0, 0.0])

    def run(item, name: str) -> tuple[int, float, int, int]:
        if name != "plain":
            engine._calibration = calibrations[name.removeprefix("auto@")]
        engine._auto = None
        engine.answers.clear()
        settings = GenerationSettings("plain" if name == "plain" else "auto", max_tokens=128)
        s = list(engine.chat(item.messages, settings))[-1].stats
        return s.tokens, s.wall_s, s.drafted, s.accepted

    run(items[0], "plain")
    for rep in range(repeats):
        for i, item in enumerate(items):
            turn = (rep + i) % len(names)
            for name in names[turn:] + names[:turn]:
                n, sec, drafted, accepted = run(item, name)
                totals[name, item.category, rep][0] += n
                totals[name, item.category, rep][1] += sec
                print(f"rep {rep} {item.id} {name}: {n} tokens, {n / sec:.2f} tok/s, {accepted}/{drafted}", flush=True)
    for cat in categories:
        rate = {v: [totals[v, cat, r][0] / totals[v, cat, r][1] for r in range(repeats)] for v in names}
        line = f"{cat}: plain {statistics.median(rate['plain']):.2f} tok/s"
        for name in names[1:]:
            ratios = [a / p for a, p in zip(rate[name], rate["plain"])]
            line += f"; {name} " + " ".join(f"{x:.2f}" for x in ratios) + f" (median {statistics.median(ratios):.2f}x)"
        print(line)


if __name__ == "__main__":
    main()
