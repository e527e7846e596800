"""What a seeded answer that repeats in every mode would cost: at each position of the suite's sampled plain answers
(temperature 0.7, 64 tokens, seed 1), the chance that a draft token passes

- as now: drawn from the draft's distribution and judged by rejection sampling, sum(min(p_target, p_draft));
- as llama-server drafts by default: the draft's most likely token, kept where the target's own draw equals it,
  p_target(argmax p_draft). One draw of the target per token emitted, whatever was drafted, would make a seeded
  answer the same text in every mode.

    python benchmarks/results/zen4-seed-acceptance/accept.py TARGET.gguf DRAFT.gguf > results.txt

No timings: the numbers are properties of the pair, not of the machine.
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.engine.sampling import SamplingParams, probabilities
from specchat.models.catalog import cache_dir

PARAMS = SamplingParams(0.7)


def main() -> None:
    engine = Engine.load(sys.argv[1], sys.argv[2], cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
    sums: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(3))
    for item in load_suite(BUILTIN):
        prompt = engine.chat_prompt(item.messages)
        settings = GenerationSettings("plain", max_tokens=64, sampling=PARAMS, seed=1)
        answer = [event.token for event in engine.generate_tokens(prompt, settings)]
        read = [prompt[-1], *answer[:-1]]
        engine.target.hold(prompt[:-1])
        target_rows = engine.target.decode(read, all_logits=True)
        engine.draft.eval_prefix(prompt[:-1])
        draft_rows = engine.draft.decode(read, all_logits=True)
        for target_logits, draft_logits in zip(target_rows, draft_rows):
            p_target = probabilities(target_logits, PARAMS)
            p_draft = probabilities(draft_logits[: p_target.size], PARAMS)
            sums[item.category] += [1, np.minimum(p_target, p_draft).sum(), p_target[int(np.argmax(p_draft))]]
    n, sampled, argmax = sum(sums.values())
    print(f"T=0.7: {int(n)} positions: sampled drafts {sampled / n:.3f}, argmax drafts {argmax / n:.3f}")
    for category, (n, sampled, argmax) in sums.items():
        print(f"   {category}: {sampled / n:.3f} vs {argmax / n:.3f}")


if __name__ == "__main__":
    main()
