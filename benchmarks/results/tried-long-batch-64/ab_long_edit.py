"""Copies longer than 32 tokens: earlier_answers.py's three edits of one file (answers of about 400 tokens, most of
them the file's unchanged lines), each on its own (no earlier answers), through plain decoding and auto drafting
copies of at most 31 and at most 63 tokens; in one process, request by request, the order rotating.

    python benchmarks/results/tried-long-batch-64/ab_long_edit.py TARGET DRAFT REPEATS [--copies]

--copies: three edits that return the file nearly unchanged instead (COPY_ASKS).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from earlier_answers import ASKS, CODE, interleaved  # noqa: E402

# Edits that return the file nearly as it was: long copies, broken where the edit lands (--copies).
COPY_ASKS = (
    "Rename the function average to mean everywhere in this code. Reply with the whole file in one code block.",
    "Add a function worst(scores, n) at the end of this code, mirroring best. Reply with the whole file in one code "
    "block.",
    "Reply with this code exactly as it is, in one code block.",
)

from specchat.engine import DEFAULT_POLICY, Engine, GenerationSettings  # noqa: E402
from specchat.engine.calibration import cpu_name  # noqa: E402
from specchat.models.catalog import cache_dir  # noqa: E402

ONLY_THIS_REQUEST = replace(DEFAULT_POLICY, earlier_tokens=0)
CONFIGS = {"plain": None, "auto k<=31": replace(ONLY_THIS_REQUEST, k_long=31), "auto k<=63": ONLY_THIS_REQUEST}


def main() -> None:
    target, draft, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
    asks = COPY_ASKS if "--copies" in sys.argv[4:] else ASKS
    engine = Engine.load(target, draft, cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
    cal = engine.calibration()
    print(f"{cpu_name()}; t1 {cal.t1 * 1000:.1f} ms; r: " + ", ".join(f"{n}:{v:.2f}" for n, v in cal.r.items()))
    names = list(CONFIGS)

    def run(ask: str, name: str) -> dict:
        policy = CONFIGS[name]
        engine.policy = policy or DEFAULT_POLICY
        engine._auto = None
        engine.answers.clear()
        messages = [{"role": "user", "content": f"{ask}\n\n```python\n{CODE}```"}]
        settings = GenerationSettings(mode="plain" if policy is None else "auto", max_tokens=400)
        stats = list(engine.chat(messages, settings))[-1].stats
        tok_s = stats.tokens / stats.wall_s
        return {
            "tokens": stats.tokens,
            "tok_s": tok_s,
            "accepted": stats.accepted,
            "longest": len(stats.drafted_by_pos),
        }

    run(asks[0], "plain")  # warm-up
    records = interleaved(asks, names, repeats, run)
    for name in names[1:]:
        ratios = []
        for rec in records:
            if rec["config"] == name:
                base = next(
                    r
                    for r in records
                    if r["config"] == "plain" and r["repeat"] == rec["repeat"] and r["request"] == rec["request"]
                )
                ratios.append(rec["tok_s"] / base["tok_s"])
        print(f"{name} / plain: median {statistics.median(ratios):.3f}, each " + " ".join(f"{x:.2f}" for x in ratios))
    total = {
        n: sum(r["tokens"] for r in records if r["config"] == n)
        / sum(r["tokens"] / r["tok_s"] for r in records if r["config"] == n)
        for n in names
    }
    print("total tok/s: " + ", ".join(f"{n} {v:.2f}" for n, v in total.items()))
    engine.close()


if __name__ == "__main__":
    main()
