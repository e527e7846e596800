"""What steers auto mode, as one value: each tunable constant with the reason for it, and where it was measured.

An experiment is a policy and a command, not a patch: `dataclasses.replace(DEFAULT_POLICY, explore_share=0.05)`
given to Engine, or `benchmarks/replay.py --policy-json '{"explore_share": 0.05}'` and `benchmarks/ab.py --variant`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace

from specchat.engine.calibration import K_LONG, K_MAX
from specchat.engine.drafters import RESUME_WINDOW


@dataclass(frozen=True)
class AutoPolicy:
    # Speculate only for this expected gain: calibration and acceptance are noisy, and a wrong bet costs a batch.
    min_gain: float = 1.05
    # The share of decoding time that probes of sources that do not pay may lose: bounds auto's loss (62529e9).
    explore_share: float = 0.02
    # Bands of lookup match lengths (the shortest of each) with the first and later positions' prior acceptance, near
    # what each band showed on the suite's greedy answers (a4ccf2b); later ones held at 0.8 below 16 tokens, so that
    # where only a batch of 16 pays (two EPYC cores) only a copy in progress bets on a 15-token draft.
    lookup_priors: tuple[tuple[int, float, float], ...] = (
        (2, 0.4, 0.8),
        (3, 0.6, 0.8),
        (4, 0.8, 0.8),
        (8, 0.9, 0.8),
        (16, 0.95, 0.95),
    )
    # Matches this long or longer are a likely copy (judged on plain steps); shorter ones are often chance repeats.
    copy_match: int = 4
    # The longest draft from a likely chance repeat: its first token is right under half the time (e8eaa6e).
    chance_k_max: int = 8
    # The longest draft but for a copy in progress; calibration measures batches up to K_MAX + 1.
    k_max: int = K_MAX
    # The longest draft of a copy in progress (the last band): a batch of K_LONG + 1 can cost less a token (9a2471a).
    k_long: int = K_LONG
    # How far past the latest accepted copy a short match counts as that copy resuming after an edit (drafters.py).
    resume_window: int = RESUME_WINDOW
    # Prior acceptance (first position, later ones) of a short match where a copy resumes: it passes more often.
    resume_prior: tuple[float, float] = (0.7, 0.8)
    # Same-family drafts for a chat model accept 70-90% (design.md): the middle. The Qwen2.5-Coder 0.5B's CPU copy
    # picks the 1.5B's greedy token on 81.6% of the built-in suite's tokens (docs/performance.md). What a listing of
    # models expects of a pair before it has generated anything (costmodel.expected_speedup).
    model_agreement: float = 0.8
    # What auto believes of the draft model before an answer has judged it: above model_agreement, since a belief
    # that the model does not pay is never tested. Where a chain pays only from 0.83 a position (the Zen 3's 7B-cost
    # prices) auto at 0.8 never drafted with a pair that agreed 0.88-0.91 there; at 0.88 it tries, and the first
    # model_prior_weight steps correct it (docs/experiments.md, "The draft model's threshold on the Zen 3's 7B-cost
    # prices"). At 0.9 it lost on the Zen 3's 1.5B prices (QA 0.89x replayed).
    model_prior: float = 0.88
    # How many observations a tracker's prior counts for, and how fast old ones fade: set, not tuned by measurement.
    tracker_weight: float = 2.0
    # The draft model's prior is the pair's agreement measured over a whole suite, worth more than a lookup band's:
    # at weight 2 one rejected first draft of an answer (the draft most often wrong) took it to 0.53, and on a
    # 7B-cost target auto then left the model unused for the rest of the answer (code generation replayed at 1.08x
    # plain, 1.41x at weight 8; other machines' replays moved by 0.01 or less).
    model_prior_weight: float = 8.0
    tracker_decay: float = 0.9
    # The draft model's observations fade slower than a lookup band's: how often the pair agrees holds over an answer,
    # where a band's matches change with the text. At 0.9 the last ten steps counted against a prior worth 8, and a
    # long edit where the 0.5B agreed nine times in ten drafted 3 a step; at 0.98, 7 (docs/experiments.md).
    model_decay: float = 0.98
    # How far each measured step moves the live costs from calibration's toward what steps really take (061b251).
    cost_weight: float = 0.2
    # How far each step moves the costs it did not measure back toward calibration's: a cost measured while other
    # work ran can price a source out, and a source not used is not measured again; about 100 steps forget most of it.
    cost_relax: float = 0.01
    # Earlier answers (to other prompts) auto may copy from, in tokens: bounded, since each step scans them all;
    # 0: none are kept.
    earlier_tokens: int = 16384
    # Prior acceptance (first position, later ones) of a match of copy_match tokens or more in an earlier answer: set,
    # not measured; a copy less often than such a match in this conversation (the 4-gram band's 0.8).
    earlier_prior: tuple[float, float] = (0.6, 0.8)
    # How far a lookup band's pooled acceptance of its later positions reaches past the deepest position judged yet, as
    # a multiple (a draft of 3 that passes argues for 7, 7 for 15); further, no more than the band's prior. Unbounded,
    # a band bet 15 drafts after three 3-token drafts passed, where on a Zen 4 a batch of 16 costs 7.5 steps, and lost
    # (RAG 0.84-0.89x plain there; docs/experiments.md, "How far a short draft's success reaches").
    borrow_reach: float = 2.0
    # Whether plain steps judge the undrafted proposal of a likely copy: evidence for free (85839ed, zen5-shadow-ab).
    judge_shadow: bool = True
    # Whether prompt lookup's match yields to the draft model where the model's plan promises more: first come, a
    # chance repeat in prose or code took steps the model would have drafted further (docs/experiments.md).
    lookup_yields: bool = True

    def __post_init__(self) -> None:
        bands = [n for n, _, _ in self.lookup_priors]
        if not bands or bands[0] < 1 or bands != sorted(set(bands)):
            raise ValueError(f"lookup_priors: bands must be distinct positive match lengths in order, not {bands}")

    @property
    def lookup_bands(self) -> tuple[int, ...]:
        return tuple(n for n, _, _ in self.lookup_priors)

    def with_changes(self, text: str) -> AutoPolicy:
        """This policy with the fields a JSON object names, e.g. '{"explore_share": 0.05}' (lists stand for tuples)."""
        changes = json.loads(text)
        if not isinstance(changes, dict):
            raise ValueError(f"a policy change is a JSON object of fields, not {text!r}")
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"AutoPolicy has no field {', '.join(sorted(unknown))}")
        return replace(self, **{name: _tuples(value) for name, value in changes.items()})


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


DEFAULT_POLICY = AutoPolicy()
