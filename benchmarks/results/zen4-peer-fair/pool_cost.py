"""Does a pool of earlier answers slow auto where it drafts little? Translation and QA through auto with none and with
the answers to the suite's multi-turn, summaries and code generation prompts, interleaved with plain, 3 repeats.

    python benchmarks/results/zen4-peer-fair/pool_cost.py TARGET DRAFT
"""

import sys

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.engine.drafters import EarlierAnswers
from specchat.models.catalog import cache_dir

engine = Engine.load(sys.argv[1], sys.argv[2], cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
items = load_suite(BUILTIN, None)
pool = EarlierAnswers(engine.policy.earlier_tokens)
engine.answers = pool
for item in items:
    if item.category in ("multi_turn", "summarization", "code_generation"):
        list(engine.chat(item.messages, GenerationSettings(mode="plain", max_tokens=128)))
print("pool tokens", pool._size, flush=True)
configs = [("plain", None), ("auto", "empty"), ("auto", "pool")]
runs: dict[tuple, list] = {}
for rep in range(3):
    for item in (i for i in items if i.category in ("translation", "qa")):
        for config in configs[rep % 3 :] + configs[: rep % 3]:
            mode, which = config
            engine._auto = None
            engine.answers = pool if which == "pool" else EarlierAnswers(0)
            stats = list(engine.chat(item.messages, GenerationSettings(mode=mode, max_tokens=128)))[-1].stats
            runs.setdefault(config, []).append(stats)
for config, done in runs.items():
    tokens, wall = sum(s.tokens for s in done), sum(s.wall_s for s in done)
    per_step = sum(s.draft_s for s in done) / sum(s.iterations for s in done)
    drafted = sum(s.drafted for s in done)
    print(config, f"{tokens / wall:.2f} tok/s, draft_s per step {per_step * 1000:.3f} ms, drafted {drafted}")

# Output on AMD EPYC Zen 4 (family 25 model 17), 2 cores, 2026-12-06:
# pool tokens 1206
# ('plain', None) 28.09 tok/s, draft_s per step 0.006 ms, drafted 0
# ('auto', 'empty') 27.36 tok/s, draft_s per step 0.200 ms, drafted 78
# ('auto', 'pool') 28.01 tok/s, draft_s per step 0.225 ms, drafted 79
