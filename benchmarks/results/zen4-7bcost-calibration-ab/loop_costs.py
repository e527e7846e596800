"""What batches cost inside auto's loop, against plain decoding's steps in the same run and both calibrations.

    python benchmarks/results/zen4-7bcost-calibration-ab/loop_costs.py TARGET DRAFT CATEGORIES

Each prompt runs plain, then auto at calibration-peer-run.json (which drafts the most, so that many batch sizes
are seen); per batch size n, the mean verify time over all prompts, divided by the mean plain step of the same
prompts, beside r(n) of each calibration.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.engine.calibration import Calibration
from specchat.models.catalog import cache_dir

HERE = Path(__file__).parent


def main() -> None:
    target, draft, categories = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    engine = Engine.load(target, draft, cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
    cal = {n: Calibration.from_json((HERE / f"calibration-{n}.json").read_text()) for n in ("quiet", "peer-run")}
    seconds, calls = defaultdict(float), defaultdict(int)
    for item in load_suite(BUILTIN, categories):
        for mode in ("plain", "auto"):
            engine._calibration = cal["peer-run"]
            engine._auto = None
            engine.answers.clear()
            s = list(engine.chat(item.messages, GenerationSettings(mode, max_tokens=128)))[-1].stats
            for n, sec in s.verify_s_by_n.items():
                key = "plain" if mode == "plain" else n
                seconds[key] += sec
                calls[key] += s.verify_calls_by_n[n]
            print(f"{item.id} {mode}: {s.tokens} tokens, {s.tokens_per_s:.2f} tok/s", flush=True)
    step = seconds["plain"] / calls["plain"]
    print(
        f"plain step {step * 1000:.1f} ms over {calls['plain']} steps; calibrations' t1: "
        + ", ".join(f"{k} {c.t1 * 1000:.1f} ms" for k, c in cal.items())
    )
    print("n  calls  in the loop  r(n) quiet  r(n) peer-run")
    for n in sorted(k for k in calls if k != "plain"):
        print(
            f"{n:2d} {calls[n]:5d} {seconds[n] / calls[n] / step:8.2f} {cal['quiet'].r.get(n, float('nan')):10.2f}"
            f" {cal['peer-run'].r.get(n, float('nan')):10.2f}"
        )


if __name__ == "__main__":
    main()
