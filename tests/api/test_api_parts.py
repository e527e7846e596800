"""The API's pure parts, without a server: request validation, response shapes, the key and the port."""

from __future__ import annotations

import math
from argparse import Namespace

import pytest

from specchat.api.params import MAX_K, ApiError, chat_request, completion_request, settings_of, speculation_of
from specchat.api.serve import API_KEY_ENV, api_key
from specchat.api.server import _api_error
from specchat.api.shapes import Reply, timings
from specchat.engine import GenerationSettings, SamplingParams, Stats
from specchat.errors import PromptTooLongError

HELLO = [{"role": "user", "content": "Hello"}]


def chat(**fields) -> dict:
    return {"model": "any", "messages": HELLO, **fields}


def refused(make, body: dict) -> ApiError:
    with pytest.raises(ApiError) as caught:
        make(body, 4096)
    error = caught.value
    assert error.status == 400 and error.type == "invalid_request_error"
    assert set(error.body()["error"]) == {"message", "type", "param", "code"}
    return error


def test_a_plain_request_takes_openai_defaults_and_the_app_mode():
    ask = chat_request(chat(), 4096)
    assert ask.messages == ({"role": "user", "content": "Hello"},)
    assert ask.settings == GenerationSettings(
        mode="auto", k=4, sampling=SamplingParams(temperature=1.0), seed=None, max_tokens=4096, stop=()
    )
    assert not ask.stream and not ask.include_usage and not ask.token_kinds


def test_every_supported_parameter_reaches_the_settings():
    body = chat(
        max_completion_tokens=32,
        max_tokens=999,  # the older name yields to the newer
        temperature=0.5,
        top_p=0.9,
        top_k=40,
        min_p=0.05,
        seed=7,
        stop=["\n\n", ""],
        stream=True,
        stream_options={"include_usage": True},
        return_token_kinds=True,
        n=1,
        tools=[],  # what clients send when they have none
        frequency_penalty=0,
        user="someone",  # changes nothing in the answer: accepted
        speculative={"mode": "lookup", "k": 6},
    )
    ask = chat_request(body, 4096)
    assert ask.settings == GenerationSettings(
        mode="lookup", k=6, sampling=SamplingParams(0.5, 40, 0.9, 0.05), seed=7, max_tokens=32, stop=("\n\n",)
    )
    assert ask.stream and ask.include_usage and ask.token_kinds
    assert settings_of({"seed": -1, "stop": "END"}, 10).seed is None  # llama.cpp's "random"
    assert settings_of({"stop": "END"}, 10).stop == ("END",)


def test_speculation_per_request_in_specchat_and_llama_cpp_terms():
    assert speculation_of({}) == ("auto", 4)
    assert speculation_of({"speculative": {"mode": "plain"}}) == ("plain", 4)
    assert speculation_of({"speculative": {"mode": "speculative", "k": 3}}) == ("speculative", 3)
    assert speculation_of({"speculative": {"k": 5}}) == ("speculative", 5)
    assert speculation_of({"speculative": {"n_max": 0}}) == ("plain", 4)
    assert speculation_of({"speculative.n_max": 0}) == ("plain", 4)
    assert speculation_of({"speculative.n_max": 8}) == ("speculative", 8)
    assert speculation_of({"speculative": {"mode": "lookup", "n_max": 8}}) == ("lookup", 8)


@pytest.mark.parametrize(
    "fields, param, says",
    [
        ({"temperature": -0.1}, "temperature", ">= 0"),
        ({"temperature": math.inf}, "temperature", "finite"),
        ({"temperature": math.nan}, "temperature", "finite"),
        ({"temperature": "hot"}, "temperature", ">= 0"),
        ({"temperature": 10**400}, "temperature", ">= 0"),  # past float's range: no OverflowError
        ({"min_p": -(10**400)}, "min_p", "[0, 1]"),
        ({"top_p": 1.5}, "top_p", "[0, 1]"),
        ({"min_p": -1}, "min_p", "[0, 1]"),
        ({"top_k": -1}, "top_k", ">= 0"),
        ({"top_k": 2.5}, "top_k", "integer"),
        ({"max_tokens": 0}, "max_tokens", ">= 1"),
        ({"max_tokens": True}, "max_tokens", ">= 1"),
        ({"max_completion_tokens": -5}, "max_completion_tokens", ">= 1"),
        ({"seed": -2}, "seed", "-1"),
        ({"stop": 3}, "stop", "string"),
        ({"stream": "yes"}, "stream", "true or false"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed when stream"),
        ({"speculative": {"mode": "turbo"}}, "speculative.mode", "auto, speculative, lookup, plain"),
        ({"speculative": {"mode": "speculative", "k": 0}}, "speculative.k", f"[1, {MAX_K}]"),
        ({"speculative": {"k": MAX_K + 1}}, "speculative.k", f"[1, {MAX_K}]"),
        ({"speculative": {"mode": "auto", "k": 4}}, "speculative.k", "picks its own"),
        ({"speculative": {"mode": "plain", "k": 4}}, "speculative.k", "drafts nothing"),
        ({"speculative": {"mode": "lookup", "n_max": 0}}, "speculative.n_max", "plain decoding"),
        ({"speculative": {"k": 3, "n_max": 5}}, "speculative.k", "give one"),
        ({"speculative": {"p_min": 0.5}}, "speculative", "mode, k and n_max"),
        ({"speculative.n_min": 2}, "speculative.n_min", "n_max"),
        ({"speculative": "fast"}, "speculative", "object"),
    ],
)
def test_out_of_range_parameters_are_400s_that_name_the_parameter_and_its_range(fields, param, says):
    error = refused(chat_request, chat(**fields))
    assert error.param == param and says in error.message, error.message


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"n": 2}, "n"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"logit_bias": {"42": 5}}, "logit_bias"),
    ],
)
def test_what_the_engine_cannot_do_is_refused_never_ignored(fields, param):
    error = refused(chat_request, chat(**fields))
    assert error.param == param and error.code == "unsupported_parameter", error.message


def test_messages_must_be_text_in_known_roles():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    error = refused(chat_request, chat(messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}]))
    assert error.param == "messages[0].content[1]" and "'image_url' content is not supported" in error.message
    assert refused(chat_request, chat(messages=[])).param == "messages"
    assert refused(chat_request, chat(messages=[{"role": "robot", "content": "x"}])).param == "messages[0].role"
    for role in (["user"], {"a": 1}, None):  # no TypeError (unhashable) on the way to the 400
        assert refused(chat_request, chat(messages=[{"role": role, "content": "x"}])).param == "messages[0].role"
    assert refused(chat_request, chat(messages=[{"role": "user", "content": None}])).param == "messages[0].content"
    assert "tool" in refused(chat_request, chat(messages=[{"role": "tool", "content": "4"}])).message
    parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    ask = chat_request(
        chat(messages=[{"role": "developer", "content": "Be brief."}, {"role": "user", "content": parts}]), 8
    )
    assert ask.messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "one\ntwo"})
    # An assistant turn with no content, and one that refused, as OpenAI's API takes them.
    turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None}, *HELLO]
    assert chat_request(chat(messages=turns), 8).messages[1] == {"role": "assistant", "content": ""}
    turns[1] = {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}
    assert chat_request(chat(messages=turns), 8).messages[1] == {"role": "assistant", "content": "I can't."}
    # A part that is not media is not called so: what is wrong with it is said.
    for part, param, says in (
        ({"type": "text"}, "messages[0].content[0].text", "messages[0].content[0].text must be a string"),
        ({"type": "text", "text": 5}, "messages[0].content[0].text", "must be a string"),
        ({"type": "input_text", "text": "hi"}, "messages[0].content[0]", "a part of type 'input_text'; text goes in"),
        ({"type": "refusal", "refusal": "no"}, "messages[0].content[0]", "a part of type 'refusal'"),  # a user's
        ("hi", "messages[0].content[0]", "a part with no type"),
    ):
        error = refused(chat_request, chat(messages=[{"role": "user", "content": [part]}]))
        assert error.param == param and says in error.message and "text only" not in error.message, error.message
    # Text that is not valid Unicode is named by its parameter, counted from 0 as every other one.
    lone = refused(chat_request, chat(messages=[*HELLO, {"role": "user", "content": "abc \ud800"}]))
    assert lone.param == "messages[1].content" and lone.message.startswith("messages[1].content is not valid Unicode")


def test_completions_take_one_text_prompt():
    assert completion_request({"prompt": "Once upon"}, 8).prompt == "Once upon"
    assert completion_request({"prompt": ["Once upon"]}, 8).prompt == "Once upon"
    assert refused(completion_request, {"prompt": ["a", "b"]}).code == "unsupported_parameter"
    assert refused(completion_request, {"prompt": ""}).param == "prompt"
    for ids in ([1, 2, 3], [[1, 2], [3]]):  # OpenAI's token-id prompts
        error = refused(completion_request, {"prompt": ids})
        assert error.message == "a prompt of token ids is not supported: send the prompt as text", error.message
    assert refused(completion_request, {"prompt": "\udfff"}).param == "prompt"
    # Token kinds come with streamed chunks: asked for without a stream, they are refused, not left out.
    kinds = refused(completion_request, {"prompt": "x", "return_token_kinds": True})
    assert kinds.param == "return_token_kinds" and "needs stream: true" in kinds.message
    assert refused(completion_request, {"prompt": "x", "echo": True}).param == "echo"
    assert refused(completion_request, {"prompt": "x", "logprobs": 0}).param == "logprobs"
    assert refused(completion_request, ["not", "an", "object"]).message == "the request body must be a JSON object"


def test_timings_carry_llama_cpp_names_and_speculation_by_position():
    stats = Stats(mode="speculative", prompt_tokens=20, prompt_s=0.5, tokens=12, strategy="draft model")
    stats.record_draft(4, 3)
    stats.record_draft(4, 1)
    stats.started, stats.ended = 100.0, 102.5  # 2 s of generation once the prompt's 0.5 s are left out
    t = timings(stats)
    assert t["prompt_n"] == 20 and t["prompt_ms"] == 500 and t["prompt_per_second"] == 40
    assert t["predicted_n"] == 12 and t["predicted_ms"] == pytest.approx(2000)
    assert t["predicted_per_second"] == pytest.approx(6) and t["predicted_per_token_ms"] == pytest.approx(2000 / 12)
    assert t["draft_n"] == 8 and t["draft_n_accepted"] == 4
    assert t["draft_n_by_position"] == [2, 2, 2, 2] and t["draft_n_accepted_by_position"] == [2, 1, 1, 0]
    assert t["acceptance_by_position"] == [1.0, 0.5, 0.5, 0.0]
    assert t["mode"] == "speculative" and t["strategy"] == "draft model"


def test_stream_chunks_are_shaped_as_openai_sends_them():
    stats = Stats(tokens=3, finish_reason="eog")
    reply = Reply(chat=True, model="pair", include_usage=True)
    first = reply.chunk("", first=True)
    assert first["object"] == "chat.completion.chunk" and first["usage"] is None
    assert first["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    ]
    last = reply.finishing_chunk(stats)
    assert last["choices"][0]["delta"] == {} and last["choices"][0]["finish_reason"] == "stop" and "timings" in last
    usage = reply.usage_chunk(5, stats)
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert len({first["id"], last["id"], usage["id"]}) == 1
    whole = Reply(chat=False, model="pair").whole("text", 5, Stats(tokens=3, finish_reason="length"))
    assert whole["object"] == "text_completion" and whole["choices"][0]["finish_reason"] == "length"
    full = Reply(chat=False, model="pair").whole("text", 5, Stats(tokens=3, finish_reason="context"))
    assert full["choices"][0]["finish_reason"] == "length"  # OpenAI's word for a context filled, as for max_tokens
    assert whole["choices"][0]["text"] == "text" and whole["usage"]["total_tokens"] == 8


def test_serving_beyond_this_machine_without_a_key_warns(capsys, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    for host in ("127.0.0.1", "localhost", "::1"):
        assert api_key(Namespace(host=host, api_key=None)) is None
    assert capsys.readouterr().err == ""
    assert api_key(Namespace(host="0.0.0.0", api_key=None)) is None
    assert "warning: serving on 0.0.0.0 without an API key" in capsys.readouterr().err
    assert api_key(Namespace(host="0.0.0.0", api_key="k")) == "k"
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    assert api_key(Namespace(host="192.168.1.5", api_key=None)) == "from-env"
    assert capsys.readouterr().err == ""


def test_an_engine_failure_is_a_500_and_its_traceback_is_logged(caplog):
    failure = RuntimeError("the decoder broke")
    try:
        raise failure
    except RuntimeError as e:
        error = _api_error(e, "messages")
    assert (error.status, error.type) == (500, "server_error")
    assert error.message == "the engine failed: RuntimeError: the decoder broke"
    (record,) = [r for r in caplog.records if r.name == "specchat"]
    assert record.levelname == "ERROR" and record.exc_info[1] is failure
    assert "Traceback" in caplog.text and "raise failure" in caplog.text
    # What the request got wrong is the client's to hear, not the log's.
    caplog.clear()
    assert _api_error(PromptTooLongError("too long"), "messages").status == 400 and not caplog.records
