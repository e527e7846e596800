"""The loop on real GGUF models through llama.cpp."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from models.support import subprocess_env
from specchat.bench.compare import NEAR_TIE_LOGITS
from specchat.engine import BackendConfig, Engine, GenerationSettings, LlamaModel, SamplingParams, VerifyStep
from specchat.engine.drafters import Proposal, through_end
from specchat.engine.sampling import probabilities
from specchat.errors import (
    IncompatibleModelsError,
    InvalidInputError,
    ModelLoadError,
    NotGGUFError,
    PromptTooLongError,
    SpecchatError,
)

CODE_PROMPT = [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}]
GREEDY = SamplingParams(0.0)


@pytest.fixture(scope="module")
def qwen(qwen_pair):
    engine = Engine.load(*qwen_pair)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def tiny(tiny_model):
    engine = Engine.load(tiny_model, tiny_model)
    yield engine
    engine.close()


def run(engine: Engine, messages, **kw) -> tuple[list, list[VerifyStep]]:
    steps: list[VerifyStep] = []
    engine.on_verify = steps.append
    try:
        events = list(engine.chat(messages, GenerationSettings(**kw)))
    finally:
        engine.on_verify = None
    return events, steps


def test_qwen_draft_accepts_most_drafts_on_code(qwen):
    events, _ = run(qwen, CODE_PROMPT, mode="speculative", k=4, max_tokens=64)
    stats = events[-1].stats
    assert stats.tokens == len(events) == 64
    assert stats.acceptance_rate > 0.6, stats.to_dict()
    assert {e.kind for e in events} >= {"accepted"}
    assert sum(stats.drafted_by_pos) == stats.drafted and sum(stats.accepted_by_pos) == stats.accepted
    assert stats.draft_s > 0 and stats.verify_s > 0 and stats.prompt_tokens > 10


def test_every_greedy_token_is_what_the_rule_gives_for_the_target_logits(qwen):
    events, steps = run(qwen, CODE_PROMPT, mode="speculative", k=3, max_tokens=40)
    expected = []
    for step in steps:
        argmax = step.logits.argmax(axis=1)
        n = step.n_accepted
        assert step.drafts[:n] == argmax[:n].tolist()
        assert n == len(step.drafts) or step.drafts[n] != argmax[n]
        assert step.next_token == argmax[n]
        expected += step.drafts[:n] + [step.next_token]
    assert [e.token for e in events] == expected[: len(events)]


def test_sampled_tokens_stay_in_the_transformed_target_support(qwen):
    params = SamplingParams(0.8, top_k=5)
    events, steps = run(qwen, CODE_PROMPT, mode="speculative", k=4, max_tokens=40, sampling=params, seed=3)
    assert len(events) == 40
    for step in steps:
        p_target = np.stack([probabilities(row, params) for row in step.logits])
        for i in range(step.n_accepted):
            assert p_target[i, step.drafts[i]] > 0
        assert p_target[step.n_accepted, step.next_token] > 0
    # Same seed, same text: sampling is reproducible.
    again, _ = run(qwen, CODE_PROMPT, mode="speculative", k=4, max_tokens=40, sampling=params, seed=3)
    assert [e.token for e in again] == [e.token for e in events]


def test_greedy_speculative_matches_plain_except_after_a_near_tie(qwen):
    plain, plain_steps = run(qwen, CODE_PROMPT, mode="plain", max_tokens=96)
    assert {e.kind for e in plain} == {"target"}
    for k in (2, 4):
        spec, _ = run(qwen, CODE_PROMPT, mode="speculative", k=k, max_tokens=96)
        a, b = [e.token for e in plain], [e.token for e in spec]
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if first is not None:
            top2 = np.sort(plain_steps[first].logits[0])[-2:]
            margin = float(top2[1] - top2[0])
            assert margin < NEAR_TIE_LOGITS, f"k={k}: texts differ at token {first}, the target's margin {margin:.3f}"


def test_lookup_drafts_from_the_prompt_when_output_repeats_it(qwen):
    code = "def area(w, h):\n    result = w * h\n    return result\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
    prompt = [{"role": "user", "content": f"Rename the variable result to out in this code:\n{code}"}]
    events, steps = run(qwen, prompt, mode="lookup", k=6, max_tokens=60)
    stats = events[-1].stats
    # The answer copies the code: a third of its tokens or more come from accepted lookups.
    assert stats.accepted >= stats.tokens / 3, stats.to_dict()
    for step in steps:  # one-hot drafts are still judged by the target's own argmax
        assert step.drafts[: step.n_accepted] == step.logits.argmax(axis=1)[: step.n_accepted].tolist()


def test_self_draft_accepts_every_greedy_draft(tiny):
    events, steps = run(tiny, CODE_PROMPT, mode="speculative", k=4, max_tokens=48)
    stats = events[-1].stats
    assert stats.drafted > 0 and {e.kind for e in events} <= {"accepted", "bonus", "corrected"}
    # The draft decodes one token at a time, the target a batch: the same model can disagree with itself
    # only where two logits tie within llama.cpp's batch-shape noise.
    for step in steps:
        if step.n_accepted < len(step.drafts):
            row = step.logits[step.n_accepted]
            assert row.max() - row[step.drafts[step.n_accepted]] < 0.05, "self-draft rejected without a near-tie"
    assert stats.acceptance_rate > 0.9


def test_incompatible_draft_is_refused_with_the_reason(qwen_pair, tiny_model):
    with pytest.raises(IncompatibleModelsError, match="vocabulary sizes differ: target has 151936 tokens"):
        Engine.load(qwen_pair[0], tiny_model)


def test_closed_generator_leaves_the_engine_reusable(tiny):
    settings = dict(mode="speculative", k=3, max_tokens=40)
    plain = [e.token for e in run(tiny, CODE_PROMPT, mode="plain", max_tokens=40)[0]]
    reference = [e.token for e in run(tiny, CODE_PROMPT, **settings)[0]]
    gen = tiny.chat(CODE_PROMPT, GenerationSettings(**settings))
    first = [next(gen).token for _ in range(5)]
    gen.close()
    assert tiny.last_stats.finish_reason == "closed"
    assert first == reference[:5]
    assert [e.token for e in run(tiny, CODE_PROMPT, **settings)[0]] == reference
    # Plain decoding after speculative gives what it gave before: both caches were left consistent. (Plain
    # and speculative texts themselves may part at a near-tie: the batch shape changes the logits slightly.)
    assert [e.token for e in run(tiny, CODE_PROMPT, mode="plain", max_tokens=40)[0]] == plain


def test_the_same_prompt_again_decodes_none_of_it_and_gets_the_same_answer(tiny):
    # Another prompt first, so that this one's cached positions were decoded from a shared prefix, as in a chat.
    run(tiny, [{"role": "user", "content": "Name a color."}], mode="plain", max_tokens=4)
    first, _ = run(tiny, CODE_PROMPT, mode="plain", max_tokens=48)
    again, _ = run(tiny, CODE_PROMPT, mode="plain", max_tokens=48)
    # Not one prompt position decoded again: a held position decoded alone gets other numerics.
    assert first[-1].stats.prompt_tokens > 10 and again[-1].stats.prompt_tokens == 0
    assert [e.token for e in again] == [e.token for e in first]


def test_multi_turn_decodes_only_the_new_tokens(tiny):
    history = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a color."}]
    events, _ = run(tiny, history, mode="speculative", k=3, max_tokens=12)
    answer = "".join(e.text for e in events)
    history += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Name another one."}]
    full = len(tiny.chat_prompt(history))
    before = tiny.target.n_decoded
    events, _ = run(tiny, history, mode="speculative", k=3, max_tokens=12)
    stats = events[-1].stats
    new_turn = len(tiny.chat_prompt(history[-1:]))
    assert stats.prompt_tokens < full / 2, (stats.prompt_tokens, full)
    assert stats.prompt_tokens <= new_turn + 8
    assert tiny.target.n_decoded - before < full


def test_text_is_utf8_safe_and_complete(qwen):
    ask = "Write one line: five animal emoji (🦩 🦔 🦦 🦥 🐙), then 'thank you' in Japanese."
    prompt = [{"role": "user", "content": ask}]
    events, _ = run(qwen, prompt, mode="speculative", k=4, max_tokens=40)

    def whole(piece: bytes) -> bool:
        try:
            piece.decode("utf-8")
            return True
        except UnicodeDecodeError:
            return False

    # The answer really has characters split across tokens, and none shows as a broken glyph.
    assert not all(whole(qwen.target.piece(e.token)) for e in events)
    text = "".join(e.text for e in events)
    assert "\ufffd" not in text and any(ord(ch) > 0xFFFF for ch in text)
    assert text == qwen.target.detokenize([e.token for e in events])


def test_stop_string_ends_the_answer_before_it(tiny):
    prompt = [{"role": "user", "content": "List three fruits, one per line."}]
    events, _ = run(tiny, prompt, mode="speculative", k=4, max_tokens=80, stop=("\n",))
    text = "".join(e.text for e in events)
    assert "\n" not in text and text
    assert events[-1].stats.finish_reason == "stop"


def test_no_draft_reaches_past_an_end_of_generation_token(tiny):
    # Drafting for itself, the tiny model's greedy drafts pass, and 10 a step would run on past this short answer's end.
    events, steps = run(tiny, [{"role": "user", "content": "Say hello."}], mode="speculative", k=10)
    stats, end = events[-1].stats, events[-1]
    assert stats.finish_reason == "eog" and end.kind == "accepted" and end.token in tiny.target.eog_ids
    assert steps[-1].drafts[-1] == end.token and len(steps[-1].drafts) < 10  # verified up to the end, no further
    assert all(e.token not in tiny.target.eog_ids for e in events[:-1])
    # So what is reported is what the answer holds.
    assert stats.accepted == sum(e.kind == "accepted" for e in events) == sum(stats.accepted_by_pos)
    assert stats.drafted == sum(len(s.drafts) for s in steps) == sum(stats.drafted_by_pos)


def test_a_copy_of_an_earlier_turn_is_verified_up_to_its_end_not_into_the_next_turn(qwen):
    ask = [{"role": "user", "content": "Repeat exactly, nothing else: The cat sat on the mat."}]
    said = "".join(e.text for e in qwen.chat(ask, GenerationSettings(mode="plain")))
    # Asked again, the answer copies the earlier one, which the prompt holds followed by the template's next turn.
    events, steps = run(qwen, [*ask, {"role": "assistant", "content": said}, *ask], mode="lookup", k=12)
    assert "".join(e.text for e in events) == said and events[-1].kind == "accepted"
    assert steps[-1].drafts[-1] == events[-1].token in qwen.target.eog_ids


def test_a_proposal_ends_with_its_first_end_of_generation_token():
    rows = np.eye(6, dtype=np.float32)[[1, 5, 2, 3]]
    cut = through_end(Proposal([1, 5, 2, 3], rows, "why"), frozenset({5, 4}))
    assert cut.tokens == [1, 5] and cut.rows.tolist() == rows[:2].tolist() and cut.reason == "why"
    assert through_end(Proposal([1, 2, 5], None, "why"), frozenset({5})).tokens == [1, 2, 5]
    assert through_end(Proposal([], None, "why"), frozenset({5})).tokens == []


def test_prompt_longer_than_the_context_is_refused(tiny_model):
    engine = Engine.load(tiny_model, None, BackendConfig(n_ctx=128))
    try:
        # llama.cpp makes the asked 128 a context of 256: the message says why it is not the number asked.
        holds = "context holds 256 (the asked 128, which llama.cpp rounds up to a multiple of 256)"
        assert engine.target.n_ctx == 256
        with pytest.raises(PromptTooLongError, match=re.escape(holds)):
            engine.generate("word " * 300, GenerationSettings(mode="plain"))
        # The limit also ends an answer that reaches it, without an error.
        events = list(engine.generate("Count: 1 2 3", GenerationSettings(mode="plain", max_tokens=500)))
        assert events[-1].stats.finish_reason in ("context", "eog")  # not "length": max_tokens was not reached
        assert len(engine.target.tokens) <= engine.target.n_ctx
    finally:
        engine.close()


def test_settings_that_would_decode_something_else_are_refused():
    for config, message in (
        ({"n_ctx": 0}, "n_ctx must be at least 1, not 0"),
        ({"n_threads": -1}, "n_threads must be at least 0"),
        ({"n_threads_batch": -4}, "n_threads_batch must be at least 0"),
    ):
        with pytest.raises(SpecchatError, match=message):
            BackendConfig(**config)
    assert BackendConfig(n_threads=0).threads == BackendConfig().threads  # 0: every core, as the UI's setting


def test_a_context_past_the_targets_training_is_refused_before_loading(tiny_model):
    # SmolLM2 was trained for 8192 tokens: 99999999999 would have llama.cpp ask for memory the machine lacks.
    for n_ctx in (8193, 99_999_999_999):
        with pytest.raises(InvalidInputError, match=f"a context of {n_ctx} tokens is more than .* 8192 at most"):
            Engine.load(tiny_model, config=BackendConfig(n_ctx=n_ctx))


def test_a_batch_longer_than_llama_cpps_gives_logits_for_every_token(tiny_model):
    # A draft past n_batch is decoded in several batches; llama.cpp keeps the latest one's logits only.
    prompt = list(range(200, 240))
    whole, chunked = (LlamaModel(tiny_model, BackendConfig(n_ctx=256, n_batch=n, n_threads=1)) for n in (64, 8))
    try:
        expected = whole.decode(prompt, all_logits=True)
        got = chunked.decode(prompt, all_logits=True)
        assert got.shape == expected.shape == (40, whole.n_vocab)
        assert (got.argmax(axis=1) == expected.argmax(axis=1)).mean() > 0.9  # batch shapes move logits a little
        np.testing.assert_allclose(got, expected, atol=0.5)
    finally:
        whole.close()
        chunked.close()


def test_files_that_are_not_models_are_refused(tmp_path, tiny_model):
    fake = tmp_path / "notes.gguf"
    fake.write_text("hello")
    with pytest.raises(NotGGUFError, match="not a GGUF model file"):
        Engine.load(fake)
    with pytest.raises(NotGGUFError, match="no such file"):
        Engine.load(tmp_path / "missing.gguf")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny_model.read_bytes()[:4096])
    with pytest.raises(NotGGUFError, match="truncated or corrupt"):
        Engine.load(truncated)
    with pytest.raises(NotGGUFError, match="is a folder, not a GGUF model file"):
        Engine.load(tmp_path)


def unknown_architecture(dest: Path) -> Path:
    """A whole GGUF file that only llama.cpp refuses: its header reads well, and llama.cpp knows no such model."""
    writer = GGUFWriter(dest, "not-an-architecture")
    writer.add_token_list(["<s>", "</s>", "a"])
    writer.add_tensor("token_embd.weight", np.zeros((3, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest


def test_a_load_that_fails_in_llama_cpp_gives_its_reason(tmp_path):
    with pytest.raises(ModelLoadError) as err:
        Engine.load(unknown_architecture(tmp_path / "odd.gguf"))
    # llama.cpp's own words, from its error log (which used to go to a silenced stderr, or to stderr as loose lines).
    assert "unknown model architecture: 'not-an-architecture'" in str(err.value)
    assert "\n" not in str(err.value)


def test_text_that_is_not_unicode_is_refused_at_the_engine_and_the_next_request_is_served(tiny):
    bad = "abc \ud800 def"
    with pytest.raises(InvalidInputError, match="the content of message 1 is not valid Unicode"):
        tiny.chat([{"role": "user", "content": bad}], GenerationSettings(mode="plain", max_tokens=4))
    with pytest.raises(InvalidInputError, match="the prompt is not valid Unicode"):
        tiny.generate(bad, GenerationSettings(mode="plain", max_tokens=4))
    assert not tiny.lock.locked()
    events, _ = run(tiny, [{"role": "user", "content": "abc def"}], mode="speculative", max_tokens=4)
    assert len(events) == 4


# Loads models in a thread while the main thread prints, as `specchat ui` loads while Gradio starts.
LOAD_WHILE_PRINTING = """
import sys, threading, time
from specchat.engine import BackendConfig, LlamaModel
from specchat.errors import SpecchatError

errors = []

def load():
    for _ in range(3):
        LlamaModel(sys.argv[1], BackendConfig(n_ctx=256, n_threads=1)).close()
    try:
        LlamaModel(sys.argv[2])
    except SpecchatError as e:
        errors.append(e)

thread = threading.Thread(target=load)
thread.start()
n = 0
while thread.is_alive():
    print(f"line {n}", flush=True)
    n += 1
    time.sleep(0.001)
print(f"printed {n}", flush=True)
print(f"error: {errors[0]}", file=sys.stderr)
"""


def test_a_model_loading_in_a_thread_leaves_the_other_threads_output_alone(tmp_path, tiny_model):
    odd = unknown_architecture(tmp_path / "odd.gguf")
    script = [sys.executable, "-c", LOAD_WHILE_PRINTING, str(tiny_model), str(odd)]
    run = subprocess.run(script, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    n = int(lines[-1].removeprefix("printed "))
    # Every line arrived: none went to a /dev/null that file descriptor 1 pointed at while a model loaded.
    assert n > 0 and lines == [f"line {i}" for i in range(n)] + [f"printed {n}"]
    # And llama.cpp printed nothing of its own: the load error is the one line the script wrote, with the reason.
    (line,) = run.stderr.splitlines()
    assert (
        line.startswith("error: odd.gguf: llama.cpp could not load this model") and "unknown model architecture" in line
    )


HUGE_PAGES_AFTER_LOAD = """
import re, sys
from pathlib import Path
from specchat.engine import BackendConfig, LlamaModel
model = LlamaModel(sys.argv[1], BackendConfig(huge_pages=sys.argv[2] == "on"))
print(model.decode([1, 2, 3, 4, 5, 6, 7, 8], all_logits=True).tobytes().hex())
print(re.search(r"AnonHugePages:\\s+(\\d+) kB", Path("/proc/self/smaps_rollup").read_text()).group(1))
"""


def test_the_weights_llama_cpp_copies_sit_on_huge_pages_and_decode_the_same(qwen_pair):
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not thp.exists() or "[never]" in thp.read_text():
        pytest.skip("this kernel gives no transparent huge pages (Linux only, and not turned off)")
    runs = {}
    for huge in ("off", "on"):
        script = [sys.executable, "-c", HUGE_PAGES_AFTER_LOAD, str(qwen_pair[1]), huge]
        run = subprocess.run(script, capture_output=True, text=True, env=subprocess_env(), timeout=300)
        assert run.returncode == 0, run.stderr
        logits, huge_kib = run.stdout.split()
        runs[huge] = logits, int(huge_kib)
    assert runs["on"][0] == runs["off"][0]
    # A fresh process, one model: the 0.5B's Q4_K weights, repacked for AVX2/AVX-512 CPUs into memory of llama.cpp's
    # own, are about 150 MB of it; the rest stays in the file's mapping.
    assert runs["on"][1] - runs["off"][1] > 100_000


def test_a_prompt_read_in_batches_is_heard_and_can_be_stopped_between_them(tiny_model):
    engine = Engine.load(tiny_model, config=BackendConfig(n_ctx=512, n_batch=32, n_threads=1))
    try:
        settings = GenerationSettings(mode="plain", max_tokens=8)
        prompt = engine.text_prompt("Count the sheep: " + "one sheep, " * 30)
        unwatched = [e.token for e in engine.generate_tokens(prompt, settings)]
        engine.target.rollback(0)
        heard = []

        def stop_after_two_batches(done: int, total: int) -> bool:
            heard.append((done, total))
            return done < 64

        assert list(engine.generate_tokens(prompt, settings, stop_after_two_batches)) == []
        n = len(prompt) - 1  # the target reads all but the last token, which its first step decodes
        assert heard == [(0, n), (32, n), (64, n)] and n > 64
        assert engine.last_stats.finish_reason == "closed" and engine.last_stats.tokens == 0
        assert engine.target.n_past == 64  # what was read is kept: the prompt sent again reads on from there
        heard.clear()
        watched = [e.token for e in engine.generate_tokens(prompt, settings, lambda *read: heard.append(read) or True)]
        assert heard[0] == (0, n - 64) and heard[-1] == (n - 64, n - 64)
        assert watched == unwatched
    finally:
        engine.close()
