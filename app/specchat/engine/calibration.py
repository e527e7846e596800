"""Measure what the cost model needs on this machine: t1, r(n) and c, cached per machine and setup."""

from __future__ import annotations

import hashlib
import json
import platform
import statistics
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, dataclass, replace
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
# How measure() times, kept with each calibration: one kept by an earlier method is not read (it is measured again),
# so this goes up whenever what or how measure() times changes. 2: every batch size of BATCH_SIZES, the target step
# and the draft step each timed after an untimed one (step_seconds), not after the previous batch.
METHOD = 2
TIMING_TEXT = "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n" * 4


@dataclass(frozen=True)
class Calibration:
    t1: float  # seconds for one target token
    r: dict[int, float]  # target batch of n tokens, in units of t1
    c: float | None  # one draft token in units of t1; None without a draft model
    key: str
    # The pair measured, as file_id names its files (the draft's own file where a CPU copy of it drafted), and the
    # CPU: what a listing of models finds this calibration by without loading them (cached_for).
    files: tuple[str, ...] = ()
    machine: str = ""
    method: int = METHOD

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        d = json.loads(text)
        r = {int(n): v for n, v in d["r"].items()}
        return cls(d["t1"], r, d["c"], d["key"], tuple(d.get("files", ())), d.get("machine", ""), d.get("method", 1))


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


def file_id(path: Path) -> str:
    """A model file as a cached calibration names it: its name and size (no need to read it)."""
    return f"{path.name} ({path.stat().st_size} bytes)"


def pair_files(target: Path, draft: Path | None) -> tuple[str, ...]:
    return tuple(file_id(path) for path in (target, draft) if path is not None)


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


def step_seconds(model: LlamaModel, token: int) -> float:
    """One token's decode, timed after an untimed one: the first step after a long batch, the other model's work or
    a pause can cost far more than the next, and the loop's plain steps and draft tokens mostly follow their like.
    Timed after a batch of 32 instead, t1 read slow and so every r(n) cheap (docs/performance.md, "A first load")."""
    decode_seconds(model, [token])
    return decode_seconds(model, [token])


def time_round(
    target: LlamaModel, draft: LlamaModel | None, probe: list[int]
) -> tuple[float, float | None, dict[int, float]]:
    """One round, back to back: t1, c (None without a draft) and r(n) for every batch size, from the probe's tokens."""
    t1 = step_seconds(target, probe[0])
    c = step_seconds(draft, probe[0]) / t1 if draft is not None else None
    return t1, c, {n: decode_seconds(target, probe[:n]) / t1 for n in BATCH_SIZES}


def measure(
    target: LlamaModel,
    draft: LlamaModel | None,
    rounds: int = ROUNDS,
    on_progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Each round times a target step, a draft step (each after an untimed one: step_seconds) and every batch size
    back to back, and each ratio is the median over rounds: the machine's speed drifts with other work, so only times
    taken together make sound ratios (and batches of mixed sizes, as in real decoding, not the same batch over and
    over). on_progress hears what is being measured, once before the rounds and once a round."""

    def say(step: str) -> None:
        if on_progress is not None:
            on_progress(f"Timing the models on this machine for auto mode (once): {step}…")

    context = target.tokenize(TIMING_TEXT)
    probe = context[: K_LONG + 1]
    say(f"reading a sample text of {len(context)} tokens")
    for model in (target, draft):
        if model is not None:
            model.eval_prefix(context)
    t1s: list[float] = []
    cs: list[float] = []
    ratios: dict[int, list[float]] = {n: [] for n in BATCH_SIZES}
    for i in range(rounds):
        say(f"round {i + 1} of {rounds}, target batches of 1-{K_MAX + 1} and {K_LONG + 1} tokens")
        t1, c, r = time_round(target, draft, probe)
        t1s.append(t1)
        if c is not None:
            cs.append(c)
        for n, measured in ratios.items():
            measured.append(r[n])
    median = statistics.median
    return Calibration(
        t1=median(t1s),
        r={n: median(measured) for n, measured in ratios.items()},
        c=median(cs) if cs else None,
        key=setup_key(target, draft),
    )


def read_cached(path: Path) -> Calibration | None:
    """A kept calibration, or None where there is none, it cannot be read or an earlier method took it (it is
    measured again)."""
    try:
        cal = Calibration.from_json(path.read_text())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return cal if cal.method == METHOD else None


def load_or_measure(
    target: LlamaModel,
    draft: LlamaModel | None,
    cache_dir: Path | None,
    on_progress: Callable[[str], None] | None = None,
    draft_file: Path | None = None,
) -> Calibration:
    """The cached calibration for this setup, else a new measurement, which on_progress hears of (it takes seconds).
    draft_file: the file the draft was chosen as, where it runs from a CPU copy of it (the calibration names it)."""
    key = setup_key(target, draft)
    path = cache_dir / f"calibration-{key}.json" if cache_dir is not None else None
    files = pair_files(target.path, (draft_file or draft.path) if draft is not None else None)
    cal = read_cached(path) if path is not None else None
    if cal is not None and cal.key != key:
        cal = None
    named = replace(cal or measure(target, draft, on_progress=on_progress), files=files, machine=cpu_name())
    if path is not None and named != cal:  # new, or kept by a version that did not name its pair
        # A cache folder that cannot take it (a file in its place, a full disk) costs the next load a measurement,
        # not this one its answer.
        with suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(named.to_json())
    return named


def cached_for(target: Path, draft: Path | None, cache_dir: Path) -> Calibration | None:
    """The newest calibration in cache_dir of this pair on this machine, in any setup (threads, context), or None
    before the pair has loaded here. Reads the cache only: no model is loaded."""
    try:
        files = pair_files(target, draft)
    except OSError:
        return None  # a model file not there has not been measured
    found, machine = [], cpu_name()
    for path in cache_dir.glob("calibration-*.json"):
        cal = read_cached(path)
        if cal is not None and cal.files == files and cal.machine == machine:
            with suppress(OSError):  # deleted meanwhile
                found.append((path.stat().st_mtime, cal))
    return max(found, key=lambda when_cal: when_cal[0])[1] if found else None
