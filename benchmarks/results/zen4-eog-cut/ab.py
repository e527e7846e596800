"""A/B of cutting each proposal after its first end-of-generation token (drafters.through_end, and the draft model
stopping there), against drafting on past it as before, in one process, alternating prompt by prompt.

    python benchmarks/results/zen4-eog-cut/ab.py TARGET DRAFT REPEATS PROMPT_ID ...

"before" replaces through_end with the identity and lets the draft model draft its k, as the code did before.
"""

from __future__ import annotations

import statistics
import sys

import specchat.engine.speculative as speculative
from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.models.catalog import cache_dir

CUT = speculative.through_end


class NoEog(frozenset):
    """An end-of-generation set that holds nothing: the draft model drafts on past its end, as before."""

    def __contains__(self, token: object) -> bool:
        return False


def variant(name: str, engine: Engine) -> None:
    speculative.through_end = CUT if name == "now" else (lambda proposal, eog_ids: proposal)
    engine.draft.eog_ids = engine.draft_eog if name == "now" else NoEog()


def main() -> None:
    target, draft, repeats, ids = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    engine = Engine.load(target, draft, cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
    engine.draft_eog = engine.draft.eog_ids
    items = [item for item in load_suite(BUILTIN, None) if item.id in ids]
    rates: dict[tuple[str, str, str], list[float]] = {}
    for rep in range(repeats):
        for i, item in enumerate(items):
            for mode in ("auto", "speculative"):
                order = ("now", "before") if (rep + i) % 2 == 0 else ("before", "now")
                for name in order:
                    variant(name, engine)
                    engine.answers.clear()
                    events = list(engine.chat(item.messages, GenerationSettings(mode=mode, k=3, max_tokens=128)))
                    stats = events[-1].stats
                    rates.setdefault((item.id, mode, name), []).append(stats.tokens_per_s)
                    print(
                        f"{rep} {item.id} {mode} {name}: {stats.tokens} tokens {stats.finish_reason}, "
                        f"{stats.tokens_per_s:.2f} tok/s, drafted {stats.drafted}, accepted {stats.accepted}, "
                        f"batches {dict(sorted(stats.verify_calls_by_n.items()))}",
                        flush=True,
                    )
    variant("now", engine)
    engine.close()
    for mode in ("auto", "speculative"):
        ratios = []
        for item in items:
            now = statistics.median(rates[(item.id, mode, "now")])
            before = statistics.median(rates[(item.id, mode, "before")])
            ratios.append(now / before)
            print(f"{mode} {item.id}: now {now:.2f} tok/s, before {before:.2f}, now/before {now / before:.3f}")
        print(f"{mode}: median now/before over prompts {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
