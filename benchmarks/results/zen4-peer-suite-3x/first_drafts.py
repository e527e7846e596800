"""What auto drafted, step by step, on suite prompts (a fresh engine, no earlier answers): where in the answer, why,
and the first drafted tokens.

    python3 benchmarks/results/zen4-peer-suite-3x/first_drafts.py TARGET.gguf DRAFT.gguf qa-1,math-1 > first_drafts.txt
"""

import sys

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.engine.adaptive import AutoDrafter
from specchat.models.catalog import cache_dir

engine = Engine.load(sys.argv[1], sys.argv[2], cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
drafted: list[tuple[int, str, list[bytes]]] = []
propose = AutoDrafter.propose


def logged(drafter, context, k, params, rng):
    proposal = propose(drafter, context, k, params, rng)
    if proposal.tokens:
        drafted.append((len(context), proposal.reason, [engine.target.piece(t) for t in proposal.tokens[:4]]))
    return proposal


AutoDrafter.propose = logged
items = {item.id: item for item in load_suite(BUILTIN)}
for prompt_id in sys.argv[3].split(","):
    drafted.clear()
    prompt = engine.chat_prompt(items[prompt_id].messages)
    tokens = list(engine.generate_tokens(prompt, GenerationSettings("auto", max_tokens=128)))
    print(f"{prompt_id}: {len(tokens)} tokens")
    for at, reason, first in drafted:
        print(f"   at answer token {at - len(prompt)}: {reason}; drafted {first}...")
