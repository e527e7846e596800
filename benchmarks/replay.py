"""What could drafting give at best here, and what does auto's policy give? Replays of plain greedy answers.

    python benchmarks/replay.py TARGET.gguf DRAFT.gguf [--categories code_editing] [--max-tokens 128]
        [--recording replay.json] [--auto-only] [--c-scale 1.14 --r-scale 1.03] [--calibration CAL.json ...]
        [--r-long R] [--policy-json '{"explore_share": 0.05}']

Decodes each suite prompt plainly (greedy) and reads the answer through the draft once, recording at every
position the draft's greedy token and its probability for it (the draft as the app runs it: its CPU copy where
that is faster). Then, with no model calls, at this machine's calibrated costs (r(n), c, and a catch-up of the
draft's cache priced as a batch):

- hindsight ceilings: knowing which drafts the target accepts, the cheapest way through each answer, drafting
  by prompt lookup only, by the draft model only, or by both (over positions and how far behind the draft's
  cache is). No policy that has to guess beats them.
- auto: AutoDrafter as the engine runs it, its draft model answering from the recording, each decode
  timed at the calibrated costs. Noise-free and seconds long: a check of a policy change (--policy-json, the
  fields of AutoPolicy that differ from DEFAULT_POLICY) before a real `specchat bench`, whose greedy `auto` rows
  it should track (it leaves out the loop's own Python time).

Calibration times single decodes and batches in isolation. Real generations cost more: the cost model fitted on
a fixed-k run (`codecopy-greedy`) gave 1.14x calibration's c and 1.03x its r(4). Priced so (--c-scale 1.14 --r-scale
1.03), a fixed hybrid on code editing (lookup on a 4-token match, else the model with k = 3) replays at 1.29x
against 1.28x measured (1.42x at calibration's prices), and auto's greedy rows within 0.05 of the bench's in six
categories of eight (RAG 1.08x against 1.15x; multi-turn 1.19x against 1.11x, where one answer flips a near-tie).
Fixed k = 3 from the model alone reads low: 1.12x and 1.17x against 1.17x and 1.25x on code generation and editing.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from specchat.bench.run import BUILTIN, load_suite
from specchat.engine import DEFAULT_POLICY, AutoPolicy, Engine, GenerationSettings
from specchat.engine.adaptive import AutoDrafter, LiveCosts, auto_lookup
from specchat.engine.calibration import K_LONG, K_MAX, Calibration
from specchat.engine.drafters import ModelDrafter
from specchat.engine.llama_backend import common_prefix
from specchat.engine.sampling import SamplingParams
from specchat.models.catalog import cache_dir


@dataclass
class Answer:
    category: str
    prompt: list[int]
    tokens: list[int]  # the target's plain greedy answer
    guesses: list[int]  # the draft's greedy token at each position of the answer, given the answer before it
    sureness: list[float]  # the draft's probability for that token
    second_choices: list[int] | None = None  # the draft's second choice there (older recordings lack it)


def record(engine: Engine, prompt: list[int], max_tokens: int) -> tuple[list[int], list[int], list[float], list[int]]:
    answer = [
        event.token for event in engine.generate_tokens(prompt, GenerationSettings("plain", max_tokens=max_tokens))
    ]
    return answer, *read_through_draft(engine.draft, prompt, answer)


def read_through_draft(draft, prompt: list[int], answer: list[int]) -> tuple[list[int], list[float], list[int]]:
    """At each position of the answer, given the answer before it: the draft's first choice, its probability,
    and its second choice."""
    draft.eval_prefix(prompt[:-1])
    logits = draft.decode([prompt[-1], *answer[:-1]], all_logits=True)
    top2 = np.argpartition(logits, -2, axis=1)[:, -2:]
    first = np.take_along_axis(logits, top2, axis=1).argmax(axis=1)
    guesses, second = top2[np.arange(len(top2)), first], top2[np.arange(len(top2)), 1 - first]
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return guesses.tolist(), (z.max(axis=1) / z.sum(axis=1)).tolist(), second.tolist()


class Prices:
    """This machine's calibrated costs in target steps: r(n) as auto mode reads it, a draft token's c, and a draft
    model's catch-up on n tokens of context, one batch: c times the target's batch ratio, the same machine's
    kernels running both (on two Xeon cores the Qwen 0.5B took 1.35, 2.05, 3.6 and 6.1 single decodes for batches
    of 4, 8, 16 and 32 tokens, where the target's r says 1.7, 3.3, 4.0 and 8.1)."""

    def __init__(self, calibration: Calibration, c_scale: float = 1.0, r_scale: float = 1.0):
        """c_scale, r_scale: what a real generation's draft tokens and target batches cost over calibration's."""
        live = LiveCosts(calibration)
        self.t1, self.c = calibration.t1, live.c * c_scale
        self.r = lambda n: live.r(n) * (r_scale if n > 1 else 1.0)

    def catch_up(self, n: int) -> float:
        whole, rest = divmod(max(n, 1), K_MAX + 1)
        return self.c * (whole * self.r(K_MAX + 1) + (self.r(rest) if rest else 0.0))

    def model_step(self, behind: int, k: int, branch: bool = False) -> float:
        """A step drafting k by the model, its cache `behind` tokens behind, verified as a chain (or with a branch)."""
        return self.catch_up(behind) + (k - 1) * self.c + self.r(k + 1 + branch)


class RecordedDraft:
    """The few calls ModelDrafter makes of a LlamaModel, answered from a recording: at each position, the draft's
    token with its probability (off the answer, after a draft the target rejects, the recording is as good a
    guess as any: the target rejects what follows anyway). `seconds` adds up what the decoding would take."""

    # ModelDrafter stops a draft at an end token; a replay never drafts past the answer's end (auto's k is capped by
    # the tokens left), and an end guessed inside the answer is rejected there whatever follows it.
    eog_ids: frozenset[int] = frozenset()

    def __init__(self, answer: Answer, n_vocab: int, prices: Prices):
        self.answer, self.n_vocab, self.prices = answer, n_vocab, prices
        self.tokens: list[int] = []
        self.seconds = 0.0
        self.n_decoded = 0

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def hold(self, seq) -> None:
        del self.tokens[common_prefix(self.tokens, seq) :]
        if len(seq) > self.n_past:
            self.decode(seq[self.n_past :])

    def eval_prefix(self, seq) -> np.ndarray:
        del self.tokens[min(common_prefix(self.tokens, seq), len(seq) - 1) :]
        return self.decode(seq[self.n_past :])[0]

    def decode(self, tokens, all_logits: bool = False) -> np.ndarray:
        self.seconds += self.prices.catch_up(len(tokens)) * self.prices.t1
        self.n_decoded += len(tokens)
        self.tokens.extend(tokens)
        at = min(len(self.tokens) - len(self.answer.prompt), len(self.answer.guesses) - 1)
        sure = min(self.answer.sureness[at], 1 - 1e-6)
        row = np.zeros((1, self.n_vocab), dtype=np.float32)
        row[0, self.answer.guesses[at]] = math.log(sure * (self.n_vocab - 1) / (1 - sure))  # softmax gives `sure`
        return row


def ceilings(answer: Answer, costs: Prices, n_vocab: int, policy: AutoPolicy) -> list[float]:
    """Target steps (units of t1) for the cheapest way through the answer, knowing which drafts pass: drafting by
    prompt lookup only, by the draft model only, and by both.

    Prompt lookup takes the match auto mode would find first, with no memory of earlier copies; the draft read
    the prompt along with the target."""
    copies, agree = _right_from(answer, n_vocab, policy)
    return [_cheapest(copies, agree, costs, lookup, model) for lookup, model in ((1, 0), (0, 1), (1, 1))]


def branch_ceilings(answer: Answer, costs: Prices, n_vocab: int, policy: AutoPolicy) -> list[float]:
    """ceilings() for both sources, then the same where the model's chain of k drafts may be verified with one more
    token in the same batch (a two-leaf tree, r(k + 2)): the draft's second choice where the chain fails, placed in
    hindsight. Where that is the target's token, the step keeps it and the target's next."""
    copies, agree = _right_from(answer, n_vocab, policy)
    second_right = [s == t != g for s, t, g in zip(answer.second_choices, answer.tokens, answer.guesses)]
    rescued = lambda t, k: second_right[t + agree[t]]  # noqa: E731
    return [_cheapest(copies, agree, costs, 1, 1), _cheapest(copies, agree, costs, 1, 1, rescued)]


def fixed_chain_cost(answer: Answer, costs: Prices, k: int, branch: bool) -> float:
    """Target steps (units of t1) for the answer drafted by the model alone, k tokens a step, each step verified as a
    chain or (branch) with the draft's second choice at the chain's least sure position beside it, r(k + 2). No
    hindsight: what a policy without a lookup source would get. Beyond the chain's first rejection the recording has
    the draft's sureness on the answer, not on its own continuation: a branch placed there is lost either way."""
    tokens, n = answer.tokens, len(answer.tokens)
    t, held, spent = 0, 0, 0.0
    while t < n:
        size = min(k, n - t - 1)
        if size == 0:
            spent, t = spent + 1.0, t + 1
            continue
        right = common_prefix(answer.guesses[t : t + size], tokens[t:])
        chain = answer.sureness[t : t + size]
        rescued = branch and right < size and chain.index(min(chain)) == right
        rescued = rescued and answer.second_choices[t + right] == tokens[t + right]
        spent += costs.model_step(t + 1 - held, size, branch)
        held = t + 1 + min(right, size - 1)
        t += right + 1 + rescued
    return spent


def _right_from(answer: Answer, n_vocab: int, policy: AutoPolicy) -> tuple[list[int], list[int]]:
    tokens = answer.tokens
    finder = auto_lookup(n_vocab, policy)
    copies = [common_prefix(finder.find(answer.prompt + tokens[:t], K_LONG), tokens[t:]) for t in range(len(tokens))]
    agree = [common_prefix(answer.guesses[t:], tokens[t:]) for t in range(len(tokens))]
    return copies, agree


def _cheapest(
    copies: list[int],
    agree: list[int],
    costs: Prices,
    lookup: bool,
    model: bool,
    rescued: Callable[[int, int], bool] | None = None,
) -> float:
    """copies[t], agree[t]: how many tokens from t on the lookup draft, and the draft model's, get right.
    rescued(t, k): whether a branch saves the model's chain of k drafts from t where it fails (none: no branch)."""
    n = len(copies)
    # best[t][held]: the least cost to have answered t tokens with the draft's cache holding the answer's first
    # held - 1 (held 0: the prompt but its last token, as prefilled).
    best: list[dict[int, float]] = [{} for _ in range(n + 1)]
    best[0][0] = 0.0

    def go(t: int, held: int, cost: float) -> None:
        t = min(t, n)
        if cost < best[t].get(held, math.inf):
            best[t][held] = cost

    for t in range(n):
        room = n - t - 1  # the last token is the target's own
        for held, spent in best[t].items():
            go(t + 1, held, spent + 1.0)
            if lookup and copies[t] and room:
                for k in range(1, min(K_LONG, room) + 1):  # drafting k tokens of which the first `right` pass
                    right = min(copies[t], k)
                    go(t + right + 1, held, spent + costs.r(k + 1))
            if model:
                for k in range(1, min(K_MAX, room) + 1):
                    right = min(agree[t], k)
                    step = costs.model_step(t + 1 - held, k)
                    go(t + right + 1, t + 1 + min(right, k - 1), spent + step)
                    if rescued and right < k and rescued(t, k):
                        go(t + right + 2, t + 1 + right, spent + costs.model_step(t + 1 - held, k, branch=True))
    return min(best[n].values())


def replayed_cost(
    answer: Answer,
    calibration: Calibration,
    n_vocab: int,
    costs: Prices,
    policy: AutoPolicy,
    live: LiveCosts | None = None,
) -> float:
    """Target steps (units of t1) that auto mode's policy takes for the answer, at costs (which stay put; the
    policy starts from calibration, and its own LiveCosts learn from its steps); live: what earlier answers
    learned of the costs, as one engine keeps it from prompt to prompt (else the answer starts afresh)."""
    recorded = RecordedDraft(answer, n_vocab, costs)
    model = ModelDrafter(recorded, n_vocab)
    auto = AutoDrafter(calibration, auto_lookup(n_vocab, policy), model, live, policy=policy)
    context = list(answer.prompt)
    auto.prefill(context)  # prompt time, not counted (as in `specchat bench`)
    tokens, t, spent_s = answer.tokens, 0, 0.0
    while t < len(tokens):
        before = recorded.seconds
        drafts = auto.propose(context, len(tokens) - t - 1, SamplingParams(), None).tokens  # as the loop: auto caps k
        draft_s, verify_s = recorded.seconds - before, costs.r(len(drafts) + 1) * costs.t1
        accepted = common_prefix(drafts, tokens[t:])
        auto.observe(len(drafts), accepted, draft_s, verify_s)
        spent_s += draft_s + verify_s
        context += tokens[t : t + accepted + 1]
        t += accepted + 1
    return spent_s / costs.t1


def recorded(args: argparse.Namespace) -> tuple[Calibration, int, list[tuple[str, Answer]]]:
    """This machine's calibration and the suite's answers: from args.recording if it exists, else recorded now
    (and kept there, if named: a replay of a policy change then takes seconds)."""
    if args.recording and args.recording.is_file():
        saved = json.loads(args.recording.read_text())
        answers = [(a.pop("id"), Answer(**a)) for a in saved["answers"]]
        if args.branch and answers[0][1].second_choices is None:
            raise SystemExit(f"{args.recording} has no second choices: record anew, into another --recording file")
        return Calibration.from_json(json.dumps(saved["calibration"])), saved["n_vocab"], answers
    engine = Engine.load(args.target, args.draft, cpu_copy_dir=cache_dir(), cache_dir=cache_dir())
    if args.max_tokens >= engine.draft.n_batch:  # record() reads a whole answer in one batch
        raise SystemExit(f"--max-tokens must be under {engine.draft.n_batch}")
    answers = []
    for item in load_suite(args.suite, args.categories):
        prompt = engine.chat_prompt(item.messages)
        answers.append((item.id, Answer(item.category, prompt, *record(engine, prompt, args.max_tokens))))
        print(f"recorded {item.id}", flush=True)
    cal, n_vocab = engine.calibration(), engine.target.n_vocab
    if args.recording:
        saved = [{"id": name, **asdict(answer)} for name, answer in answers]
        text = json.dumps({"calibration": json.loads(cal.to_json()), "n_vocab": n_vocab, "answers": saved})
        args.recording.write_text(text)
    return cal, n_vocab, answers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("draft")
    ap.add_argument("--suite", default=BUILTIN)
    ap.add_argument("--categories", type=lambda s: s.split(","))
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--recording", type=Path, help="a JSON file to keep the recorded answers in, or to replay from")
    ap.add_argument("--auto-only", action="store_true", help="replay auto mode only, not the (slower) ceilings")
    ap.add_argument(
        "--branch",
        action="store_true",
        help="the draft's second choice as a branch: branch_ceilings() and fixed_chain_cost() with and without it",
    )
    ap.add_argument(
        "--calibration",
        type=Path,
        nargs="+",
        help="price at other machines' costs: calibration-*.json files of specchat's cache (benchmarks/results keeps "
        "some); with several, one summary table each, to check a policy change at every machine's prices at once",
    )
    # 1.14 and 1.03: what a fixed-k run's fitted costs were over calibration's here (module docstring)
    ap.add_argument("--c-scale", type=float, default=1.0, help="price draft tokens at this multiple of calibration's c")
    ap.add_argument("--r-scale", type=float, default=1.0, help="price target batches at this multiple of its r(n)")
    ap.add_argument(
        "--r-long", type=float, help=f"r({K_LONG + 1}) for a calibration that did not measure it (else never drafted)"
    )
    ap.add_argument(
        "--believed",
        type=Path,
        help="auto starts from this calibration (a calibration-*.json) while --calibration's costs are paid: what a "
        "calibration that read the machine wrong costs auto until its live costs catch up",
    )
    ap.add_argument(
        "--carry-costs",
        action="store_true",
        help="carry what auto learned of the costs from answer to answer, in the suite's order, as one engine does",
    )
    ap.add_argument(
        "--policy-json",
        default="{}",
        help="auto's policy: the fields of AutoPolicy (engine/policy.py) that differ from DEFAULT_POLICY, as a JSON "
        'object, lists for tuples: \'{"explore_share": 0.05, "resume_prior": [0.6, 0.8]}\'',
    )
    args = ap.parse_args()
    try:
        policy = DEFAULT_POLICY.with_changes(args.policy_json)
    except ValueError as e:
        ap.error(f"--policy-json: {e}")
    recorded_cal, n_vocab, answers = recorded(args)
    calibrations = [
        (f"{path.parent.name}/{path.name}", Calibration.from_json(path.read_text())) for path in args.calibration or []
    ]
    columns = (
        ("auto replayed",) if args.auto_only else ("lookup ceiling", "model ceiling", "both ceiling", "auto replayed")
    )
    if args.branch:
        columns = ("both ceiling", "branch ceiling", *(f"k={k}{b}" for k in (1, 2, 3, 4) for b in ("", "+branch")))
    for name, cal in calibrations or [("calibration of the recording", recorded_cal)]:
        if args.r_long and K_LONG + 1 not in cal.r:
            cal = replace(cal, r={**cal.r, K_LONG + 1: args.r_long})
        costs = Prices(cal, args.c_scale, args.r_scale)
        print(
            f"{name}: t1 = {cal.t1 * 1000:.1f} ms, c = {costs.c:.3f}; "
            + ", ".join(f"r({n}) = {costs.r(n):.2f}" for n in (2, 4, 8, 16, K_LONG + 1))
        )
        totals: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(len(columns) + 1))
        belief = Calibration.from_json(args.believed.read_text()) if args.believed else cal
        live = LiveCosts(belief, policy.cost_weight, policy.cost_relax) if args.carry_costs else None
        for answer_id, answer in answers:
            if args.branch:
                steps = branch_ceilings(answer, costs, n_vocab, policy)
                steps += [fixed_chain_cost(answer, costs, k, b) for k in (1, 2, 3, 4) for b in (False, True)]
            else:
                steps = [] if args.auto_only else ceilings(answer, costs, n_vocab, policy)
                steps.append(replayed_cost(answer, belief, n_vocab, costs, policy, live))
            n = len(answer.tokens)
            if len(calibrations) <= 1:
                line = ", ".join(f"{c} {n / s:.2f}x" for c, s in zip(columns, steps))
                print(f"{answer_id}: {n} tokens, {line}", flush=True)  # the ceilings take seconds an answer
            for key in (answer.category, "all"):
                totals[key] += [n, *steps]
        for key, (n, *steps) in totals.items():
            print(f"  {key}: " + ", ".join(f"{c} {n / s:.2f}x" for c, s in zip(columns, steps)), flush=True)


if __name__ == "__main__":
    main()
