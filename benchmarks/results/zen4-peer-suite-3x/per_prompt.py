"""Each prompt's ratios in records.json (tokens over seconds summed over the repeats, each mode against its own
engine's plain decoding), drafts taken / made, and each repeat's tok/s.

    python3 benchmarks/results/zen4-peer-suite-3x/per_prompt.py [RECORDS] > per_prompt.txt

RECORDS: a peer run's records.json (default: this folder's).
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

source = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "records.json"
records = json.loads(source.read_text())["records"]
runs = defaultdict(list)
for record in records:
    runs[record["id"], record["mode"]].append(record)


def speed(runs_of_mode: list[dict]) -> float:
    return sum(r["tokens"] for r in runs_of_mode) / sum(r["seconds"] for r in runs_of_mode)


def rates(runs_of_mode: list[dict]) -> list[float]:
    return [round(r["tokens"] / r["seconds"], 1) for r in runs_of_mode]


def drafts(runs_of_mode: list[dict]) -> str:
    return f"{sum(r['accepted'] for r in runs_of_mode)}/{sum(r['drafted'] for r in runs_of_mode)}"


ids = sorted({r["id"] for r in records}, key=lambda i: (i.rsplit("-", 1)[0], int(i.rsplit("-", 1)[1])))
for i in ids:
    plain, auto = runs[i, "specchat plain"], runs[i, "specchat auto"]
    server = runs[i, "server none"]
    simple, mod = runs[i, "server ngram-simple"], runs[i, "server ngram-mod"]
    print(
        f"{i:12s} auto {speed(auto) / speed(plain):.2f} ({drafts(auto)}, tokens {[r['tokens'] for r in auto]}, plain's "
        f"{[r['tokens'] for r in plain]}) | ngram-simple {speed(simple) / speed(server):.2f} ({drafts(simple)}) | "
        f"ngram-mod {speed(mod) / speed(server):.2f} ({drafts(mod)}) | tok/s auto "
        f"{rates(auto)}, plain {rates(plain)}"
    )
