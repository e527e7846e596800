"""How much of a verify step is Python? Profiles one generation and splits its time.

    python benchmarks/profile_loop.py TARGET.gguf DRAFT.gguf [--mode speculative] [--k 4] [--temperature 0]
        [--prompt-id summarize-1]  (a prompt of the built-in suite instead of the default one)

Prints the time inside llama.cpp's decode calls, the Python side of the loop (everything else between the
first and last token), and the heaviest Python functions.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from specchat.bench.report import config_label
from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import FIXED_K_MODES, Engine, GenerationSettings, SamplingParams
from specchat.models.catalog import cache_dir

PROMPT = [{"role": "user", "content": "Write a Python function that parses an ISO 8601 date without libraries."}]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("draft")
    ap.add_argument("--mode", default="speculative")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--prompt-id", help="a built-in suite prompt, e.g. summarize-1 (long prompt-lookup drafts)")
    args = ap.parse_args()
    messages = PROMPT
    if args.prompt_id:
        messages = next((item.messages for item in load_suite(BUILTIN) if item.id == args.prompt_id), None)
        if messages is None:
            ap.error(f"no prompt {args.prompt_id!r} in the built-in suite")
    engine = Engine.load(
        args.target, args.draft, cpu_copy_dir=cache_dir(), cache_dir=cache_dir()
    )  # the draft as the app runs it
    settings = GenerationSettings(
        mode=args.mode, k=args.k, sampling=SamplingParams(args.temperature), max_tokens=args.max_tokens
    )
    list(engine.chat(messages, GenerationSettings(mode="plain", max_tokens=4)))  # warm-up
    events = engine.chat(messages, settings)
    stats = next(events).stats  # the prompt and the first step stay outside the profile
    steps_before = stats.iterations
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    for _ in events:
        pass
    profile.disable()
    wall = time.perf_counter() - t0
    steps = stats.iterations - steps_before
    ps = pstats.Stats(profile)
    # The C call shows up as llama_cpp._internals' LlamaContext.decode, which does nothing else around it.
    decode = sum(v[2] for k, v in ps.stats.items() if k[0].endswith("_internals.py") and k[2] == "decode")
    python = wall - decode
    mode = config_label(args.mode, args.k if args.mode in FIXED_K_MODES else 0)
    print(f"mode={mode} T={args.temperature}: {stats.tokens} tokens, {stats.iterations} verify steps")
    print(
        f"profiled {wall:.3f}s: llama_decode {decode:.3f}s, Python side {python:.3f}s = {python / wall:.1%} "
        f"({1000 * python / steps:.2f} ms per verify step, profiler overhead included)"
    )
    print(f"loop's own accounting: sample_s / verify_s = {stats.sample_s / stats.verify_s:.1%}")
    ps.sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
