"""The API against the CLI: tokens/s of an answer streamed by `specchat serve` and of the same answer made by
`specchat generate`, on the same prompts, settings and machine, in one run.

The server stays up for the whole run; `generate` loads the models for each answer, as a user running it does. Per
prompt, mode and repeat the two run back to back, the order alternating. Each side's rate is the engine's own
(Stats: generation only, the prompt left out; the API's `timings.predicted_per_second`, the CLI's --json stats), and
for the API also the reader's: tokens after the first over the time from the first to the last text chunk arriving,
which adds what serving costs after the engine (encoding, sending, the event loop). Ratios are API / CLI per pair;
the table gives their medians. The suite's prompts of one user turn (with or without a system turn) are used, as
`generate --chat` takes one prompt.

    python benchmarks/api_vs_cli.py --target T.gguf [--draft D.gguf] [--modes plain,auto] [--max-tokens 256]
        [--repeats 3] [--categories qa,code_editing] [--ids qa-1,code_editing-2] [--threads N] [--out api_vs_cli.json]

Run it on a quiet machine: anything else running moves both sides' rates.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine.llama_backend import build_info

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True)
    p.add_argument("--draft")
    p.add_argument("--modes", default="plain,auto", help="comma-separated modes (default plain,auto)")
    p.add_argument("--k", type=int, default=4, help="draft length of speculative and lookup modes")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--categories", help="comma-separated suite categories (default: all)")
    p.add_argument("--ids", help="comma-separated suite prompt ids, of those categories (default: all)")
    p.add_argument("--threads", type=int, help="CPU threads for both (default: all cores)")
    p.add_argument("--out", default="api_vs_cli.json")
    args = p.parse_args()
    models = ["--target", args.target, *(["--draft", args.draft] if args.draft else [])]
    models += ["--threads", str(args.threads)] if args.threads else []
    items = [
        item
        for item in load_suite(BUILTIN, args.categories.split(",") if args.categories else None)
        if [m["role"] for m in item.messages] in (["user"], ["system", "user"])
        and (not args.ids or item.id in args.ids.split(","))
    ]
    modes = args.modes.split(",")
    env = {**os.environ, "PYTHONPATH": str(REPO / "app")}  # both sides run this checkout's specchat
    server, url = start_server(models, env, Path(args.out).with_suffix(".server.log"))
    runs = []
    try:
        for repeat in range(args.repeats):
            for i, item in enumerate(items):
                for j, mode in enumerate(modes):
                    order = ["api", "cli"] if (repeat + i + j) % 2 == 0 else ["cli", "api"]
                    run = {"repeat": repeat, "prompt": item.id, "mode": mode, "first": order[0]}
                    for side in order:
                        if side == "api":
                            run["api"] = api_run(url, item.messages, mode, args)
                        else:
                            run["cli"] = cli_run(models, item.messages, mode, args, env)
                    run["ratio"] = run["api"]["tokens_per_s"] / run["cli"]["tokens_per_s"]
                    run["reader_ratio"] = run["api"]["reader_tokens_per_s"] / run["cli"]["tokens_per_s"]
                    runs.append(run)
                    print(
                        f"rep {repeat} {item.id} {mode}: cli {run['cli']['tokens_per_s']:.2f}, api "
                        f"{run['api']['tokens_per_s']:.2f} (reader {run['api']['reader_tokens_per_s']:.2f}) tok/s, "
                        f"{run['api']['tokens']} / {run['cli']['tokens']} tokens",
                        flush=True,
                    )
    finally:
        server.terminate()
        server.wait(30)
    summary = {mode: summarize([r for r in runs if r["mode"] == mode]) for mode in modes}
    print_table(summary)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    out = {"settings": settings, "build": build_info(), "summary": summary, "runs": runs}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return 0


def start_server(models: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    """`specchat serve` on a free port, its output in log; returned once it is ready."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "specchat", "serve", "--port", str(port), *models]
    with log.open("w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    while True:
        if server.poll() is not None:
            raise SystemExit(f"specchat serve exited with {server.returncode}: see {log}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return server, url
        except OSError:
            time.sleep(0.5)


def api_run(url: str, messages: list[dict], mode: str, args: argparse.Namespace) -> dict:
    """One streamed chat answer, read as a client reads it."""
    body = {
        "messages": messages,
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "seed": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "speculative": {"mode": mode, **({"k": args.k} if mode in ("speculative", "lookup") else {})},
    }
    request = urllib.request.Request(
        url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    arrivals, timings, usage = [], None, None
    with urllib.request.urlopen(request, timeout=3600) as response:
        for line in response:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                arrivals.append(time.perf_counter())
            timings = chunk.get("timings", timings)
            usage = chunk.get("usage") or usage
    tokens = usage["completion_tokens"]
    reader = (tokens - 1) / (arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else 0.0
    return {
        "tokens": tokens,
        "tokens_per_s": timings["predicted_per_second"],
        "reader_tokens_per_s": reader,
        "draft_n": timings["draft_n"],
        "draft_n_accepted": timings["draft_n_accepted"],
        "strategy": timings["strategy"],
    }


def cli_run(models: list[str], messages: list[dict], mode: str, args: argparse.Namespace, env: dict) -> dict:
    """The same answer by `specchat generate --chat --json`: the engine's own stats."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    command = [sys.executable, "-m", "specchat", "generate", *models, "--chat", "--json", "--prompt", "-"]
    command += ["--mode", mode, "--k", str(args.k), "--max-tokens", str(args.max_tokens), "--temperature", "0"]
    command += ["--seed", "0", *(["--system", system[0]] if system else [])]
    done = subprocess.run(command, input=messages[-1]["content"], capture_output=True, text=True, env=env, check=True)
    stats = json.loads(done.stdout)["stats"]
    return {
        "tokens": stats["tokens"],
        "tokens_per_s": stats["tokens_per_s"],
        "draft_n": stats["drafted"],
        "draft_n_accepted": stats["accepted"],
        "strategy": stats["strategy"],
    }


def summarize(runs: list[dict]) -> dict:
    return {
        "pairs": len(runs),
        "cli_tokens_per_s": statistics.median(r["cli"]["tokens_per_s"] for r in runs),
        "api_tokens_per_s": statistics.median(r["api"]["tokens_per_s"] for r in runs),
        "api_reader_tokens_per_s": statistics.median(r["api"]["reader_tokens_per_s"] for r in runs),
        "ratio_median": statistics.median(r["ratio"] for r in runs),
        "ratio_min": min(r["ratio"] for r in runs),
        "reader_ratio_median": statistics.median(r["reader_ratio"] for r in runs),
        "same_tokens": sum(r["api"]["tokens"] == r["cli"]["tokens"] for r in runs),
    }


def print_table(summary: dict) -> None:
    print(
        f"\n{'mode':8} {'pairs':>5} {'cli tok/s':>9} {'api tok/s':>9} {'reader':>9} {'api/cli':>8} {'min':>6} "
        f"{'reader/cli':>10} {'same n':>6}"
    )
    for mode, s in summary.items():
        print(
            f"{mode:8} {s['pairs']:5d} {s['cli_tokens_per_s']:9.2f} {s['api_tokens_per_s']:9.2f} "
            f"{s['api_reader_tokens_per_s']:9.2f} {s['ratio_median']:8.3f} {s['ratio_min']:6.3f} "
            f"{s['reader_ratio_median']:10.3f} {s['same_tokens']:6d}"
        )


if __name__ == "__main__":
    sys.exit(main())
