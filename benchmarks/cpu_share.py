"""Plain decoding beside another process that takes a share of a core, the way a browser tab streaming the chat
does: what llama.cpp's threads lose to it, and whether libgomp's way of waiting at its barriers changes that.

Each run is `specchat generate --chat --mode plain` (the engine's own tokens/s, generation only) while a load
process spins for BUSY ms out of every PERIOD ms; the loads and the wait settings are interleaved run by run, the
order rotating each round, and each run is compared with the unloaded run of its round at the same wait setting.

    python benchmarks/cpu_share.py [--target T.gguf] [--loads 0/0,5/50,20/200,40/200]
        [--waits default,GOMP_SPINCOUNT=3000,OMP_WAIT_POLICY=passive] [--rounds 3] [--max-tokens 150]
        [--out cpu_share]

A wait setting is `default` or NAME=VALUE put in the generating process's environment (libgomp reads it at load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from api_vs_cli import cli_run

MODELS = Path.home() / ".cache" / "spec-test-models"
PROMPT = "Write a Python module with a singly linked list class: insert, delete, reverse, and tests."
# Spins for busy seconds, then sleeps out the period: a load of busy/period of one core, in bursts.
LOAD = """import sys, time
busy, period = float(sys.argv[1]) / 1000, float(sys.argv[2]) / 1000
while True:
    start = time.perf_counter()
    while time.perf_counter() - start < busy:
        pass
    time.sleep(period - busy)
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=str(MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    p.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    p.add_argument("--loads", default="0/0,5/50,20/200,40/200", help="BUSY/PERIOD in ms, comma-separated")
    p.add_argument("--waits", default="default,GOMP_SPINCOUNT=3000,OMP_WAIT_POLICY=passive")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=150)
    p.add_argument("--out", default="cpu_share")
    args = p.parse_args()
    args.k = 1  # cli_run passes --k; plain mode ignores it
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    loads = [tuple(int(x) for x in spec.split("/")) for spec in args.loads.split(",")]
    waits = args.waits.split(",")
    models = ["--target", args.target, *(["--threads", str(args.threads)] if args.threads else [])]
    messages = [{"role": "user", "content": PROMPT}]
    configs = [(load, wait) for wait in waits for load in loads]
    runs = []
    for round_ in range(args.rounds):
        shift = round_ % len(configs)
        for load, wait in configs[shift:] + configs[:shift]:
            run = {"round": round_, "load": load, "wait": wait, **loaded_run(load, wait, models, messages, args)}
            runs.append(run)
            print(f"round {round_} load {load[0]}/{load[1]} ms {wait}: {run['tokens_per_s']:.2f} tok/s", flush=True)
    rows = table(runs, loads, waits)
    (out / "results.json").write_text(json.dumps({"settings": vars(args), "runs": runs, "rows": rows}, indent=1))
    (out / "summary.md").write_text(markdown(rows, args))
    print((out / "summary.md").read_text())
    return 0


def loaded_run(load: tuple[int, int], wait: str, models: list[str], messages: list[dict], args) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if wait != "default":
        name, value = wait.split("=", 1)
        env[name] = value
    busy, period = load
    loader = subprocess.Popen([sys.executable, "-c", LOAD, str(busy), str(period)]) if busy else None
    try:
        return cli_run(models, messages, "plain", args, env)
    finally:
        if loader:
            loader.kill()
            loader.wait()


def table(runs: list[dict], loads: list[tuple[int, int]], waits: list[str]) -> list[dict]:
    """Per load and wait: the median tokens/s and the median, over rounds, of the run's rate over the same round's
    unloaded run at the default wait."""
    unloaded = {r["round"]: r["tokens_per_s"] for r in runs if r["load"] == loads[0] and r["wait"] == "default"}
    rows = []
    for wait in waits:
        for load in loads:
            mine = [r for r in runs if r["load"] == load and r["wait"] == wait]
            rows.append(
                {
                    "load": f"{load[0]}/{load[1]}",
                    "cores": load[0] / load[1] if load[1] else 0.0,
                    "wait": wait,
                    "tokens_per_s": statistics.median(r["tokens_per_s"] for r in mine),
                    "ratio": statistics.median(r["tokens_per_s"] / unloaded[r["round"]] for r in mine),
                }
            )
    return rows


def markdown(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        "# Plain decoding beside a load",
        "",
        f"`{' '.join(sys.argv[1:])}`; {args.rounds} rounds, {args.max_tokens} tokens; the ratio is to the same"
        " round's unloaded run at the default wait (median over rounds).",
        "",
        "| wait | load, busy/period ms | cores taken | tok/s | ratio |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['wait']} | {r['load']} | {r['cores']:.2f} | {r['tokens_per_s']:.2f} | {r['ratio']:.3f} |" for r in rows
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
