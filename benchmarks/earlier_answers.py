"""A repeated workload: the same file edited three times in a row, each request a new conversation (as an agent or an
editor sends them), through plain decoding, auto, and auto that may not copy from earlier answers; in one process,
the three interleaved request by request, their order rotating.

    python benchmarks/earlier_answers.py TARGET DRAFT [--repeats 2] [--max-tokens 400] [--out FOLDER]

Every request holds the original file, so prompt lookup copies its unchanged lines in both auto runs; what only the
earlier answers hold is the previous requests' changes (the type hints the second and third requests keep).
Prints and writes (FOLDER/results.json) tokens/s per request and configuration, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from specchat.engine import DEFAULT_POLICY, Engine, GenerationSettings
from specchat.engine.calibration import cpu_name
from specchat.models.catalog import cache_dir

CODE = """import json


def load_scores(path):
    with open(path) as f:
        return json.load(f)


def average(scores):
    if not scores:
        return 0.0
    return sum(scores) / len(scores)


def best(scores, n):
    return sorted(scores, reverse=True)[:n]


def normalise(scores, top):
    return [score / top for score in scores]


def report(path, n):
    scores = load_scores(path)
    top = max(scores)
    return {
        "average": average(scores),
        "best": best(scores, n),
        "normalised": normalise(scores, top),
    }
"""
ASKS = (
    "Add type hints to every function in this code. Reply with the whole file in one code block.",
    "Add type hints and a one-line docstring to every function in this code. Reply with the whole file in one "
    "code block.",
    "Add type hints, a one-line docstring and a check that raises ValueError for a negative n to every function "
    "in this code that takes n. Reply with the whole file in one code block.",
)
CONFIGS = ("plain", "auto", "auto, this request only")


def interleaved(
    asks: Sequence[str],
    configs: Sequence[str],
    repeats: int,
    run: Callable[[str, str], dict],
    new_repeat: Callable[[], None] = lambda: None,
) -> list[dict]:
    """Every request through every configuration, request by request, the order rotating; each record printed as it
    comes. new_repeat: what starts a repeat afresh (here, forgetting the answers of the repeat before)."""
    records = []
    for repeat in range(repeats):
        new_repeat()
        for i, ask in enumerate(asks):
            turn = (repeat + i) % len(configs)
            for config in [*configs[turn:], *configs[:turn]]:
                record = {"repeat": repeat, "request": i + 1, "config": config, **run(ask, config)}
                records.append(record)
                print(json.dumps(record), flush=True)
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target")
    ap.add_argument("draft")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    engine = Engine.load(args.target, args.draft, cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
    print(f"{cpu_name()}; {engine.draft_note}", flush=True)
    engine.calibration()
    policies = {"auto": DEFAULT_POLICY, "auto, this request only": replace(DEFAULT_POLICY, earlier_tokens=0)}

    def run(ask: str, config: str) -> dict:
        engine.policy = policies.get(config, DEFAULT_POLICY)
        engine._auto = None  # a new conversation, as the agent's requests are
        messages = [{"role": "user", "content": f"{ask}\n\n```python\n{CODE}```"}]
        mode = "plain" if config == "plain" else "auto"
        stats = list(engine.chat(messages, GenerationSettings(mode=mode, max_tokens=args.max_tokens)))[-1].stats
        return {"tokens": stats.tokens, "tok_s": stats.tokens / stats.wall_s, "accepted": stats.accepted}

    run(ASKS[0], "plain")  # warm-up
    records = interleaved(ASKS, CONFIGS, args.repeats, run, engine.answers.clear)
    summary = {}
    for i in range(1, len(ASKS) + 1):
        rate = {c: [r["tok_s"] for r in records if r["request"] == i and r["config"] == c] for c in CONFIGS}
        summary[f"request {i}"] = {
            "plain tok/s": statistics.median(rate["plain"]),
            **{f"{c} / plain": statistics.median(a / p for a, p in zip(rate[c], rate["plain"])) for c in CONFIGS[1:]},
            "auto / auto, this request only": statistics.median(
                a / b for a, b in zip(rate["auto"], rate["auto, this request only"])
            ),
        }
    for name, row in summary.items():
        print(f"{name}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        result = {"cpu": cpu_name(), "draft_note": engine.draft_note, "records": records, "summary": summary}
        (args.out / "results.json").write_text(json.dumps(result, indent=1))
    engine.close()


if __name__ == "__main__":
    main()
