"""What could prompt lookup give at best, here? Hindsight-perfect lookup over the plain greedy answers.

    python benchmarks/lookup_ceiling.py TARGET.gguf [DRAFT.gguf] [--categories code_editing] [--max-tokens 128]

Decodes each suite prompt plainly (greedy), then replays the answer: at every position it takes the n-gram
match auto mode would find (2 to 8 tokens) and, knowing which of its tokens the target will accept, drafts
exactly the length that costs least per token with this machine's calibrated r(n), or decodes plainly when
none is right. No real policy beats this: failed drafts cost nothing here. Beside it, the same answers
replayed through auto mode's own policy (prompt lookup only, steps costing what r(n) says): a noise-free,
seconds-long check of a policy change before a real `specchat bench`, whose `auto` rows it should track.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from specchat.bench import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.engine.adaptive import AutoDrafter, auto_lookup
from specchat.engine.calibration import K_MAX, Calibration
from specchat.engine.costmodel import interpolate_r
from specchat.engine.sampling import SamplingParams


def _right(drafts: list[int], answer: list[int]) -> int:
    """How many of the drafts the target accepts: greedy decoding would have said the answer's tokens."""
    n = 0
    while n < len(drafts) and n < len(answer) and drafts[n] == answer[n]:
        n += 1
    return n


def ceiling_cost(prompt: list[int], answer: list[int], r, n_vocab: int) -> float:
    """Target steps (units of t1) that hindsight-perfect lookup needs for answer."""
    lookup = auto_lookup(n_vocab)
    t, steps = 0, 0.0
    while t < len(answer):
        right = _right(lookup.find(prompt + answer[:t], K_MAX), answer[t:])
        # Cheapest per token among the lengths that are all right (a plain step costs 1 per token).
        k = min(range(right + 1), key=lambda k: r(k + 1) / (k + 1))
        lookup.observe(k, k)
        steps += r(k + 1)
        t += k + 1
    return steps


def replayed_cost(prompt: list[int], answer: list[int], calibration: Calibration, n_vocab: int) -> float:
    """Target steps (units of t1) that auto mode's policy, drafting by prompt lookup only, takes for answer."""
    auto = AutoDrafter(calibration, auto_lookup(n_vocab), None)
    t, steps = 0, 0.0
    while t < len(answer):
        drafts, _ = auto.propose(prompt + answer[:t], min(K_MAX, len(answer) - t), SamplingParams(), None)
        accepted, cost = _right(drafts, answer[t:]), auto.r(len(drafts) + 1)
        auto.observe(len(drafts), accepted, 0.0, cost * calibration.t1)
        steps += cost
        t += accepted + 1
    return steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("draft", nargs="?")
    ap.add_argument("--suite", default=BUILTIN)
    ap.add_argument("--categories", type=lambda s: s.split(","))
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args()
    engine = Engine.load(args.target, args.draft)
    cal = engine.calibration()
    r = interpolate_r(cal.r)
    print("r(n): " + ", ".join(f"r({n}) = {r(n):.2f}" for n in range(2, K_MAX + 2)))
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for item in load_suite(args.suite, args.categories):
        prompt = engine.chat_prompt(item.messages)
        settings = GenerationSettings(mode="plain", max_tokens=args.max_tokens)
        answer = [event.token for event in engine.generate_tokens(prompt, settings)]
        best = ceiling_cost(prompt, answer, r, engine.target.n_vocab)
        replayed = replayed_cost(prompt, answer, cal, engine.target.n_vocab)
        n = len(answer)
        print(f"{item.id}: {n} tokens, ceiling {n / best:.2f}x plain, auto replayed {n / replayed:.2f}x", flush=True)
        for key in (item.category, "all"):
            totals[key][0] += n
            totals[key][1] += best
            totals[key][2] += replayed
    for key, (n, best, replayed) in totals.items():
        print(f"{key}: ceiling {n / best:.2f}x plain, auto replayed {n / replayed:.2f}x")


if __name__ == "__main__":
    main()
