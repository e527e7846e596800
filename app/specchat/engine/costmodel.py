"""When does speculation pay? The cost model of design.md, as small pure functions.

t1: the target's single-token decode time; c: a draft token's cost over t1; r(n): a target batch of n tokens
over t1; alpha: per-token acceptance. With k drafts an iteration emits E(k) tokens on average and costs
k*c + r(k+1) target steps, so the speedup over plain decoding is S(k) = E(k) / (k*c + r(k+1)).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from specchat.engine.calibration import Calibration
from specchat.engine.policy import DEFAULT_POLICY, AutoPolicy

NOT_MEASURED = "not measured yet (load the pair once)"


def expected_tokens(alpha: float, k: int) -> float:
    """E(k) = (1 - alpha^(k+1)) / (1 - alpha): accepted drafts plus the correction or bonus token."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_tokens_by_length(rates: Sequence[float]) -> list[float]:
    """E(k) for k = 1..len(rates), with per-position acceptance: rates[i] = P(draft i+1 accepted | drafts 1..i
    accepted). Every length in one pass: auto mode weighs them all at every step."""
    by_length, total, survive = [], 1.0, 1.0
    for a in rates:
        survive *= a
        total += survive
        by_length.append(total)
    return by_length


def interpolate_r(r: Mapping[int, float]) -> Callable[[int], float]:
    """r(n) from measured points, linear between them and beyond the last one; r(1) = 1."""
    points = sorted({1: 1.0, **r}.items())

    def r_of(n: int) -> float:
        for (n0, r0), (n1, r1) in zip(points, points[1:]):
            if n <= n1:
                return r0 + (r1 - r0) * (n - n0) / (n1 - n0)
        if len(points) == 1:
            return float(n)
        (n0, r0), (n1, r1) = points[-2], points[-1]
        return r1 + (r1 - r0) / (n1 - n0) * (n - n1)

    return r_of


def step_cost(k: int, c: float, r: Callable[[int], float]) -> float:
    """A step with k drafts, in target steps: k draft tokens and a target batch of k + 1."""
    return k * c + r(k + 1)


def speedup(alpha: float, k: int, c: float, r: Callable[[int], float]) -> float:
    """S(k) at one acceptance alpha for every position."""
    if k == 0:
        return 1.0
    return expected_tokens(alpha, k) / step_cost(k, c, r)


def speedups(rates: Sequence[float], c: float, r: Callable[[int], float]) -> list[float]:
    """S(k) for k = 1..len(rates), with per-position acceptance (as in expected_tokens_by_length)."""
    return [e / step_cost(k, c, r) for k, e in enumerate(expected_tokens_by_length(rates), 1)]


def best_k(alpha: float, c: float, r: Callable[[int], float], k_max: int) -> tuple[int, float]:
    """The draft length that maximizes S(k) over 0..k_max; k = 0 (plain decoding) has S = 1."""
    return max(((k, speedup(alpha, k, c, r)) for k in range(k_max + 1)), key=lambda ks: ks[1])


def expected_speedup(cal: Calibration, policy: AutoPolicy = DEFAULT_POLICY) -> tuple[int, float]:
    """The draft model's best length and S(k) at this calibration's costs, before anything is known of the answers:
    at the pair's usual agreement (the policy's model_agreement), over the draft lengths auto may choose. (0, 1.0): none
    pays. Auto may do better (prompt lookup, a draft that agrees more often) or worse (steps cost more than timed)."""
    if cal.c is None:
        return 0, 1.0
    return best_k(policy.model_agreement, cal.c, interpolate_r(cal.r), policy.k_max)


def expected_text(cal: Calibration | None, policy: AutoPolicy = DEFAULT_POLICY) -> str:
    """What speculation is expected to buy on this machine, in words, e.g. "auto: about 1.5x here"."""
    if cal is None:
        return NOT_MEASURED
    if cal.c is None:
        return "auto: prompt lookup only (no draft model)"
    _, gain = expected_speedup(cal, policy)
    if gain < policy.min_gain:
        return "auto: about 1.0x here (the draft model costs too much on this machine; prompt lookup still drafts)"
    return f"auto: about {gain:.1f}x here"
