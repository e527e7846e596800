"""What a first auto-mode load spends its time on, part by part, and what calibration's rounds buy.

    python benchmarks/first_load.py TARGET.gguf DRAFT.gguf [--rounds 8] [--json out.json]
    python benchmarks/first_load.py --analyze out.json

In a fresh cache folder (nothing kept from earlier runs): the draft's CPU copy (quantizing, then timing the file
against the copy), the two model loads, then calibration's parts as calibration.measure does them (reading the
timing text, each round), with every round's raw values kept. Then, for n rounds, over every choice of
n of them: how often a median r(n) is over 10% off the median of all rounds, and what the draft length the cost
model chooses from the n rounds' medians (costmodel.best_k, at a range of acceptances) loses in expected speedup
against the one it chooses from all rounds, priced at all rounds' costs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path

from specchat.engine.calibration import K_LONG, K_MAX, TIMING_TEXT, time_round
from specchat.engine.costmodel import best_k, interpolate_r, speedup
from specchat.engine.draft_copy import choose_draft
from specchat.engine.llama_backend import BackendConfig, LlamaModel

ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def timed(parts: dict[str, float], name: str, work):
    t0 = time.perf_counter()
    result = work()
    parts[name] = time.perf_counter() - t0
    print(f"{name}: {parts[name]:.1f} s", flush=True)
    return result


def median_calibration(rounds: list[dict]) -> tuple[dict[int, float], float]:
    """r(n) and c as calibration.measure makes them from these rounds: each the median over the rounds."""
    r = {n: statistics.median(one["r"][n] for one in rounds) for n in rounds[0]["r"]}
    return r, statistics.median(one["c"] for one in rounds)


def analyze(rounds: list[dict]) -> dict[int, dict[str, float]]:
    """For each number of rounds n, over every choice of n of the rounds: how often a median r(n) is more than 10% off
    the median over all rounds, and what the draft model's best length by those medians loses, at each of ALPHAS,
    against the best length by all rounds, in expected speedup at all rounds' costs."""
    ref_r, ref_c = median_calibration(rounds)
    ref_of = interpolate_r(ref_r)
    best = {alpha: best_k(alpha, ref_c, ref_of, K_MAX) for alpha in ALPHAS}
    print(f"all {len(rounds)} rounds: (best k, expected speedup) at acceptance {ALPHAS}:")
    print("  " + ", ".join(f"({k}, {s:.2f})" for k, s in best.values()))
    found = {}
    for n in range(2, len(rounds)):
        subsets = list(itertools.combinations(rounds, n))
        off, losses = 0, []
        for subset in subsets:
            r, c = median_calibration(list(subset))
            off += sum(abs(r[b] / ref_r[b] - 1) > 0.1 for b in r)
            r_of = interpolate_r(r)
            for alpha, (_, s) in best.items():
                losses.append(1 - speedup(alpha, best_k(alpha, c, r_of, K_MAX)[0], ref_c, ref_of) / s)
        found[n] = {
            "r_off_10pc": off / (len(subsets) * len(ref_r)),
            "mean_loss": statistics.mean(losses),
            "worst_loss": max(losses),
        }
        print(
            f"{n} rounds ({len(subsets)} choices): r(n) >10% off {found[n]['r_off_10pc']:.0%}, expected speedup lost "
            f"{found[n]['mean_loss']:.2%} on average, {found[n]['worst_loss']:.1%} at worst"
        )
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", type=Path, nargs="?")
    ap.add_argument("draft", type=Path, nargs="?")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--analyze", type=Path, help="only analyze the rounds of an earlier run's --json file")
    args = ap.parse_args()
    if args.analyze:
        rounds = json.loads(args.analyze.read_text())["rounds"]
        analyze([{**one, "r": {int(n): v for n, v in one["r"].items()}} for one in rounds])
        return
    config = BackendConfig()
    parts: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as cache:
        choice = timed(parts, "draft copy (quantize, then time)", lambda: choose_draft(args.draft, config, Path(cache)))
        target = timed(parts, "load target", lambda: LlamaModel(args.target, config))
        draft = timed(parts, "load draft", lambda: LlamaModel(choice.path, config))
        context = target.tokenize(TIMING_TEXT)
        probe = context[: K_LONG + 1]
        for name, model in (("target", target), ("draft", draft)):
            timed(parts, f"calibration: read the timing text ({name})", lambda m=model: m.eval_prefix(context))
        rounds = []
        for i in range(args.rounds):
            t0 = time.perf_counter()
            t1, c, r = time_round(target, draft, probe)
            rounds.append({"t1": t1, "c": c, "r": r})
            parts[f"calibration: round {i + 1}"] = time.perf_counter() - t0
            print(f"round {i + 1}: {parts[f'calibration: round {i + 1}']:.1f} s", flush=True)
        target.close()
        draft.close()
    report = {"parts_s": parts, "rounds": rounds, "by_rounds": analyze(rounds)}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
