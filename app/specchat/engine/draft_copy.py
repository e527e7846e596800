"""A copy of the draft model re-quantized for llama.cpp's CPU kernels, drafting in place of the file when faster.

The draft only proposes tokens and the target's verification keeps the output exact, so any copy of the draft
that decodes faster is a free gain. Small models' files often hold weights the CPU decodes slowly: the 896-wide rows
of Qwen2.5-0.5B do not fit 256-wide K-quant blocks, so its "Q4_K_M" file is mostly Q5_0 with a Q8_0 output matrix,
and a token costs 0.44-0.49 target steps on two cores here. A Q4_0 copy (32-wide blocks, which llama.cpp
repacks for its CPU matrix kernels) costs 0.33 and picks the target's greedy token almost as often (81.6% of the
built-in suite's tokens, against 82.6% for the file). It takes 3 s to make. An IQ4_NL copy drafts a little faster
still (0.29) but took 115 s to make, too long a first wait. Whether the copy is faster is measured, once per machine.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from specchat.engine.calibration import TIMING_TEXT, decode_seconds, timing_key
from specchat.engine.llama_backend import BackendConfig, LlamaModel, quantize_q4_0
from specchat.errors import ModelLoadError

COPY_TYPE = "Q4_0"
# Keep the copy only if it drafts at most this share of the file's time a token: a coarser draft agrees with the
# target a little less often, and timings on a busy machine wander by a few percent.
MAX_TIME_RATIO = 0.9


@dataclass(frozen=True)
class DraftChoice:
    path: Path  # the draft to load: the file or its copy
    file_s: float  # seconds a draft token takes with the file
    copy_s: float  # ... with the copy

    @property
    def uses_copy(self) -> bool:
        return self.copy_s <= MAX_TIME_RATIO * self.file_s

    def describe(self, file: Path) -> str:
        times = f"{self.copy_s * 1000:.0f} ms a token against {self.file_s * 1000:.0f} ms"
        if self.uses_copy:
            return f"drafting with a {COPY_TYPE} copy of {file.name} made for this CPU ({times} for the file)"
        return f"drafting with {file.name} as it is (a {COPY_TYPE} copy took {times} for the file)"


def quantize(source: Path, dest: Path, n_threads: int) -> None:
    """Write dest as a Q4_0 copy of source (every weight matrix, the output one too), atomically."""
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        if not quantize_q4_0(source, part, n_threads):
            raise ModelLoadError(f"{source.name}: llama.cpp could not re-quantize this model for the CPU")
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)


def token_seconds(models: list[LlamaModel], rounds: int = 7) -> list[float]:
    """Each model's median time for one token after a short context, timed in turns (the machine drifts)."""
    context = models[0].tokenize(TIMING_TEXT)
    for model in models:
        model.eval_prefix(context)
        decode_seconds(model, context[:1])  # warm-up: first decodes pay for allocations
    times: list[list[float]] = [[] for _ in models]
    for _ in range(rounds):
        for model, measured in zip(models, times):
            measured.append(decode_seconds(model, context[:1]))
    return [statistics.median(measured) for measured in times]


def choose_draft(
    draft: Path, config: BackendConfig, cache_dir: Path, on_progress: Callable[[str], None] | None = None
) -> DraftChoice:
    """The draft file or its CPU copy, whichever drafts faster here; the answer (and a kept copy) is cached."""
    key = timing_key([draft.resolve()], repr(config.threads))
    # The copy's bytes do not depend on the threads that make or time it: one copy serves every thread count.
    copy = cache_dir / f"{draft.stem}.{timing_key([draft.resolve()], COPY_TYPE)}.{COPY_TYPE.lower()}.gguf"
    record = cache_dir / f"draft-choice-{key}.json"
    try:
        d = json.loads(record.read_text())
        choice = DraftChoice(Path(d["path"]), d["file_s"], d["copy_s"])
        if choice.path == (copy if choice.uses_copy else draft) and choice.path.is_file():
            return choice
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none yet, or unreadable, or its copy was deleted: measure again
    say = on_progress or (lambda _: None)
    if not copy.is_file():
        say(f"Making a {COPY_TYPE} copy of the draft for this CPU (once)…")
        quantize(draft, copy, config.threads[0])
    say(f"Timing the draft against its {COPY_TYPE} copy (once)…")
    models = [LlamaModel(draft, config), LlamaModel(copy, config)]
    try:
        file_s, copy_s = token_seconds(models)
    finally:
        for model in models:
            model.close()
    faster = copy_s <= MAX_TIME_RATIO * file_s
    choice = DraftChoice(copy if faster else draft, file_s, copy_s)
    if not faster:
        copy.unlink(missing_ok=True)  # hundreds of MB for nothing
    record.write_text(json.dumps(asdict(choice), default=str))
    return choice
