"""specchat's engine alone on suite prompts, plain and auto alternating: each target decode timed, as multiples of
the run's median single decode.

    python3 benchmarks/results/zen4-peer-suite-3x/steps.py TARGET.gguf DRAFT.gguf summarize-1 3 > steps.txt
"""

import statistics
import sys
import time

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.engine.llama_backend import LlamaModel
from specchat.models.catalog import cache_dir

target_path, draft_path, prompt_ids, repeats = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
engine = Engine.load(target_path, draft_path, cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
decodes: list[tuple[int, float]] = []
untimed = LlamaModel.decode


def timed(model, tokens, *args, **kwargs):
    start = time.perf_counter()
    logits = untimed(model, tokens, *args, **kwargs)
    if model is engine.target:
        decodes.append((len(tokens), time.perf_counter() - start))
    return logits


LlamaModel.decode = timed
items = {item.id: item for item in load_suite(BUILTIN)}
for _ in range(repeats):
    for prompt_id in prompt_ids:
        for mode in ("plain", "auto"):
            decodes.clear()
            tokens = list(engine.chat(items[prompt_id].messages, GenerationSettings(mode, max_tokens=128)))
            stats = engine.last_stats
            t1 = statistics.median(s for n, s in decodes if n == 1)
            speed = stats.tokens / stats.wall_s
            print(f"{prompt_id} {mode}: {len(tokens)} tokens, {speed:.1f} tok/s, t1 {t1 * 1000:.1f} ms")
            if mode == "auto":
                batches = " ".join(f"{n}:{s * 1000:.0f}({s / t1:.1f})" for n, s in decodes)
                print("   batches (tokens: ms, multiple of t1):", batches)
