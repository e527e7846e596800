"""Calibration as measure() times it now (t1 and c each after an untimed step) and as it did before (t1 right after
the previous round's batch of 32, c right after t1), interleaved, each beside what the loop's own order pays.

    python benchmarks/results/xeon-amx-calibration-order/calibration_order.py TARGET DRAFT [PAIRS]

The loop's order: three draft tokens, a target batch of 4 (a k = 3 verify), a plain step, eight times over; each
figure is a median. Not a policy: what the cost model's inputs read under each order.
"""

from __future__ import annotations

import statistics
import sys

from specchat.engine import Engine
from specchat.engine.calibration import BATCH_SIZES, K_LONG, TIMING_TEXT, decode_seconds, measure
from specchat.models.catalog import cache_dir


def measure_before(target, draft) -> tuple[float, dict[int, float], float]:
    """measure() as it was at befa100: a warm-up decode, then each round's t1 first, c right after it."""
    probe = target.tokenize(TIMING_TEXT)[: K_LONG + 1]
    for model in (target, draft):
        model.eval_prefix(target.tokenize(TIMING_TEXT))
        decode_seconds(model, probe[:1])
    t1s, cs, ratios = [], [], {n: [] for n in BATCH_SIZES}
    for _ in range(4):
        t1 = decode_seconds(target, probe[:1])
        t1s.append(t1)
        cs.append(decode_seconds(draft, probe[:1]) / t1)
        for n, measured in ratios.items():
            measured.append(decode_seconds(target, probe[:n]) / t1)
    med = statistics.median
    return med(t1s), {n: med(v) for n, v in ratios.items()}, med(cs)


def loop_order(target, draft) -> dict[str, float]:
    probe = target.tokenize(TIMING_TEXT)
    for model in (target, draft):
        model.eval_prefix(probe)
    rows: dict[str, list[float]] = {
        k: [] for k in ("draft 1st", "draft 2nd-3rd", "b4 after drafts", "plain after b4", "plain after plain")
    }
    for _ in range(8):
        rows["draft 1st"].append(decode_seconds(draft, probe[:1]))
        rows["draft 2nd-3rd"] += [decode_seconds(draft, probe[:1]), decode_seconds(draft, probe[:1])]
        rows["b4 after drafts"].append(decode_seconds(target, probe[:4]))
        rows["plain after b4"].append(decode_seconds(target, probe[:1]))
        rows["plain after plain"].append(decode_seconds(target, probe[:1]))
    return {k: statistics.median(v) for k, v in rows.items()}


def show(name: str, t1: float, r: dict[int, float], c: float) -> None:
    sizes = (2, 3, 4, 8, 16, 32)
    print(
        f"{name}: t1 {t1 * 1e3:.0f} ms, c {c:.3f} ({c * t1 * 1e3:.1f} ms), "
        + ", ".join(f"r({n}) {r[n]:.2f} ({r[n] * t1 * 1e3:.0f} ms)" for n in sizes),
        flush=True,
    )


def main() -> None:
    target, draft = sys.argv[1], sys.argv[2]
    pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    engine = Engine.load(target, draft, cpu_copy_dir=cache_dir())
    print(engine.draft_note, flush=True)
    t, d = engine.target, engine.draft
    for i in range(pairs):
        for name in ("now", "before") if i % 2 == 0 else ("before", "now"):
            if name == "now":
                cal = measure(t, d)
                show(f"{i + 1} now   ", cal.t1, cal.r, cal.c)
            else:
                show(f"{i + 1} before", *measure_before(t, d))
        loop = loop_order(t, d)
        t1 = loop["plain after plain"]
        print(f"{i + 1} loop's order: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in loop.items()))
        c_first, c_later = loop["draft 1st"] / t1, loop["draft 2nd-3rd"] / t1
        print(f"  so r(4) {loop['b4 after drafts'] / t1:.2f}, c {c_first:.3f} (1st), {c_later:.3f} (later)", flush=True)
    engine.close()


if __name__ == "__main__":
    main()
