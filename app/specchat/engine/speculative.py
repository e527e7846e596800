"""The draft/verify loop as a generator of token events; plain decoding is the same loop with no drafts.

Invariant (llama.cpp's speculative example): the target's cache holds context[:-1], where context is
prompt + output so far and context[-1] (`last`) is the newest token, not yet evaluated by the target.
"""

from __future__ import annotations

import hashlib
import numbers
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specchat.engine.adaptive import AutoDrafter, LiveCosts, auto_lookup
from specchat.engine.calibration import K_LONG, Calibration, file_id, load_or_measure
from specchat.engine.draft_copy import choose_draft
from specchat.engine.drafters import Drafter, EarlierAnswers, LookupDrafter, ModelDrafter, through_end
from specchat.engine.llama_backend import BackendConfig, LlamaModel, Reading
from specchat.engine.policy import DEFAULT_POLICY, AutoPolicy
from specchat.engine.sampling import ProbabilityRows, SamplingParams, check_range
from specchat.engine.stats import Stats
from specchat.engine.text import TextStream, check_messages, check_text
from specchat.engine.verify import verify, verify_greedy
from specchat.errors import IncompatibleModelsError, InvalidInputError, SpecchatError
from specchat.models.compat import check_pair

MODES = ("auto", "speculative", "lookup", "plain")
# Modes that draft the asked k every step; auto picks its own length (up to its policy's k_long), plain none.
FIXED_K_MODES = ("speculative", "lookup")
RANDOM_SEED = -1  # as a seed: a fresh one for every generation (None too); the app's seed setting offers it


@dataclass(frozen=True)
class GenerationSettings:
    mode: str = "auto"  # one of MODES
    k: int = 4  # draft length of speculative and lookup modes; auto chooses its own, step by step
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = 0  # RANDOM_SEED or None: random
    max_tokens: int = 256
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_range("max_tokens", self.max_tokens, 1, whole=True)
        if self.mode in FIXED_K_MODES:
            # Auto drafts up to K_LONG too: a longer draft costs a batch that no CPU's calibration found to pay.
            check_range(f"k (the draft length of {self.mode} mode)", self.k, 1, K_LONG, whole=True)
        if self.seed is not None and self.seed != RANDOM_SEED:
            if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
                # numpy seeds with any whole number from 0 up.
                raise InvalidInputError(
                    f"seed must be {RANDOM_SEED} (random) or a whole number of at least 0, not {self.seed!r}"
                )

    def rng(self) -> np.random.Generator:
        """The generator the generation samples with: from the seed, or from the OS's entropy for a random one."""
        return np.random.default_rng(None if self.seed in (None, RANDOM_SEED) else self.seed)


@dataclass(frozen=True)
class TokenEvent:
    token: int
    text: str  # text released with this token ('' while a split character or a possible stop string waits)
    kind: str  # "accepted" | "corrected" | "bonus" | "target"
    draft_pos: int | None  # 1-based position in the draft (bonus: k+1); None for plain target tokens
    stats: Stats  # live: the same object is updated as the generation goes on


@dataclass(frozen=True)
class VerifyStep:
    drafts: list[int]
    logits: np.ndarray  # (len(drafts) + 1, V): what the target produced for [last, *drafts]
    n_accepted: int
    next_token: int


class Engine:
    """A target model and an optional draft model. One generation at a time: hold `lock` to share it."""

    def __init__(self, target: LlamaModel, draft: LlamaModel | None = None, policy: AutoPolicy = DEFAULT_POLICY):
        self.target = target
        self.draft = draft
        self.policy = policy  # auto mode's (policy.py)
        # What this engine answered before, in any mode, for auto mode to copy from in other requests.
        self.answers = EarlierAnswers(policy.earlier_tokens)
        self.lock = threading.Lock()
        self.last_stats: Stats | None = None
        # Sees every verify step with the target's raw logits: for tests and diagnostics, off by default.
        self.on_verify: Callable[[VerifyStep], None] | None = None
        self.cache_dir: Path | None = None  # where calibrations are kept; None: measured for this process only
        self._calibration: Calibration | None = None
        self._auto: AutoDrafter | None = None  # auto mode's learning, kept for the conversation it came from
        self._auto_prompt: list[int] = []
        self.draft_note: str | None = None  # how the draft runs, when Engine.load chose between it and a CPU copy
        self.draft_file = draft.path if draft is not None else None  # the file chosen, which a CPU copy stands in for
        self.on_progress: Callable[[str], None] | None = None  # hears of first-run work: calibrating

    @classmethod
    def load(
        cls,
        target_path: str | Path,
        draft_path: str | Path | None = None,
        config: BackendConfig = BackendConfig(),
        cpu_copy_dir: Path | None = None,
        on_progress: Callable[[str], None] | None = None,
        cache_dir: Path | None = None,
        policy: AutoPolicy = DEFAULT_POLICY,
        answers_dir: Path | None = None,
    ) -> Engine:
        """cpu_copy_dir: where a copy of the draft re-quantized for the CPU may be made and kept, to draft with
        when it measures faster (draft_copy.py); None, or a draft on the GPU: the draft file as it is.
        on_progress hears of that work, which takes seconds the first time, and later of calibration's. cache_dir:
        where auto mode's calibration of this machine is kept (None: measured again by each process). answers_dir:
        where the answers auto mode copies from in other requests are kept for the next process (None: this process
        only; they are what was said, so keeping them is the user's choice)."""
        note = None
        draft_file = Path(draft_path) if draft_path is not None else None
        if draft_file is not None:
            compat = check_pair(target_path, draft_path)  # headers only: refuse before loading weights
            if not compat.ok:
                raise IncompatibleModelsError(f"{draft_file.name} cannot draft for {Path(target_path).name}: {compat}")
            if cpu_copy_dir is not None and config.n_gpu_layers == 0:
                try:
                    choice = choose_draft(draft_file, config, cpu_copy_dir, on_progress)
                    draft_path, note = choice.path, choice.describe(draft_file)
                except (SpecchatError, OSError) as e:  # a faster copy is a bonus: the file still drafts
                    note = f"drafting with {draft_file.name} as it is (no CPU copy: {e})"
        target = LlamaModel(target_path, config)
        draft = LlamaModel(draft_path, config) if draft_path is not None else None
        engine = cls(target, draft, policy)
        engine.draft_note, engine.draft_file = note, draft_file
        engine.cache_dir = cache_dir
        if answers_dir is not None:  # one file a target: its tokens mean something to its vocabulary only
            name = hashlib.sha256(file_id(Path(target_path)).encode()).hexdigest()[:16]
            engine.answers.keep_in(answers_dir / f"answers-{name}.json", target.n_vocab)
        engine.on_progress = on_progress
        return engine

    def close(self) -> None:
        for model in (self.target, self.draft):
            if model is not None:
                model.close()

    # Prompts

    def chat_prompt(self, messages: Sequence[dict]) -> list[int]:
        """Render the target's own chat template (from its GGUF, in a Jinja sandbox) and tokenize it."""
        check_messages(messages)  # text reaches the engine here or in text_prompt, whoever calls: the UI, API or CLI
        target = self.target
        text = target.render_chat(messages)
        return target.tokenize(text, add_bos=target.add_bos and not text.startswith(target.token_text(target.bos)))

    def text_prompt(self, text: str) -> list[int]:
        """Plain text, tokenized as the start of a sequence: for completions without a chat template."""
        check_text(text, "the prompt")
        return self.target.tokenize(text, add_bos=self.target.add_bos)

    def chat(
        self, messages: Sequence[dict], settings: GenerationSettings, reading: Reading | None = None
    ) -> Iterator[TokenEvent]:
        return self.generate_tokens(self.chat_prompt(messages), settings, reading)

    def generate(
        self, prompt: str, settings: GenerationSettings, reading: Reading | None = None
    ) -> Iterator[TokenEvent]:
        return self.generate_tokens(self.text_prompt(prompt), settings, reading)

    # The loop

    def calibration(self) -> Calibration:
        """This machine's costs for this pair (measured once, then read from cache_dir); on_progress hears how a
        measurement goes, which takes seconds (not when the cache has one)."""
        if self._calibration is None:  # measuring decodes: callers sharing the engine hold `lock`, as to generate
            self._calibration = load_or_measure(
                self.target, self.draft, self.cache_dir, self.on_progress, self.draft_file
            )
        return self._calibration

    def drafter(self, mode: str, prompt: Sequence[int] = ()) -> Drafter:
        n_vocab = self.target.n_vocab
        if mode == "auto":
            return self._auto_drafter(list(prompt))
        if mode == "speculative":
            if self.draft is None:
                raise SpecchatError("speculative mode needs a draft model; choose one, or use lookup or plain mode")
            return ModelDrafter(self.draft, n_vocab)
        if mode == "lookup":
            return LookupDrafter(n_vocab)
        if mode == "plain":
            return Drafter(n_vocab)
        raise SpecchatError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")

    def _auto_drafter(self, prompt: list[int]) -> AutoDrafter:
        """auto mode learns acceptance per conversation and costs per machine.

        A prompt that begins with the previous auto prompt continues its conversation (a chat prompt holds
        every earlier turn) and keeps all that was learned; any other prompt keeps only the costs; another
        calibration or policy keeps nothing.
        """
        calibration = self.calibration()
        auto = self._auto
        kept = auto is not None and auto.calibration is calibration and auto.policy == self.policy
        previous = auto if kept else None
        if previous is not None and self._auto_prompt and prompt[: len(self._auto_prompt)] == self._auto_prompt:
            drafter = previous
        else:
            drafter = self._new_auto_drafter(calibration, previous.costs if previous is not None else None)
        self._auto, self._auto_prompt = drafter, prompt
        return drafter

    def _new_auto_drafter(self, calibration: Calibration, costs: LiveCosts | None) -> AutoDrafter:
        n_vocab = self.target.n_vocab
        model = ModelDrafter(self.draft, n_vocab) if self.draft is not None else None
        earlier = self.answers if self.policy.earlier_tokens > 0 else None
        return AutoDrafter(calibration, auto_lookup(n_vocab, self.policy), model, costs, self.policy, earlier)

    def generate_tokens(
        self, prompt: list[int], settings: GenerationSettings, reading: Reading | None = None
    ) -> Iterator[TokenEvent]:
        """Checks run now (fail fast); decoding starts at the first next().

        reading: hears how far the target has read the prompt, between its batches, and may stop the answer there
        (no token comes): a long prompt on a CPU takes minutes, and a Stop or a client gone should not wait for it.
        """
        if not prompt:
            raise SpecchatError("the prompt is empty")
        self.target.check_room(len(prompt) + 1)
        return self._loop(prompt, settings, self.drafter(settings.mode, prompt), reading)

    def _loop(
        self, prompt: list[int], settings: GenerationSettings, drafter: Drafter, reading: Reading | None
    ) -> Iterator[TokenEvent]:
        target, params = self.target, settings.sampling
        rng = settings.rng()
        stats = self.last_stats = Stats(mode=settings.mode, strategy=drafter.name)
        text = TextStream(settings.stop)
        context = list(prompt)  # prompt + output; context[-1] is `last`

        n_before, t0 = target.n_decoded, time.perf_counter()
        if not target.hold(context[:-1], reading):
            stats.finish_reason, stats.ended = "closed", time.perf_counter()
            return
        drafter.prefill(context)
        stats.prompt_tokens = target.n_decoded - n_before
        stats.prompt_s = time.perf_counter() - t0

        def emit(token: int, kind: str, pos: int | None) -> TokenEvent:
            context.append(token)
            stats.tokens += 1
            piece = text.push(target.piece(token))
            if token in target.eog_ids:
                stats.finish_reason = "eog"
            elif text.stopped:
                stats.finish_reason = "stop"
            elif stats.tokens >= settings.max_tokens:
                stats.finish_reason = "length"
            elif len(context) >= target.n_ctx:
                stats.finish_reason = "context"
            if stats.finish_reason is not None:
                piece += text.flush()
            return TokenEvent(token, piece, kind, pos, stats)

        try:
            while stats.finish_reason is None:
                # Never draft past max_tokens or the context: the last slot is the target's own token.
                room = min(settings.max_tokens - stats.tokens, target.n_ctx - len(context)) - 1
                k = min(settings.k, room) if settings.mode in FIXED_K_MODES else room  # auto caps its own
                t_draft = time.perf_counter()
                proposal = through_end(drafter.propose(context, k, params, rng), target.eog_ids)
                drafts = proposal.tokens
                if room > 0:  # the answer's last token is the target's own: the strategy that drafted stays on show
                    stats.strategy = proposal.reason
                t_verify = time.perf_counter()
                logits = target.decode([context[-1], *drafts], all_logits=True, copy=False)
                t_sample = time.perf_counter()
                if params.greedy:
                    n_acc, next_token = verify_greedy(drafts, logits)
                else:
                    n_acc, next_token = verify(drafts, proposal.rows, ProbabilityRows(logits, params), rng)
                target.rollback(len(context) + n_acc)
                drafter.observe(len(drafts), n_acc, t_verify - t_draft, t_sample - t_verify)
                stats.draft_s += t_verify - t_draft
                stats.verify_s += t_sample - t_verify
                stats.sample_s += time.perf_counter() - t_sample
                stats.iterations += 1
                stats.k = len(drafts)
                stats.record_verify(len(drafts) + 1, t_sample - t_verify)
                stats.record_draft(len(drafts), n_acc)
                if self.on_verify is not None:
                    self.on_verify(VerifyStep(list(drafts), logits.copy(), n_acc, next_token))

                new = [(t, "accepted", i + 1) for i, t in enumerate(drafts[:n_acc])]
                if not drafts:
                    new.append((next_token, "target", None))
                else:
                    new.append((next_token, "corrected" if n_acc < len(drafts) else "bonus", n_acc + 1))
                for token, kind, pos in new:
                    yield emit(token, kind, pos)
                    if stats.finish_reason is not None:
                        break
        finally:
            self.answers.add(prompt, context[len(prompt) :])
            stats.finish_reason = stats.finish_reason or "closed"
            stats.ended = time.perf_counter()
