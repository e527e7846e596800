"""Running statistics of one generation: speed, acceptance, and where the time went."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


@dataclass
class Stats:
    mode: str = "plain"
    prompt_tokens: int = 0  # tokens of the prompt actually decoded (after KV prefix reuse)
    prompt_s: float = 0.0  # time to process them, reported apart from generation speed
    tokens: int = 0  # tokens emitted
    iterations: int = 0  # target verify (or plain decode) steps
    drafted: int = 0
    accepted: int = 0
    drafted_by_pos: list[int] = field(default_factory=list)  # index i: drafts proposed at position i+1
    accepted_by_pos: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0  # target decode time (verify batches, or single-token steps in plain mode)
    sample_s: float = 0.0  # Python-side work: probabilities, acceptance, detokenization
    verify_s_by_n: dict[int, float] = field(default_factory=dict)  # target batch size -> total seconds
    verify_calls_by_n: dict[int, int] = field(default_factory=dict)
    k: int = 0  # draft length used in the latest iteration
    strategy: str = ""  # what the loop is doing and why (auto mode explains itself here)
    finish_reason: str | None = None  # "eog", "length" (max tokens), "context" (full), "stop", "closed" once finished
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None

    @property
    def wall_s(self) -> float:
        """Generation time, prompt processing excluded."""
        end = self.ended if self.ended is not None else time.perf_counter()
        return max(end - self.started - self.prompt_s, 1e-9)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.tokens else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        """Mean draft tokens accepted per verify step."""
        return self.accepted / self.iterations if self.iterations else 0.0

    @property
    def acceptance_by_pos(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_by_pos, self.drafted_by_pos)]

    def record_draft(self, n_drafted: int, n_accepted: int) -> None:
        grow = n_drafted - len(self.drafted_by_pos)
        if grow > 0:
            self.drafted_by_pos += [0] * grow
            self.accepted_by_pos += [0] * grow
        for i in range(n_drafted):
            self.drafted_by_pos[i] += 1
        for i in range(n_accepted):
            self.accepted_by_pos[i] += 1
        self.drafted += n_drafted
        self.accepted += n_accepted

    def record_verify(self, n: int, seconds: float) -> None:
        self.verify_s_by_n[n] = self.verify_s_by_n.get(n, 0.0) + seconds
        self.verify_calls_by_n[n] = self.verify_calls_by_n.get(n, 0) + 1

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("started")
        d.pop("ended")
        d.update(
            wall_s=self.wall_s,
            tokens_per_s=self.tokens_per_s,
            acceptance_rate=self.acceptance_rate,
            mean_accepted=self.mean_accepted,
            acceptance_by_pos=self.acceptance_by_pos,
        )
        return d
