"""Where draft tokens come from: a draft model, prompt lookup (n-grams), or nothing (plain decoding)."""

from __future__ import annotations

import hashlib
import json
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from specchat.engine.llama_backend import LlamaModel
from specchat.engine.sampling import SamplingParams, probabilities, sample


@dataclass(frozen=True)
class Proposal:
    """A drafter's answer for one step."""

    tokens: list[int]  # up to k tokens to follow the context
    rows: np.ndarray | None  # the (n, V) rows they were drawn from; None: one-hot at the tokens, as verify() reads it
    reason: str  # what the drafter is doing, and why, shown to the user


def through_end(proposal: Proposal, eog_ids: frozenset[int]) -> Proposal:
    """The proposal up to and with its first end-of-generation token: the answer ends there if the target takes it,
    and the drafts after it are dropped unread if not, so verifying them would only lengthen the batch (a copy from
    an earlier turn runs on into the chat template's next turn)."""
    end = next((i for i, token in enumerate(proposal.tokens) if token in eog_ids), len(proposal.tokens))
    if end + 1 >= len(proposal.tokens):
        return proposal
    rows = None if proposal.rows is None else proposal.rows[: end + 1]
    return replace(proposal, tokens=proposal.tokens[: end + 1], rows=rows)


class Drafter:
    name = "plain"  # what it does, shown to the user until its first proposal gives a reason

    def __init__(self, n_vocab: int):
        self.n_vocab = n_vocab  # the target's

    def propose(self, context: list[int], k: int, params: SamplingParams, rng: np.random.Generator) -> Proposal:
        """Up to k tokens to follow context (prompt + output so far). The base class drafts nothing: plain decoding."""
        return Proposal([], None, self.name)

    def prefill(self, context: list[int]) -> None:
        """Process the prompt along with the target, so that it is not counted as drafting time."""

    def observe(self, n_drafted: int, n_accepted: int, draft_s: float, verify_s: float) -> None:
        """What the target made of the latest proposal, and what drafting and verifying it took."""


class ModelDrafter(Drafter):
    name = "draft model"

    def __init__(self, model: LlamaModel, n_vocab: int):
        super().__init__(n_vocab)  # compat allows the draft a few padding rows more or less
        self.model = model
        # Optional gate, asked before each draft token: (drafted so far, k, the draft's top probability at the next
        # position, its top token there) -> draft it? It may decline the first: the step is then a plain one. It
        # reads the distribution, not the token drawn from it, so that the draft's length is settled before its
        # tokens are drawn, which keeps sampled acceptance exact (dropping a token for its own draw would bias it).
        self.go_on: Callable[[int, int, float, int], bool] | None = None
        self.caught_up = 0  # tokens of context the latest proposal read before drafting: 1-2 after a step of its own

    def prefill(self, context: list[int]) -> None:
        self.model.hold(context[:-1])

    def _fit(self, logits: np.ndarray) -> np.ndarray:
        if logits.size == self.n_vocab:
            return logits
        fitted = np.full(self.n_vocab, -np.inf, dtype=np.float32)
        n = min(self.n_vocab, logits.size)
        fitted[:n] = logits[:n]
        return fitted

    def propose(self, context, k, params, rng):
        if k <= 0:
            return super().propose(context, k, params, rng)
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        # The draft's cache holds an older context; eval_prefix decodes only what it has not seen.
        read = self.model.n_decoded
        logits = self.model.eval_prefix(context)
        self.caught_up = self.model.n_decoded - read
        while True:
            logits = self._fit(logits)
            p = None if params.greedy else probabilities(logits, params)
            top = int(np.argmax(logits)) if p is None or self.go_on is not None else None
            if self.go_on is not None and not self.go_on(len(tokens), k, _sureness(logits, p), top):
                break
            if p is None:  # greedy drafts are one-hot rows, which verify() takes as None
                tokens.append(top)
            else:
                tokens.append(sample(p, rng))
                rows.append(p)
            if len(tokens) == k or tokens[-1] in self.model.eog_ids:  # through_end would drop what follows
                break
            logits = self.model.decode([tokens[-1]])[0]
        return Proposal(tokens, np.stack(rows) if rows else None, self.name)


def _sureness(logits: np.ndarray, p: np.ndarray | None) -> float:
    """The draft's top probability: about how often the target takes its token (on the built-in suite's greedy
    answers the two agree within a few points at every level). Greedy (p None) or one-hot rows: the untempered
    softmax's."""
    if p is not None and p.max() < 1.0:
        return float(p.max())
    z = np.exp(logits - logits.max())
    return float(1.0 / z.sum())


def match_ends(
    ids: np.ndarray, tokens: Sequence[int], needle: Sequence[int], n_min: int, n_max: int
) -> tuple[list[int], int]:
    """Where the windows of a token sequence equal to needle's last n tokens end, for the longest n from n_min to
    n_max that matches somewhere, and that n; ([], 0) where none does. ids and tokens hold the same sequence, as an
    array and as a list.

    This runs at every step of auto mode, right after a decode has flushed the CPU's caches, where each numpy call
    costs far more than its arithmetic (sliding_window_view and a numpy extension loop took 0.24 ms a step): numpy
    for the one scan of the whole sequence, plain Python on the few matches it finds.
    """
    n, n_max = n_min, min(n_max, len(needle) - 1)
    size = len(ids)
    if n > n_max or n > size:
        return [], 0
    match = ids[: size - n + 1] == needle[-n]
    for j in range(1, n):
        match &= ids[j : size - n + 1 + j] == needle[-n + j]
    ends = (np.flatnonzero(match) + n).tolist()
    # Longer matches are among these: extend them while the token before still matches.
    while ends and n < n_max:
        before = needle[-n - 1]
        longer = [end for end in ends if end > n and tokens[end - n - 1] == before]
        if not longer:
            break
        ends, n = longer, n + 1
    return (ends, n) if ends else ([], 0)


class EarlierAnswers:
    """Answers this process gave before, for auto mode to copy from: agents and editors send the same files again
    and get much the same answers, in requests that share no context. The oldest go first past max_tokens. An
    answer is offered to other prompts only: a prompt asked again (a benchmark's repeat, a retry) is answered anew,
    not from its own earlier answer.

    keep_in(path) keeps them in a file too, for the next process to copy from."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.path: Path | None = None
        self._answers: deque[tuple[str, list[int]]] = deque()  # (the prompt's digest, the answer)
        self._size = 0

    def keep_in(self, path: Path, n_vocab: int) -> None:
        """Take the answers kept at path (tokens of a vocabulary of n_vocab) and write there after each answer. A
        file that cannot be read is a cache lost, not an error: it starts afresh. Two processes keeping the same
        file each write what they hold: the last one's answers win."""
        for asked, answer in read_answers(path, n_vocab):
            self._append(asked, answer)
        self.path = path

    def add(self, prompt: list[int], answer: list[int]) -> None:
        if not answer or len(answer) > self.max_tokens:
            return
        self._append(prompt_digest(prompt), list(answer))
        self._keep()

    def _append(self, asked: str, answer: list[int]) -> None:
        self._answers.append((asked, answer))
        self._size += len(answer)
        while self._size > self.max_tokens:
            self._size -= len(self._answers.popleft()[1])

    def clear(self) -> None:
        self._answers.clear()
        self._size = 0
        self._keep()

    def _keep(self) -> None:
        if self.path is None:
            return
        # Written whole and renamed into place: a process killed mid-write leaves the previous file, never half one.
        part = self.path.with_name(self.path.name + ".part")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            part.write_text(json.dumps({"answers": [[asked, answer] for asked, answer in self._answers]}))
            os.replace(part, self.path)
        except OSError:  # a full or read-only disk: this process still copies from what it holds
            pass

    def for_prompt(self, prompt: list[int]) -> Corpus | None:
        """The answers to other prompts, newest last, as one sequence to search (SEPARATOR between answers); None
        where there are none."""
        key = prompt_digest(prompt)
        tokens: list[int] = []
        for asked, answer in self._answers:
            if asked != key:
                tokens += [SEPARATOR, *answer]
        return Corpus(tokens) if tokens else None


def prompt_digest(prompt: Sequence[int]) -> str:
    """A prompt's name in EarlierAnswers, the same in every process and Python version."""
    return hashlib.blake2b(np.asarray(prompt, dtype=np.int64).tobytes(), digest_size=16).hexdigest()


def read_answers(path: Path, n_vocab: int) -> list[tuple[str, list[int]]]:
    """What EarlierAnswers kept at path, oldest first; [] where there is no such file, it cannot be read or it
    holds a token past n_vocab (a file edited by hand, or of another model)."""
    try:
        answers = [(asked, answer) for asked, answer in json.loads(path.read_text())["answers"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []

    def whole(asked: object, answer: object) -> bool:
        return (
            isinstance(asked, str)
            and isinstance(answer, list)
            and all(type(t) is int and 0 <= t < n_vocab for t in answer)
        )

    return answers if all(whole(asked, answer) for asked, answer in answers) else []


SEPARATOR = -1  # between answers in a Corpus: no token id, so no match spans two answers


class Corpus:
    """Earlier answers to search for the context's last n-gram."""

    def __init__(self, tokens: list[int]):
        self.tokens, self.ids = tokens, np.asarray(tokens, dtype=np.int64)

    def find(self, context: list[int], k: int, n_min: int, n_max: int) -> tuple[list[int], int]:
        """Up to k tokens that followed the context's last n-gram (n_min to n_max, longest first) in the newest
        answer that has it, and n; ([], 0) where none does."""
        ends, n = match_ends(self.ids, self.tokens, context, n_min, n_max)
        ends = [end for end in ends if end < len(self.tokens) and self.tokens[end] != SEPARATOR]  # not an answer's end
        if not ends:
            return [], 0
        copied = self.tokens[ends[-1] : ends[-1] + k]
        if SEPARATOR in copied:
            copied = copied[: copied.index(SEPARATOR)]
        return copied, n


# How far past the latest accepted copy a match still counts as that copy resuming: an edit replaces a few
# tokens of the input, then the output goes on repeating it. On the built-in suite's greedy answers, a 2- or
# 3-token match there was right 60-70% of the time; elsewhere 44%.
RESUME_WINDOW = 8


class LookupDrafter(Drafter):
    """Prompt lookup decoding: continue an earlier occurrence of the context's last n-gram.

    Longer n-grams first. Among equal matches it prefers one just past where the latest accepted copy ended
    (output that repeats its input moves through it in order, and resumes there after an edit), else takes the
    earliest. Costs no model call; its draft distribution is one-hot, which the acceptance rule handles exactly.
    """

    name = "prompt lookup"

    def __init__(self, n_vocab: int, ngram_max: int = 3, ngram_min: int = 1, resume_window: int = RESUME_WINDOW):
        super().__init__(n_vocab)
        self.ngram_max, self.ngram_min, self.resume_window = ngram_max, ngram_min, resume_window
        self._copy_from = -1  # where in the context the latest proposal was copied from
        self._copied_to = -resume_window - 1  # just past the source of the latest accepted copy
        self.match_len = 0  # length of the n-gram the latest proposal matched
        self.resuming = False  # whether the latest proposal's source lies just past the latest accepted copy

    def find(self, context: list[int], k: int) -> list[int]:
        # The context but its last token is searched: the suffix itself is no earlier occurrence.
        ends, n = match_ends(np.asarray(context)[:-1], context, context, self.ngram_min, self.ngram_max)
        if not ends:
            return []
        near = [end for end in ends if self._copied_to < end <= self._copied_to + self.resume_window]
        self.resuming = bool(near)
        self._copy_from = (near or ends)[0]
        self.match_len = n
        return context[self._copy_from : self._copy_from + k]

    def observe(self, n_drafted: int, n_accepted: int, draft_s: float = 0.0, verify_s: float = 0.0) -> None:
        if n_drafted and n_accepted:
            self._copied_to = self._copy_from + n_accepted

    def propose(self, context, k, params, rng):
        tokens = self.find(context, k) if k > 0 else []
        if not tokens:
            return super().propose(context, k, params, rng)
        return Proposal(tokens, None, self.name)  # one-hot at the tokens
