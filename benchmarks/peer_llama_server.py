"""specchat against llama.cpp's own llama-server, each engine against its own plain decoding, in one run.

    python benchmarks/peer_llama_server.py LLAMA_SERVER TARGET DRAFT CATEGORIES REPEATS [MAX_TOKENS]
        [--spec ngram-simple --spec ngram-mod --spec draft-simple] [--out results.json]

One llama-server per mode (no speculation, and each --spec type; draft-simple gets DRAFT as its draft model),
started side by side on this machine, idle but for the request it is answering, with the same threads as
specchat. specchat's engine runs in this process, plain and auto. Every prompt of the categories named goes
through every mode, the order rotating prompt by prompt and repeat by repeat (the run right after another
engine's can read slow). Prompts are the same tokens (specchat's chat template) for both engines; greedy.

Each engine keeps what it learns across requests as it would deployed, within a repeat only: llama-server's
ngram-mod pools n-grams of every request it served (the servers start afresh for each repeat, so that a prompt's
own earlier answer is never in it), and specchat's auto copies from the answers auto gave this repeat (other
prompts' only, as the engine does; plain's answers are not kept). Results folders before `zen4-peer-fair` ran the
servers through all repeats and gave specchat no earlier answers: there ngram-mod pooled the answers to the prompts
before, and from the second repeat on copied its own answer to the same prompt.

Speed is generation only, prompt processing excluded, for both: llama-server's timings.predicted_n /
predicted_ms, specchat's Stats.tokens / wall_s. Per category: the median over repeats of total tokens / total
time, each mode's as a ratio to its own engine's plain decoding.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import time
import urllib.request
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import Engine, GenerationSettings
from specchat.engine.drafters import EarlierAnswers
from specchat.engine.llama_backend import default_threads
from specchat.models.catalog import cache_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One llama-server process, one mode."""

    def __init__(self, binary: str, target: str, draft: str, spec: str, threads: int, log: Path):
        self.port = free_port()
        args = [binary, "-m", target, "--port", str(self.port), "--host", "127.0.0.1", "-c", "4096", "-np", "1"]
        args += ["-t", str(threads), "-tb", str(threads), "--no-webui", "--spec-type", spec]
        if spec.startswith("draft"):
            args += ["-md", draft, "-td", str(threads), "-tbd", str(threads)]
        self.log = log.open("w")
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server --spec-type {spec} exited; see {log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"llama-server --spec-type {spec} did not become healthy; see {log}")

    def complete(self, prompt: list[int], max_tokens: int) -> dict:
        body = {"prompt": prompt, "n_predict": max_tokens, "temperature": 0.0, "cache_prompt": False, "seed": 0}
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=600) as r:
            return json.load(r)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(30)
        self.log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama_server")
    ap.add_argument("target")
    ap.add_argument("draft")
    ap.add_argument("categories", type=lambda s: s.split(","))
    ap.add_argument("repeats", type=int)
    ap.add_argument("max_tokens", type=int, nargs="?", default=128)
    ap.add_argument("--spec", action="append", help="llama-server --spec-type values (default: ngram-simple)")
    ap.add_argument("--out", type=Path, help="write every run's record here (JSON)")
    args = ap.parse_args()
    specs = args.spec or ["ngram-simple"]
    threads = default_threads()

    engine = Engine.load(args.target, args.draft, cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
    print(engine.draft_note, flush=True)
    engine.calibration()
    items = load_suite(BUILTIN, args.categories)
    logs = (args.out.parent if args.out else Path(".")) / "llama-server-logs"
    logs.mkdir(parents=True, exist_ok=True)
    warm_up = engine.text_prompt("Count from one to ten:")  # no prompt of the suite: nothing a pool could copy
    auto_answers = EarlierAnswers(engine.policy.earlier_tokens)
    names = ["specchat plain", *(f"server {spec}" for spec in ["none", *specs]), "specchat auto"]
    records = []
    totals: dict[tuple[str, str, int], list[float]] = defaultdict(lambda: [0, 0.0])

    def run(servers: dict[str, Server], item, mode: str) -> dict:
        prompt = engine.chat_prompt(item.messages)
        if mode in servers:
            timings = servers[mode].complete(prompt, args.max_tokens)["timings"]
            return {
                "tokens": timings["predicted_n"],
                "seconds": timings["predicted_ms"] / 1000,
                "drafted": timings.get("draft_n", 0),
                "accepted": timings.get("draft_n_accepted", 0),
            }
        engine._auto = None  # a fresh conversation each run
        engine.answers = auto_answers if mode == "auto" else EarlierAnswers(0)
        stats = list(engine.generate_tokens(prompt, GenerationSettings(mode=mode, max_tokens=args.max_tokens)))
        s = stats[-1].stats
        return {"tokens": s.tokens, "seconds": s.wall_s, "drafted": s.drafted, "accepted": s.accepted}

    engine.answers = EarlierAnswers(0)
    list(engine.generate_tokens(warm_up, GenerationSettings(mode="plain", max_tokens=16)))
    for rep in range(args.repeats):
        auto_answers.clear()
        with ExitStack() as stack:
            servers = {}
            for spec in ["none", *specs]:
                # the draft as specchat runs it (its CPU copy where that is faster): the same draft for both engines
                log = logs / f"{spec}-{rep}.log"
                server = Server(args.llama_server, args.target, engine.draft.path, spec, threads, log)
                stack.callback(server.close)
                server.complete(warm_up, 16)
                servers[f"server {spec}"] = server
            for i, item in enumerate(items):
                turn = (rep * 3 + i) % len(names)
                for name in names[turn:] + names[:turn]:
                    mode = name.removeprefix("specchat ") if name.startswith("specchat") else name
                    record = run(servers, item, mode) | {"mode": name, "id": item.id, "category": item.category}
                    record["rep"] = rep
                    records.append(record)
                    totals[name, item.category, rep][0] += record["tokens"]
                    totals[name, item.category, rep][1] += record["seconds"]
                    rate = record["tokens"] / record["seconds"]
                    print(f"rep {rep} {item.id} {name}: {record['tokens']} tokens, {rate:.2f} tok/s", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"cpu_threads": threads, "records": records}, indent=1))
    length = {(r["mode"], r["id"], r["rep"]): r["tokens"] for r in records}
    for cat in args.categories:
        rate = {n: [totals[n, cat, r][0] / totals[n, cat, r][1] for r in range(args.repeats)] for n in names}
        line = [f"{cat}:"]
        for base in ("specchat plain", "server none"):
            line.append(f"{base} {statistics.median(rate[base]):.2f} tok/s")
        for name in names:
            if name in ("specchat plain", "server none"):
                continue
            base = "specchat plain" if name.startswith("specchat") else "server none"
            ratios = [a / p for a, p in zip(rate[name], rate[base])]
            mine = [r for r in records if r["mode"] == name and r["category"] == cat]
            taken, made = sum(r["accepted"] for r in mine), sum(r["drafted"] for r in mine)
            # a mode that drafted nothing ran its engine's plain decoding: its ratio is this machine's noise
            drafts = f"{taken}/{made} drafts taken" if made else "no drafts: plain against plain"
            # greedy answers part at near-ties (a batch's numerics against a single token's): a ratio over answers of
            # other lengths compares different texts
            other = sum(r["tokens"] != length[base, r["id"], r["rep"]] for r in mine)
            differ = f", {other} of {len(mine)} answers not plain's length" if other else ""
            line.append(f"{name} {statistics.median(ratios):.2f}x ({drafts}{differ})")
        print("; ".join(line))


if __name__ == "__main__":
    main()
