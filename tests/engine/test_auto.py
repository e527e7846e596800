"""auto mode on real models: calibrated, adaptive, and still exact."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from helpers import DESIGN_R
from specchat.bench.compare import NEAR_TIE_LOGITS
from specchat.engine import DEFAULT_POLICY, Engine, GenerationSettings, VerifyStep
from specchat.engine.calibration import (
    BATCH_SIZES,
    K_LONG,
    K_MAX,
    METHOD,
    ROUNDS,
    Calibration,
    cached_for,
    cpu_name,
    file_id,
    load_or_measure,
    measure,
)

CODE = "def area(w, h):\n    result = w * h\n    return result\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
EDIT = [{"role": "user", "content": f"Rename the variable result to out in this code:\n{CODE}"}]
# with design.md's r(16) too: a batch of 16 costs 8 steps there
DESIGN_R16 = {**DESIGN_R, 16: 7.99}


@pytest.fixture(scope="module")
def tiny(tiny_model, tmp_path_factory):
    engine = Engine.load(tiny_model, tiny_model)
    engine.cache_dir = tmp_path_factory.mktemp("cache")
    yield engine
    engine.close()


def run(engine, prompt, **kw) -> tuple[list, list[tuple[str, VerifyStep]]]:
    """Events, and each verify step with the strategy that drafted it; prompt: chat messages or token ids."""
    steps: list[tuple[str, VerifyStep]] = []
    engine.on_verify = lambda step: steps.append((engine.last_stats.strategy, step))
    settings = GenerationSettings(mode="auto", **kw)
    try:
        chat = isinstance(prompt[0], dict)
        return list(engine.chat(prompt, settings) if chat else engine.generate_tokens(prompt, settings)), steps
    finally:
        engine.on_verify = None


def cheap_batches(real: Calibration) -> Calibration:
    """real's costs but for batches as cheap as a GPU's, where drafting pays even for the tiny model drafting for
    itself (its draft costs a whole step)."""
    return Calibration(real.t1, {n: 1.0 + 0.02 * n for n in range(2, K_MAX + 2)}, 0.1, real.key)


def copied_from_earlier(engine, prompt) -> int:
    """Tokens auto accepted from earlier answers in 20 tokens of an answer to prompt, every step checked exact."""
    _, steps = run(engine, prompt, max_tokens=20)
    for _, step in steps:
        assert step.drafts[: step.n_accepted] == step.logits.argmax(axis=1)[: step.n_accepted].tolist()
    return sum(step.n_accepted for strategy, step in steps if strategy.startswith("earlier answers"))


def test_calibration_measures_once_and_is_cached(tiny):
    cal = tiny.calibration()
    assert cal.t1 > 0 and cal.c is not None and cal.c > 0
    assert sorted(cal.r) == list(BATCH_SIZES) and all(v > 0 for v in cal.r.values())
    files = list(tiny.cache_dir.glob("calibration-*.json"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    again = load_or_measure(tiny.target, tiny.draft, tiny.cache_dir)
    assert again == cal and files[0].stat().st_mtime_ns == stamp
    # A listing finds it by the pair's files, with no model loaded.
    path = tiny.target.path
    assert cal.files == (file_id(path), file_id(path)) and cal.machine == cpu_name()
    assert cached_for(path, path, tiny.cache_dir) == cal and cached_for(path, None, tiny.cache_dir) is None
    # One kept before calibrations named their pair is named when next read.
    unnamed = {k: v for k, v in json.loads(files[0].read_text()).items() if k not in ("files", "machine")}
    files[0].write_text(json.dumps(unnamed))
    assert cached_for(path, path, tiny.cache_dir) is None
    assert load_or_measure(tiny.target, tiny.draft, tiny.cache_dir) == cal
    assert cached_for(path, path, tiny.cache_dir) == cal
    # One an earlier method took (no method kept: it timed t1 right after a batch) is neither listed nor used.
    earlier = {k: v for k, v in json.loads(files[0].read_text()).items() if k != "method"}
    files[0].write_text(json.dumps(earlier))
    assert cached_for(path, path, tiny.cache_dir) is None
    cal = load_or_measure(tiny.target, tiny.draft, tiny.cache_dir)
    assert cal.method == METHOD and json.loads(files[0].read_text())["method"] == METHOD
    assert cached_for(path, path, tiny.cache_dir) == cal
    # Another setup (no draft) is another key, measured anew.
    alone = load_or_measure(tiny.target, None, tiny.cache_dir)
    assert alone.key != cal.key and cached_for(path, None, tiny.cache_dir) == alone
    # A cache folder that cannot be made (a file where it would be) still gives the measurement, kept nowhere.
    blocked = tiny.cache_dir / "a-file"
    blocked.write_text("")
    assert load_or_measure(tiny.target, None, blocked / "cache").key == alone.key


def test_a_first_calibration_says_what_it_measures_in_order(tiny_model, tmp_path):
    heard: list[str] = []
    engine = Engine.load(tiny_model, tiny_model, on_progress=heard.append, cache_dir=tmp_path)
    try:
        cal = engine.calibration()
    finally:
        engine.close()
    assert sorted(cal.r) == list(BATCH_SIZES) and cal.c is not None
    prefix = "Timing the models on this machine for auto mode (once): "
    assert all(m.startswith(prefix) and m.endswith("…") for m in heard), heard
    steps = [m.removeprefix(prefix) for m in heard]
    assert steps[0].startswith("reading a ") and len(steps) == 1 + ROUNDS
    assert [s.split(",")[0] for s in steps[1:]] == [f"round {i} of {ROUNDS}" for i in range(1, ROUNDS + 1)]
    heard.clear()
    engine = Engine.load(tiny_model, tiny_model, on_progress=heard.append, cache_dir=tmp_path)
    try:
        assert engine.calibration() == cal and heard == []  # the cached one: nothing to wait for
    finally:
        engine.close()


def test_calibration_times_each_step_after_an_untimed_one_like_it(tiny):
    """The first decode after a batch or the other model's costs more than the next (on two Xeon cores up to 40%):
    t1 timed right after a batch priced every r(n) cheap. So a round's single-token decodes come in pairs, the second
    timed: target, target, draft, draft, then the batches."""
    decodes: list[str] = []
    for name, model in (("t", tiny.target), ("d", tiny.draft)):
        model.rollback(0)  # the sample text read whole again, one batch
        decode = model.decode
        model.decode = lambda tokens, *a, _n=name, _d=decode, **kw: (
            decodes.append(_n if len(tokens) == 1 else " ") or _d(tokens, *a, **kw)
        )
    try:
        cal = measure(tiny.target, tiny.draft, rounds=2)
    finally:
        del tiny.target.decode, tiny.draft.decode
    assert cal.t1 > 0 and cal.c is not None and sorted(cal.r) == list(BATCH_SIZES)
    assert "".join(decodes).split() == ["ttdd", "ttdd"], decodes


STORY = [{"role": "user", "content": "Tell a short story about rain."}]


def test_auto_drafts_with_the_model_where_drafts_are_cheap_and_stays_exact(tiny):
    real = tiny.calibration()
    # A GPU-like machine: batches cost about one step and the draft a tenth of one. The model drafting for itself
    # costs a whole step: costs held at calibration's, lest auto learn that and stop drafting.
    tiny._calibration, tiny.policy = cheap_batches(real), replace(DEFAULT_POLICY, cost_weight=0.0)
    try:
        events, steps = run(tiny, STORY, max_tokens=100)
    finally:
        tiny._calibration, tiny.policy = real, DEFAULT_POLICY
    by_model = [step for strategy, step in steps if strategy.startswith("draft model")]
    assert len(by_model) >= 3 and all(step.drafts for step in by_model)
    # The model drafting for itself: every greedy draft is the target's own choice, but at a near-tie that the draft's
    # one-token decode and the target's batch rank apart (design.md, "Numerics").
    for step in by_model:
        if step.n_accepted < len(step.drafts):
            row = step.logits[step.n_accepted]
            assert row.max() - row[step.drafts[step.n_accepted]] < NEAR_TIE_LOGITS
    for _, step in steps:
        assert step.drafts[: step.n_accepted] == step.logits.argmax(axis=1)[: step.n_accepted].tolist()


def test_auto_copies_from_an_earlier_answer_to_another_request(tiny):
    real = tiny.calibration()
    tiny._calibration, tiny.policy = cheap_batches(real), replace(DEFAULT_POLICY, cost_weight=0.0)
    first = tiny.text_prompt("The old lighthouse keeper wrote in his diary every night.")
    try:
        answer = [event.token for event in tiny.generate_tokens(first, GenerationSettings("plain", max_tokens=40))]
        # Another request picks up the middle of that answer: what follows is in no prompt, only in the answer.
        second = [*first, *answer[:15]]
        assert copied_from_earlier(tiny, second) >= 5
        # The same request asked again is answered anew, not from its own earlier answer, nor from a cleared one.
        tiny.answers.clear()
        tiny.answers.add(second, answer[15:])
        assert copied_from_earlier(tiny, second) == 0
    finally:
        tiny._calibration, tiny.policy = real, DEFAULT_POLICY


def test_answers_kept_in_the_cache_folder_are_copied_from_by_the_next_engine(tiny, tiny_model, tmp_path):
    first = tiny.text_prompt("The old lighthouse keeper wrote in his diary every night.")
    answered = Engine.load(tiny_model, answers_dir=tmp_path)
    try:
        answer = [event.token for event in answered.generate_tokens(first, GenerationSettings("plain", max_tokens=40))]
    finally:
        answered.close()
    (kept,) = tmp_path.glob("answers-*.json")
    later = Engine.load(tiny_model, tiny_model, answers_dir=tmp_path)
    try:
        later._calibration, later.policy = cheap_batches(tiny.calibration()), replace(DEFAULT_POLICY, cost_weight=0.0)
        assert copied_from_earlier(later, [*first, *answer[:15]]) >= 5
    finally:
        later.close()
    # Without a folder to keep them in, an engine starts with none, and keeps none.
    alone = Engine.load(tiny_model, tiny_model)
    try:
        alone._calibration, alone.policy = later._calibration, later.policy
        assert copied_from_earlier(alone, [*first, *answer[:15]]) == 0
    finally:
        alone.close()
    assert list(tmp_path.glob("answers-*")) == [kept]


def test_auto_runs_by_the_policy_the_engine_is_given(tiny):
    real = tiny.calibration()
    tiny._calibration = cheap_batches(real)
    # Where the default policy drafts with the model (above), one asking a 100-fold gain and never probing does not
    tiny.policy = replace(DEFAULT_POLICY, min_gain=100.0, explore_share=0.0)
    try:
        events, steps = run(tiny, STORY, max_tokens=40)
    finally:
        tiny._calibration, tiny.policy = real, DEFAULT_POLICY
    assert events[-1].stats.tokens == 40 and events[-1].stats.drafted == 0
    strategies = {s for s, _ in steps}
    assert all(s.startswith("plain: even perfectly accepted drafts would run at") for s in strategies), strategies


def test_auto_decodes_plainly_when_drafts_cannot_pay_and_says_why(tiny):
    real = tiny.calibration()
    # A slow-batch machine: each extra token in a batch costs a full step and the draft as much again.
    tiny._calibration = Calibration(real.t1, {n: float(n) for n in range(2, K_MAX + 2)}, 1.0, real.key)
    draft_decoded = tiny.draft.n_decoded
    try:
        events, steps = run(tiny, [{"role": "user", "content": "Name three colors."}], max_tokens=24)
    finally:
        tiny._calibration = real
    stats = events[-1].stats
    assert stats.drafted == 0 and {e.kind for e in events} == {"target"}
    # A draft model that cannot pay does not even read the prompt (that would only delay the first token).
    assert tiny.draft.n_decoded == draft_decoded
    # Best case for the draft: k=1, 2 tokens for 1 + r(2) = 3 steps. Lookup (free) at best breaks even: no probes.
    # (Later steps refine the costs with measured step times, so only the first figure is exact.)
    assert steps[0][0] == "plain: even perfectly accepted drafts would run at 0.67x plain speed here"
    assert all(s.startswith("plain: even perfectly accepted drafts would run at") for s, _ in steps)


def test_auto_uses_prompt_lookup_when_the_answer_repeats_the_prompt(qwen_pair, tmp_path):
    engine = Engine.load(*qwen_pair)
    engine.cache_dir = tmp_path
    try:
        real = engine.calibration()
        # design.md's costs. With an AVX-512 build on two AMD EPYC cores a batch of 16 took 8 to 13 steps from
        # one calibration to the next: there lookup barely pays, and whether auto tries it at all is a coin flip
        # (its first bet failing once, it never used lookup in 80 tokens).
        engine._calibration = Calibration(real.t1, DESIGN_R16, real.c, real.key)
        events, steps = run(engine, EDIT, max_tokens=80)
    finally:
        engine.close()
    stats = events[-1].stats
    assert any(s.startswith("prompt lookup") for s, _ in steps), {s for s, _ in steps}
    assert stats.accepted > 10
    assert "out = w * h" in "".join(e.text for e in events)


def test_a_long_copy_drafts_the_long_batch_and_stays_exact(qwen_pair, tmp_path):
    code = "".join(f"def f{i}(x):\n    return x * {i} + {i * i}\n\n" for i in range(8))
    engine = Engine.load(*qwen_pair)
    engine.cache_dir = tmp_path
    try:
        real = engine.calibration()
        # A GPU-like machine, where a batch of 32 costs hardly more than one of 16.
        engine._calibration = Calibration(real.t1, {n: 1.0 + 0.02 * n for n in BATCH_SIZES}, real.c, real.key)
        messages = [{"role": "user", "content": f"Repeat this code exactly, with no comment:\n{code}"}]
        events, steps = run(engine, messages, max_tokens=160)
    finally:
        engine.close()
    long = [step for strategy, step in steps if len(step.drafts) == K_LONG]
    assert long and all("16-gram or longer" in s for s, step in steps if step in long), {s for s, _ in steps}
    assert max(step.n_accepted for step in long) > K_MAX
    for _, step in steps:  # greedy: what passed is the target's own choice, position by position
        assert step.drafts[: step.n_accepted] == step.logits.argmax(axis=1)[: step.n_accepted].tolist()
    assert "def f6(x):\n    return x * 6 + 36" in "".join(e.text for e in events)


def test_probes_the_draft_model_declines_are_paid_from_the_probing_allowance(tiny):
    real = tiny.calibration()
    # Batches as cheap as a GPU's: perfect drafts would pay, so the draft model may be probed. Its prior of 1%
    # acceptance: its plan never pays, and its sureness gate declines every probe at the first token, so each probe
    # costs the draft's reading of the context and gives nothing. A generous allowance lets probes start at once.
    tiny._calibration = cheap_batches(real)
    tiny.policy = replace(DEFAULT_POLICY, model_prior=0.01, explore_share=1.0)
    try:
        _, steps = run(tiny, [{"role": "user", "content": "Tell a long story about a cat."}], max_tokens=80)
    finally:
        tiny._calibration, tiny.policy = real, DEFAULT_POLICY
    declined = [s for s, _ in steps if s.startswith("plain: the draft model is only")]
    # Probed, and each declined probe paid for: not asked at every step once the allowance first covered a probe.
    assert 0 < len(declined) < len(steps) / 2, (len(declined), len(steps))


def test_auto_keeps_what_it_learned_for_the_conversation_and_the_costs_for_the_machine(tiny):
    first = [{"role": "user", "content": "Name three colors."}]
    events, _ = run(tiny, first, max_tokens=12)
    drafter = tiny.drafter("auto", tiny.chat_prompt(first))
    answer = "".join(e.text for e in events)
    follow_up = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "And three more?"}]
    # The next turn's prompt holds the first one: same conversation, same acceptance trackers and budgets.
    assert tiny.drafter("auto", tiny.chat_prompt(follow_up)) is drafter
    # Another conversation starts its acceptance afresh, but the costs measured so far belong to the machine.
    other = tiny.drafter("auto", tiny.chat_prompt([{"role": "user", "content": "Count to five."}]))
    assert other is not drafter and other.costs is drafter.costs
    assert other.model_source.tracker is not drafter.model_source.tracker
    # Under another policy even the same conversation starts afresh: an experiment carries nothing over.
    before = tiny.drafter("auto", tiny.chat_prompt(first))
    tiny.policy = replace(DEFAULT_POLICY, explore_share=0.05)
    try:
        changed = tiny.drafter("auto", tiny.chat_prompt(follow_up))
    finally:
        tiny.policy = DEFAULT_POLICY
    assert changed is not before and changed.costs is not before.costs and changed.policy.explore_share == 0.05
