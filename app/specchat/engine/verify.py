"""The exact acceptance rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

Accept draft token d_i with probability min(1, p_target[i-1](d_i) / p_draft[i-1](d_i)); at the first
rejection draw from normalize(max(0, p_target - p_draft)); after k acceptances draw a bonus token from
p_target[k]. The emitted tokens are then distributed exactly as the target's own samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specchat.engine.sampling import sample


def verify(
    draft_tokens: Sequence[int],
    p_draft: np.ndarray | None,
    p_target: Sequence[np.ndarray],
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Return (n_accepted, next_token).

    draft_tokens: k proposed ids; p_draft: (k, V) the distributions they were drawn from, or None for
    one-hot rows at the drafted tokens (prompt lookup's: 15 such rows of 151936 floats are not worth building);
    p_target: k+1 rows of V, row i the target's distribution after the prefix plus the first i draft tokens; only
    the rows up to the first rejection are read (a (k+1, V) array, or sampling.ProbabilityRows, which computes them
    as they are read).
    """
    k = len(draft_tokens)
    if len(p_target) != k + 1 or (k and p_draft is not None and p_draft.shape[0] != k):
        shape = None if p_draft is None else p_draft.shape
        raise ValueError(f"shapes do not match k={k}: p_draft {shape}, {len(p_target)} rows of p_target")
    for i, token in enumerate(draft_tokens):
        target_row = p_target[i]  # read once: ProbabilityRows computes a row on each read
        q, p = 1.0 if p_draft is None else float(p_draft[i, token]), float(target_row[token])
        # q == 0 cannot come from sampling the draft, but a drafter may propose anything: p > 0 accepts.
        if p >= q or rng.random() * q < p:
            continue
        if p_draft is None:
            residual = target_row.copy()
            residual[token] = 0.0
        else:
            residual = np.maximum(target_row - p_draft[i], 0.0)
        # A zero residual means p_target <= p_draft everywhere, i.e. they are equal: rejection had
        # probability 0 but floating point got here; the target row itself is then the right law.
        return i, sample(residual if residual.sum() > 0 else target_row, rng)
    return k, sample(p_target[k], rng)


def verify_greedy(draft_tokens: Sequence[int], target_rows: np.ndarray) -> tuple[int, int]:
    """verify() at temperature 0, where every row is one-hot at its argmax: a draft passes while it is the target's
    argmax. target_rows may be the raw logits, whose argmax that is: no probabilities need computing."""
    best = target_rows.argmax(axis=1)
    for i, token in enumerate(draft_tokens):
        if token != best[i]:
            return i, int(best[i])
    return len(draft_tokens), int(best[len(draft_tokens)])
