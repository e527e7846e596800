"""What could prompt lookup give at best, here? Hindsight-perfect lookup over the plain greedy answers.

    python benchmarks/lookup_ceiling.py TARGET.gguf [DRAFT.gguf] [--categories code_editing] [--max-tokens 128]

Decodes each suite prompt plainly (greedy), then replays the answer: at every position it takes the n-gram
match auto mode would find (2 to 8 tokens) and, knowing which of its tokens the target will accept, drafts
exactly the length that costs least per token with this machine's calibrated r(n), or decodes plainly when
none is right. No real policy beats this: failed drafts cost nothing here. Compare it with the `auto` rows of
`specchat bench` to see how much of what is physically possible auto gets.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from specchat.bench import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.engine.adaptive import LOOKUP_BANDS
from specchat.engine.calibration import K_MAX
from specchat.engine.costmodel import interpolate_r
from specchat.engine.drafters import LookupDrafter


def ceiling_cost(prompt: list[int], answer: list[int], r, n_vocab: int) -> float:
    """Target steps (units of t1) that hindsight-perfect lookup needs for answer."""
    lookup = LookupDrafter(n_vocab, ngram_max=LOOKUP_BANDS[-1], ngram_min=LOOKUP_BANDS[0])
    t, steps = 0, 0.0
    while t < len(answer):
        found = lookup.find(prompt + answer[:t], K_MAX)
        right = 0
        for drafted, real in zip(found, answer[t:]):
            if drafted != real:
                break
            right += 1
        # Cheapest per token among the lengths that are all right (a plain step costs 1 per token).
        k, per_token = min(((k, r(k + 1) / (k + 1)) for k in range(right + 1)), key=lambda kp: kp[1])
        lookup.observe(k, k)
        steps += r(k + 1)
        t += k + 1
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
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for item in load_suite(args.suite, args.categories):
        prompt = engine.chat_prompt(item.messages)
        settings = GenerationSettings(mode="plain", max_tokens=args.max_tokens)
        answer = [event.token for event in engine.generate_tokens(prompt, settings)]
        steps = ceiling_cost(prompt, answer, r, engine.target.n_vocab)
        print(f"{item.id}: {len(answer)} tokens, ceiling {len(answer) / steps:.2f}x plain", flush=True)
        for key in (item.category, "all"):
            totals[key][0] += len(answer)
            totals[key][1] += steps
    for key, (tokens, steps) in totals.items():
        print(f"{key}: ceiling {tokens / steps:.2f}x plain")


if __name__ == "__main__":
    main()
