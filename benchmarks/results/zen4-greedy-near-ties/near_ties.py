"""Where two greedy answers to the same prompt part: plain against plain, auto and lookup, with the KV cache as the
engine leaves it (the prompt's common prefix with the cache reused) or dropped before each run ("cleared").

    python benchmarks/results/zen4-greedy-near-ties/near_ties.py TARGET DRAFT
"""

import sys

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.engine.drafters import EarlierAnswers
from specchat.models.catalog import cache_dir

engine = Engine.load(sys.argv[1], sys.argv[2], cpu_copy_dir=cache_dir(), cache_dir=cache_dir())


def answer(item, mode: str, cleared: bool = False) -> list[int]:
    engine._auto = None
    engine.answers = EarlierAnswers(0)
    if cleared:
        engine.target.rollback(0)
    settings = GenerationSettings(mode=mode, k=4, max_tokens=128)
    return [event.token for event in engine.chat(item.messages, settings)]


def parted(x: list[int], y: list[int]) -> int | None:
    """The first position where two answers differ; None where they are the same."""
    at = next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), None)
    return at if at is not None or len(x) == len(y) else min(len(x), len(y))


for item in (i for i in load_suite(BUILTIN, None) if i.category in ("multi_turn", "summarization")):
    p1, p2, auto, lookup = (answer(item, m) for m in ("plain", "plain", "auto", "lookup"))
    c1, c2, cauto = (answer(item, m, cleared=True) for m in ("plain", "plain", "auto"))
    print(
        f"{item.id}: reused plain/plain {parted(p1, p2)}, plain/auto {parted(p1, auto)}, plain/lookup "
        f"{parted(p1, lookup)} ({len(p1)}, {len(auto)}, {len(lookup)} tokens); cleared plain/plain {parted(c1, c2)}, "
        f"plain/auto {parted(c1, cauto)}; reused/cleared plain {parted(p1, c1)}",
        flush=True,
    )
