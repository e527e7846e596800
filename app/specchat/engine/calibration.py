"""Measure what the cost model needs on this machine: t1, r(n) and c, cached per machine and setup."""

from __future__ import annotations

import hashlib
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from specchat.engine.llama_backend import LlamaModel, system_info

# Draft lengths the adaptive loop may choose from; calibration measures target batches up to K_MAX + 1.
# r(n) is far from linear on a CPU: llama.cpp's kernels take a batch 4 or 16 tokens at a time, and on two cores
# here 16 tokens cost 4.3 steps against 3.4 for 8 (0.27 against 0.43 a token), which a long copy can use.
K_MAX = 15
# A copy in progress (prompt lookup from a match of 16 tokens or more; on the built-in suite's greedy answers each
# of its draft tokens was right 97-98% of the time) may draft up to K_LONG tokens, where a batch of K_LONG + 1 costs
# less a token than one of 16: on two Zen 5 cores 0.28 steps a token against 0.33. Between the two, batches cost
# more a token (31 tokens: 0.34), so no draft length there is measured or chosen.
K_LONG = 31
BATCH_SIZES = (*range(2, K_MAX + 2), K_LONG + 1)
# Timing rounds, each value their median. A fourth round costs one round's seconds once per setup and pays: draft
# lengths chosen from 4 rounds lost half or less of the expected speedup that 3 rounds' lost (docs/performance.md,
# "A first load").
ROUNDS = 4
TIMING_TEXT = "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n" * 4


@dataclass(frozen=True)
class Calibration:
    t1: float  # seconds for one target token
    r: dict[int, float]  # target batch of n tokens, in units of t1
    c: float | None  # one draft token in units of t1; None without a draft model
    key: str

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        d = json.loads(text)
        return cls(t1=d["t1"], r={int(n): v for n, v in d["r"].items()}, c=d["c"], key=d["key"])


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def timing_key(files: list[Path], setup: str) -> str:
    """Changes whenever the machine, the llama.cpp build, any of the files or the setup (threads, ...) change."""
    parts = [cpu_name(), system_info()]
    for path in files:
        st = path.stat()
        parts += [path.name, str(st.st_size), str(int(st.st_mtime)), setup]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def setup_key(target: LlamaModel, draft: LlamaModel | None) -> str:
    """Changes whenever the machine, the build, the models, threads, GPU layers or context change."""
    models = [model for model in (target, draft) if model is not None]
    return timing_key([model.path for model in models], repr(target.config))


def decode_seconds(model: LlamaModel, tokens: list[int]) -> float:
    base = model.n_past
    t0 = time.perf_counter()
    model.decode(tokens, all_logits=True)  # as verification does: logits for every position
    elapsed = time.perf_counter() - t0
    model.rollback(base)
    return elapsed


def measure(
    target: LlamaModel,
    draft: LlamaModel | None,
    rounds: int = ROUNDS,
    on_progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Each round times a target step, a draft step and every batch size back to back, and each ratio is the median
    over rounds: the machine's speed drifts with other work, so only times taken together make sound ratios (and
    batches of mixed sizes, as in real decoding, not the same batch over and over). on_progress hears what is being
    measured, once before the rounds and once a round."""

    def say(step: str) -> None:
        if on_progress is not None:
            on_progress(f"Timing the models on this machine for auto mode (once): {step}…")

    context = target.tokenize(TIMING_TEXT)
    probe = context[: K_LONG + 1]
    say(f"reading a sample text of {len(context)} tokens")
    for model in (target, draft):
        if model is not None:
            model.eval_prefix(context)
            decode_seconds(model, probe[:1])  # warm-up: first decodes pay for allocations
    t1s: list[float] = []
    cs: list[float] = []
    ratios: dict[int, list[float]] = {n: [] for n in BATCH_SIZES}
    for i in range(rounds):
        say(f"round {i + 1} of {rounds}, target batches of 1-{K_MAX + 1} and {K_LONG + 1} tokens")
        t1 = decode_seconds(target, probe[:1])
        t1s.append(t1)
        if draft is not None:
            cs.append(decode_seconds(draft, probe[:1]) / t1)
        for n, measured in ratios.items():
            measured.append(decode_seconds(target, probe[:n]) / t1)
    median = statistics.median
    return Calibration(
        t1=median(t1s),
        r={n: median(measured) for n, measured in ratios.items()},
        c=median(cs) if cs else None,
        key=setup_key(target, draft),
    )


def load_or_measure(
    target: LlamaModel,
    draft: LlamaModel | None,
    cache_dir: Path | None,
    on_progress: Callable[[str], None] | None = None,
) -> Calibration:
    """The cached calibration for this setup, else a new measurement, which on_progress hears of (it takes seconds)."""
    key = setup_key(target, draft)
    path = cache_dir / f"calibration-{key}.json" if cache_dir is not None else None
    if path is not None and path.is_file():
        try:
            cal = Calibration.from_json(path.read_text())
            if cal.key == key and set(cal.r) >= set(BATCH_SIZES):  # older versions measured fewer lengths
                return cal
        except (ValueError, KeyError):
            pass  # an unreadable cache is measured again
    cal = measure(target, draft, on_progress=on_progress)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(cal.to_json())
    return cal
