"""`auto` mode: per verify step, draft with whatever the cost model says is fastest here, or not at all.

Sources: prompt lookup (costs nothing, one-hot drafts), the draft model (costs c per token), or none. Each
source's acceptance is tracked per draft position as it happens; the step's draft length maximizes
E(k) / (k c + r(k+1)) with this machine's calibrated r(n) and c. A source that would lose is not used, but is
probed now and then, in case the text turns predictable, out of a budget that bounds what probing may lose; a
plain step also judges, for free, what prompt lookup would have drafted from a likely copy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numpy as np

from specchat.engine.calibration import BATCH_SIZES, K_MAX, Calibration
from specchat.engine.costmodel import interpolate_r, speedups, step_cost
from specchat.engine.drafters import Corpus, Drafter, EarlierAnswers, LookupDrafter, ModelDrafter, Proposal
from specchat.engine.policy import DEFAULT_POLICY, AutoPolicy
from specchat.engine.sampling import SamplingParams

# What a draft model reads before drafting after a step of its own: the last draft (a step that takes every draft
# leaves it unread) and the target's token.
CAUGHT_UP_BY_STEP = 2


def auto_lookup(n_vocab: int, policy: AutoPolicy = DEFAULT_POLICY) -> LookupDrafter:
    """Prompt lookup as auto mode uses it: unigram matches are too often wrong to pay for a verify batch."""
    bands = policy.lookup_bands
    return LookupDrafter(n_vocab, ngram_max=bands[-1], ngram_min=bands[0], resume_window=policy.resume_window)


def _band_name(bands: tuple[int, ...], n: int) -> str:
    i = bands.index(n)
    if i == len(bands) - 1:
        return f"{n}-gram or longer"
    upper = bands[i + 1] - 1
    return f"{n}-gram" if upper == n else f"{n}- to {upper}-gram"


class AcceptanceTracker:
    """P(draft i accepted | drafts before it accepted), per position: decayed counts, shrunk toward a prior.

    The first position's prior is fixed; the later positions' prior is their pooled rate so far, so a position
    never drafted yet borrows what the positions before it showed: a copy whose 3-token drafts all pass argues
    for trying 7. Only so far: past `reach` times the deepest position judged yet, a position borrows no more than
    later_prior, so 3-token drafts that pass do not argue for trying 15.
    """

    def __init__(
        self,
        prior: float,
        later_prior: float | None = None,
        weight: float = DEFAULT_POLICY.tracker_weight,
        decay: float = DEFAULT_POLICY.tracker_decay,
        k_max: int = DEFAULT_POLICY.k_max,
        reach: float = DEFAULT_POLICY.borrow_reach,
    ):
        """prior: the first position's acceptance before any evidence; later_prior: the others' (default: the same)."""
        self.prior = prior
        self.later_prior = prior if later_prior is None else later_prior
        self.weight, self.decay, self.reach = weight, decay, reach
        # Plain lists: auto mode reads the rates at every step, right after a decode has flushed the CPU's
        # caches, where numpy's per-call cost on these few numbers is what dominates (68 against 19 us a step).
        self.hits = [0.0] * k_max
        self.tries = [0.0] * k_max
        self.judged = 1  # the deepest position judged so far (counts fade, never to zero): what `reach` multiplies

    def rates(self, k: int) -> list[float]:
        w = self.weight
        later = (sum(self.hits[1:]) + w * self.later_prior) / (sum(self.tries[1:]) + w)
        capped = min(later, self.later_prior)
        priors = [self.prior] + [later if i <= self.reach * self.judged else capped for i in range(1, k)]
        return [(h + w * p) / (t + w) for h, t, p in zip(self.hits, self.tries, priors)]

    def update(self, n_drafted: int, n_accepted: int) -> None:
        seen = min(n_accepted + 1, n_drafted)  # positions past the first rejection were never judged
        self.judged = max(self.judged, seen)
        for i in range(seen):
            self.hits[i] = self.hits[i] * self.decay + (i < n_accepted)
            self.tries[i] = self.tries[i] * self.decay + 1


def _plausible(n: int, ratio: float) -> float:
    """A batch of n costs between one step and n steps (it could be decoded as n steps); a measurement outside
    that range was disturbed, by other work on the machine say, and must not rule out a draft length for good."""
    return min(max(ratio, 1.0), float(n))


class LiveCosts:
    """The cost model's t1, r(n) and c: calibrated at first, then following what this run's steps really take.

    Calibration measures short batches at one context length; a real answer runs at longer contexts, with the
    loop's own work and with whatever else the machine is doing, so each measured step moves the estimate.
    Costs are kept as ratios to t1, so a machine that slows down as a whole leaves the unmeasured ratios right.
    """

    def __init__(
        self,
        calibration: Calibration,
        weight: float = DEFAULT_POLICY.cost_weight,
        relax: float = DEFAULT_POLICY.cost_relax,
    ):
        r = interpolate_r(calibration.r)
        self.t1 = calibration.t1
        # Calibrations from before K_LONG lack its batch: a long copy then drafts no more than K_MAX.
        self.calibrated = {n: _plausible(n, r(n)) for n in BATCH_SIZES if n <= K_MAX + 1 or n in calibration.r}
        self.ratios = dict(self.calibrated)
        self.calibrated_c = self.c = calibration.c or 0.0
        self.weight, self.relax = weight, relax

    def _move(self, old: float, new: float, weight: float | None = None) -> float:
        return old + (self.weight if weight is None else weight) * (new - old)

    def observe(self, n_batch: int, verify_s: float, n_model_drafts: int, draft_s: float) -> None:
        """n_model_drafts: the draft tokens whose decoding took draft_s; 0 where the step says nothing of their cost."""
        for n, ratio in self.ratios.items():
            if n != n_batch:
                self.ratios[n] = self._move(ratio, self.calibrated[n], self.relax)
        if not n_model_drafts:
            self.c = self._move(self.c, self.calibrated_c, self.relax)
        if n_batch == 1:
            self.t1 = self._move(self.t1, verify_s)
        elif n_batch in self.ratios:
            self.ratios[n_batch] = _plausible(n_batch, self._move(self.ratios[n_batch], verify_s / self.t1))
        if n_model_drafts:
            self.c = self._move(self.c, draft_s / n_model_drafts / self.t1)

    def r(self, n: int) -> float:
        """A batch size that was not measured is priced out of every plan."""
        return 1.0 if n <= 1 else self.ratios.get(n, math.inf)


class SurenessScale:
    """How often the target takes a draft model's token, for the draft's top probability (its sureness) there:
    sureness times the accepted tokens over their summed sureness, decayed counts that start as if the draft were
    calibrated (a small draft of the target's family is, within a few points at every level, on the built-in
    suite's greedy answers). A draft that undersells itself, a model drafting for itself say, scales up."""

    def __init__(self, weight: float, decay: float):
        self.weight, self.decay = weight, decay
        self.accepted = self.sureness = 0.0

    def acceptance(self, sureness: float) -> float:
        return min(1.0, sureness * (self.accepted + self.weight) / (self.sureness + self.weight))

    def update(self, sureness: float, accepted: bool) -> None:
        self.accepted = self.accepted * self.decay + accepted
        self.sureness = self.sureness * self.decay + sureness


def _judge_first(tracker: AcceptanceTracker, accepted: bool) -> None:
    tracker.update(1, int(accepted))


class Source:
    """One way of drafting, with its acceptance and its cost per draft token in target steps."""

    def __init__(
        self,
        name: str,
        cost: float,
        priors: tuple[float, float],
        k_max: int,
        policy: AutoPolicy,
        prior_weight: float | None = None,
        decay: float | None = None,
        reach: float | None = None,
    ):
        """priors: acceptance at the first draft position and the later ones before any evidence, worth prior_weight
        observations (default: the policy's tracker_weight); decay: how fast old observations fade (default: the
        policy's tracker_decay); reach: AcceptanceTracker's (default: the policy's borrow_reach)."""
        self.name, self.cost, self.k_max = name, cost, k_max
        weight = policy.tracker_weight if prior_weight is None else prior_weight
        decay = policy.tracker_decay if decay is None else decay
        reach = policy.borrow_reach if reach is None else reach
        self.tracker = AcceptanceTracker(*priors, weight, decay, k_max, reach)
        self.probe_loss_s = 0.0  # what probes of this source have lost against plain steps (less what they won)

    def speedups(self, r, k_max: int) -> list[float]:
        """Expected speedup over plain decoding for draft lengths 1..k_max."""
        return speedups(self.tracker.rates(k_max), self.cost, r)

    def plan(self, r, k_max: int, min_gain: float) -> tuple[int, float]:
        """The best draft length and its expected speedup; (0, 1.0) when no length gains min_gain."""
        s = self.speedups(r, k_max)
        k = int(np.argmax(s)) + 1
        return (k, s[k - 1]) if s[k - 1] >= min_gain else (0, 1.0)

    def ceiling(self, r, k_max: int) -> tuple[int, float]:
        """The draft length and speedup that perfect acceptance would give: below 1, this source never pays here."""
        return max(enumerate(speedups([1.0] * k_max, self.cost, r), 1), key=lambda ks: ks[1])

    def can_probe(self, k: int, r, t1: float, allowance_s: float) -> bool:
        """Whether what is left of the allowance covers a probe of k drafts that all fail (a catch-up of the
        cache comes on top)."""
        return allowance_s - self.probe_loss_s >= (step_cost(k, self.cost, r) - 1.0) * t1


class AutoDrafter(Drafter):
    name = "auto: starting"

    def __init__(
        self,
        calibration: Calibration,
        lookup: LookupDrafter,
        model: ModelDrafter | None,
        costs: LiveCosts | None = None,
        policy: AutoPolicy = DEFAULT_POLICY,
        earlier: EarlierAnswers | None = None,
    ):
        """costs: what earlier generations learned of this calibration's costs (they belong to the machine);
        earlier: answers to other requests, to copy from too."""
        super().__init__(lookup.n_vocab)
        self.calibration, self.policy = calibration, policy
        self.costs = costs or LiveCosts(calibration, policy.cost_weight, policy.cost_relax)
        self.r = self.costs.r
        self.lookup, self.model = lookup, model
        # A longer match predicts a copy better: prose repeats pairs of tokens by chance, edited code and
        # summaries repeat whole lines. Each band of match lengths learns its own acceptance, from its prior.
        bands = policy.lookup_bands

        def longest(n: int) -> int:
            return policy.chance_k_max if n < policy.copy_match else policy.k_long if n == bands[-1] else policy.k_max

        self.lookup_sources = {
            n: Source(f"prompt lookup ({_band_name(bands, n)} match)", 0.0, (first, later), longest(n), policy)
            for n, first, later in policy.lookup_priors
        }
        # A short match just past the latest accepted copy is that copy resuming after an edit, not a chance
        # repeat: it learns apart from the short matches elsewhere, which in prose mostly fail.
        self.resume_source = Source(
            "prompt lookup (copy resuming after an edit)", 0.0, policy.resume_prior, policy.k_max, policy
        )
        self.model_source = (
            Source(
                "draft model",
                self.costs.c,
                (policy.model_prior,) * 2,
                policy.k_max,
                policy,
                policy.model_prior_weight,
                policy.model_decay,
                math.inf,  # its sureness gates each token it drafts (_worth_drafting), however far its rate reaches
            )
            if model
            else None
        )
        self.earlier = earlier
        self.earlier_source = Source(
            "earlier answers (a match in another request's answer)", 0.0, policy.earlier_prior, policy.k_long, policy
        )
        self._corpus: Corpus | None = None  # the earlier answers this generation may copy from
        self.sources = [
            *self.lookup_sources.values(),
            self.resume_source,
            *([self.earlier_source] if earlier is not None else []),
            *([self.model_source] if model else []),
        ]
        self.decoding_s = 0.0  # drafting and verifying so far: what the probing allowance is a share of
        self._last: tuple[Source | None, bool] = (None, False)
        # First tokens the latest step proposed but left undrafted (a likely copy's, the draft model's when unsure):
        # where in the context each would have gone, the token, and what learns from the target's verdict on it.
        self._undrafted: list[tuple[int, int, Callable[[bool], None]]] = []
        self._at = 0  # where the current proposal's first token goes
        self._sureness: list[float] = []  # the draft model's top probability at each position of its current draft
        self.scale = SurenessScale(policy.model_prior_weight, policy.tracker_decay)
        if model is not None:
            model.go_on = self._worth_drafting

    def prefill(self, context: list[int]) -> None:
        self._undrafted = []  # a new turn's text did not follow them
        self._corpus = self.earlier.for_prompt(context) if self.earlier is not None else None
        # Reading the prompt is most of a draft model's catch-up: do it now only if the model is expected to pay
        # from the start. Otherwise its first probe catches up, at the probe's own expense.
        if self.model is not None and self.model_source.plan(self.r, self.policy.k_max, self.policy.min_gain)[0]:
            self.model.prefill(context)

    def propose(self, context, k, params: SamplingParams, rng) -> Proposal:
        policy = self.policy
        self._last = (None, False)
        self._judge_undrafted(context)
        self._at = len(context)
        k = min(k, policy.k_long)
        if k <= 0:
            return Proposal([], None, "plain: no room for a draft")
        found = self.lookup.find(context, k)
        if found:
            band = max((n for n in policy.lookup_bands if n <= self.lookup.match_len), default=policy.lookup_bands[0])
            resuming = self.lookup.resuming and band < policy.copy_match
            source = self.resume_source if resuming else self.lookup_sources[band]
            rival = self._model_promise(k) if policy.lookup_yields else 1.0
            step = self._try(
                source, len(found), policy.min_gain, lambda n: self.lookup.propose(context, n, params, rng), rival
            )
            if step is not None:
                return step
            if band >= policy.copy_match and policy.judge_shadow:
                self._undrafted.append((len(context), found[0], partial(_judge_first, source.tracker)))
        if self._corpus is not None and (not found or self.lookup.match_len < policy.copy_match):
            copied, _ = self._corpus.find(context, k, policy.copy_match, policy.lookup_bands[-1])
            if copied:
                source = self.earlier_source
                step = self._try(
                    source, len(copied), policy.min_gain, lambda n: Proposal(copied[:n], None, source.name)
                )
                if step is not None:
                    return step
        k = min(k, policy.k_max)  # only a copy in progress is right often enough for longer drafts to pay
        if self.model_source is not None:
            step = self._try(
                self.model_source, k, policy.min_gain, lambda n: self.model.propose(context, n, params, rng)
            )
            if step is not None:
                return step
        return Proposal([], None, self._explain_plain(k))

    def _model_promise(self, k: int) -> float:
        """The speedup the draft model's best plan promises for this step, at the acceptance it has shown; 1.0 where
        it would not draft."""
        if self.model_source is None:
            return 1.0
        k = min(k, self.policy.k_max)
        return self.model_source.plan(self.r, k, self.policy.min_gain)[1]

    def _judge_undrafted(self, context: list[int]) -> None:
        """Judge the first tokens left undrafted by the token the target went on to give: evidence for free where a
        draft would have cost a verify batch. A one-hot draft token passes with the target's probability for it, the
        probability with which the target chooses it itself, so this is the evidence a draft's first position would
        have given.

        A likely copy's proposal that did not pay at its band's rates lets the band learn that it does. Only the
        first position: the later ones of one copy are one event, not many (counted each, a 15-token copy seen once
        made 4-gram matches bet 15 drafts where batches cost near n steps, and lose: 0.92x on an edit replayed at a
        Zen 5's costs). Chance repeats (matches shorter than copy_match) are left out: their first token passes often
        enough in prose to make them draft more, and lose (QA 0.97x replayed at a Zen 3's costs). A first token the
        draft model declined tells how far its sureness can be trusted, where it is low."""
        for at, token, learn in self._undrafted:
            if at < len(context):
                learn(context[at] == token)
        self._undrafted = [pending for pending in self._undrafted if pending[0] >= len(context)]

    def _try(
        self, source: Source, k_max: int, min_gain: float, draft: Callable[[int], Proposal], rival: float = 1.0
    ) -> Proposal | None:
        """rival: what another source promises for this step; a plan that promises less is neither taken nor probed."""
        k_max = min(k_max, source.k_max)
        k, s = source.plan(self.r, k_max, min_gain)
        if rival > s:
            return None
        probing = k == 0
        if probing:
            # Probe only a source that could pay at all here, at the length that would pay best.
            k, best = source.ceiling(self.r, k_max)
            allowance_s = self.policy.explore_share / len(self.sources) * self.decoding_s
            if best <= min_gain or not source.can_probe(k, self.r, self.costs.t1, allowance_s):
                return None
        self._last = (source, probing)
        proposal = draft(k)
        if not proposal.tokens:  # only the draft model declines: unsure of its first token
            return replace(
                proposal, reason=f"plain: the draft model is only {self._sureness[0]:.0%} sure of the next token"
            )
        reason = f"{source.name}, k={k}: " + (
            "probing whether drafts pay again" if probing else f"expected {s:.2f}x plain speed here"
        )
        return replace(proposal, reason=reason)

    def _explain_plain(self, k: int) -> str:
        if self.model_source is None:
            return "plain: no draft model, and no text in the conversation worth copying here"
        _, ceiling = self.model_source.ceiling(self.r, k)
        if ceiling <= self.policy.min_gain:
            return f"plain: even perfectly accepted drafts would run at {ceiling:.2f}x plain speed here"
        s = max(self.model_source.speedups(self.r, k))
        return f"plain: at the acceptance seen so far, drafts would run at {s:.2f}x plain speed"

    def _worth_drafting(self, n_drafted: int, k: int, sureness: float, token: int) -> bool:
        """Draft one more token (the first too) only while some draft of up to k tokens still promises more than
        stopping here, the first only where that beats a plain step.

        sureness: the draft's top probability at the next position, and token its top token. Scaled by how the
        target has judged the draft's sureness so far, it bounds the position's acceptance from above: the average
        acceptance of a position says little of one token, and each step then drafts where the draft is sure and
        stops where it is not (docs/experiments.md, "Variants of the draft model's sureness gate"). Longer drafts
        are compared too, not just the next one: a batch of n+2 can cost less than one of n+1 (llama.cpp switches
        kernels).
        """
        source = self.model_source
        if n_drafted == 0:
            self._sureness = []
        self._sureness.append(sureness)
        rates = source.tracker.rates(k)
        rates[: len(self._sureness)] = [min(r, self.scale.acceptance(x)) for r, x in zip(rates, self._sureness)]
        s = speedups(rates, source.cost, self.r)
        go = max(s[n_drafted:], default=0.0) > (s[n_drafted - 1] if n_drafted else 1.0)
        if not go and n_drafted == 0:
            self._undrafted.append((self._at, token, partial(self.scale.update, sureness)))
        return go

    def observe(self, n_drafted: int, n_accepted: int, draft_s: float, verify_s: float) -> None:
        source, probing = self._last
        # A draft that first read context it had not seen (a prompt, a copy lookup drafted) took longer than its
        # tokens cost: counted, one such step took a cheap draft model's c from 0.11 to 0.7, pricing it out.
        by_model = source is self.model_source and source is not None and self.model.caught_up <= CAUGHT_UP_BY_STEP
        self.costs.observe(n_drafted + 1, verify_s, n_drafted if by_model else 0, draft_s)
        if self.model_source is not None:
            self.model_source.cost = self.costs.c
        step_s = draft_s + verify_s
        self.decoding_s += step_s
        if probing:  # what the probe lost (or won) against plain steps for the tokens it gave
            # A probe the draft model declined at its first token lost its reading of the context: uncharged, the
            # model was asked, and declined, at every step once the allowance first let it (2026-12-06-chat-decline).
            source.probe_loss_s += step_s - (n_accepted + 1) * self.costs.t1
        if source is not None and n_drafted:
            source.tracker.update(n_drafted, n_accepted)
            if source is self.model_source:
                for i, sureness in enumerate(self._sureness[: min(n_accepted + 1, n_drafted)]):
                    self.scale.update(sureness, i < n_accepted)
            if source is not self.model_source and source is not self.earlier_source:
                self.lookup.observe(n_drafted, n_accepted)
