"""Logits -> probabilities: one transform, shared by the draft and the target.

Exactness needs p_draft and p_target to come from the same transform; greedy (temperature 0) is the one-hot
at the argmax, so the same acceptance code serves both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# top-p first looks at this many candidates (argpartition, linear time) and sorts the whole vocabulary only
# when they do not hold the requested mass: a full sort of 151936 logits costs ~10 ms per position.
_TOP_P_CANDIDATES = 1024


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    min_p: float = 0.0  # 0.0: off

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1 or not 0 <= self.min_p <= 1:
            raise ValueError(f"invalid sampling parameters: {self}")


def one_hot(token: int, n_vocab: int) -> np.ndarray:
    p = np.zeros(n_vocab, dtype=np.float32)
    p[token] = 1.0
    return p


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """float32 probabilities over the vocabulary for one position."""
    if params.greedy:
        return one_hot(int(np.argmax(logits)), logits.shape[-1])
    z = logits.astype(np.float64) / params.temperature
    z -= z.max()
    p = np.exp(z)
    p /= p.sum()
    keep = _support(p, params)
    if keep is not None:
        mask = np.zeros_like(p)
        mask[keep] = p[keep]
        p = mask / mask.sum()
    return p.astype(np.float32)


def _support(p: np.ndarray, params: SamplingParams) -> np.ndarray | None:
    """Indices that survive top-k, top-p and min-p, or None when all do."""
    keep = None
    if params.top_k and params.top_k < p.size:
        keep = np.argpartition(p, -params.top_k)[-params.top_k :]
    if params.top_p < 1.0:
        pool = keep
        if pool is None:
            pool = np.arange(p.size)
            if p.size > _TOP_P_CANDIDATES:
                head = np.argpartition(p, -_TOP_P_CANDIDATES)[-_TOP_P_CANDIDATES:]
                pool = head if p[head].sum() >= params.top_p else pool
        order = pool[np.argsort(-p[pool], kind="stable")]
        mass = np.cumsum(p[order]) / (p[keep].sum() if keep is not None else 1.0)
        # Keep the smallest prefix whose mass reaches top_p (the token that crosses it included).
        keep = order[: int(np.searchsorted(mass, params.top_p)) + 1]
    if params.min_p > 0.0:
        floor = params.min_p * p.max()
        keep = np.flatnonzero(p >= floor) if keep is None else keep[p[keep] >= floor]
    return keep


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from a (not necessarily normalized) non-negative vector."""
    cdf = np.cumsum(p, dtype=np.float64)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), p.size - 1))
