"""`specchat serve` over the real tiny model, driven by the official openai client as other programs drive it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest
from openai import OpenAI

from api.conftest import KEY
from helpers import serving
from models.support import subprocess_env

HAIKU = [{"role": "user", "content": "Write a haiku about the sea."}]
PLAIN = {"speculative": {"mode": "plain"}}  # one decode per token: a greedy answer is the same every time
# A prompt the tiny model continues for hundreds of tokens, asked for more than it would make in the tests' time.
COUNT_ON = {"model": "any", "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", "max_tokens": 1500, "temperature": 0}
LLAMA_TIMINGS = (
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
    "draft_n",
    "draft_n_accepted",
)
KINDS = {"accepted", "corrected", "bonus", "target"}


def extra(obj, name: str):
    """A field outside OpenAI's schema (timings, the model's target...), as the openai client keeps it."""
    return obj.model_extra[name]


def chat(client: OpenAI, **fields):
    return client.chat.completions.create(**{"model": "any", "messages": HAIKU, "max_tokens": 24, **fields})


def streamed_text(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def raw(server, path: str, body: bytes | None = None, key: str | None = KEY, timeout: float = 60) -> tuple[int, dict]:
    """(status, JSON body) of a request without the openai client, which always sends a key and valid JSON."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(server.url + path.lstrip("/"), data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_for_line(server, n: int, timeout: float = 60) -> None:
    """Until /health says n requests are in line (answered or waiting)."""
    deadline = time.monotonic() + timeout
    while (in_line := raw(server, "/health", key=None)[1]["requests_in_line"]) != n:
        assert time.monotonic() < deadline, f"{in_line} requests in line, not {n}, after {timeout} s"
        time.sleep(0.05)


def test_models_names_the_loaded_pair_and_health_needs_no_key(client, api_server, tiny_model):
    (model,) = client.models.list().data
    # A file outside the catalog is named as `specchat models list` names it: after the file.
    assert model.id == extra(model, "target") == extra(model, "draft") == tiny_model.stem
    assert model.owned_by == "specchat" and extra(model, "status") == "ready"
    status, health = raw(api_server, "/health", key=None)
    assert status == 200 and health["status"] == "ok" and health["requests_in_line"] == 0
    # HEAD, as health checks and monitors ask: the GET's status and headers, no body.
    for path, auth in (("/health", {}), ("/v1/models", {"Authorization": f"Bearer {KEY}"})):
        head = urllib.request.Request(api_server.url + path.lstrip("/"), method="HEAD", headers=auth)
        with urllib.request.urlopen(head, timeout=60) as response:
            assert response.status == 200 and response.read() == b"", path


def test_a_chat_answer_carries_usage_and_llama_server_timings(client):
    answer = chat(client, temperature=0)
    choice = answer.choices[0]
    assert answer.object == "chat.completion" and choice.message.role == "assistant"
    assert choice.message.content.strip() and choice.finish_reason in ("stop", "length")
    timings = extra(answer, "timings")
    assert set(LLAMA_TIMINGS) <= set(timings)
    assert answer.usage.completion_tokens == timings["predicted_n"] <= 24
    # prompt_n counts what was decoded: the prompt but its last token (which the first step decodes), less what the
    # cache held from the request before.
    assert 0 <= timings["prompt_n"] < answer.usage.prompt_tokens
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
    assert timings["mode"] == "auto" and timings["strategy"]  # the app's default, explaining itself


def test_the_api_sends_the_model_what_specchat_generate_sends_it(client, tiny_model, tmp_path):
    """Same template, system turn and BOS: a plain greedy answer (one decode per token, so the same every time) is
    the same text through both. Auto and speculative answers may differ where batch shapes flip a near-tie."""
    system, user = "You answer in one short sentence.", "What is the capital of France?"
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    api = chat(client, messages=messages, temperature=0, max_tokens=32, extra_body=PLAIN)
    cli = subprocess.run(
        [sys.executable, "-m", "specchat", "generate", "--target", str(tiny_model), "--threads", "1", "--chat"]
        + ["--system", system, "--prompt", user, "--mode", "plain", "--temperature", "0", "--max-tokens", "32"]
        + ["--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=subprocess_env(SPECCHAT_HOME=str(tmp_path), HF_HUB_OFFLINE="1"),
    )
    assert cli.returncode == 0, cli.stderr
    out = json.loads(cli.stdout)
    assert api.choices[0].message.content == out["text"] and out["text"].strip()
    assert api.usage.completion_tokens == out["stats"]["tokens"]


def test_streaming_gives_the_same_answer_in_chunks_with_timings_and_usage_last(client):
    whole = chat(client, temperature=0, extra_body=PLAIN)
    chunks = list(chat(client, temperature=0, extra_body=PLAIN, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert streamed_text(chunks) == whole.choices[0].message.content
    *pieces, finishing, usage = chunks
    assert all(c.usage is None and c.choices[0].finish_reason is None for c in pieces)
    assert finishing.choices[0].finish_reason == whole.choices[0].finish_reason
    timings = extra(finishing, "timings")
    assert timings["predicted_n"] == whole.usage.completion_tokens and timings["draft_n"] == 0
    assert usage.choices == [] and usage.usage == whole.usage
    assert len({c.id for c in chunks}) == 1 and chunks[0].object == "chat.completion.chunk"


def test_completions_whole_and_streamed(client):
    args = {"model": "any", "prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}
    whole = client.completions.create(**args, extra_body=PLAIN)
    assert whole.object == "text_completion" and whole.choices[0].text.strip()
    assert whole.usage.completion_tokens == extra(whole, "timings")["predicted_n"]
    chunks = list(client.completions.create(**args, extra_body=PLAIN, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_the_mode_is_chosen_per_request_and_the_timings_show_what_it_did(client):
    def timings(**fields) -> dict:
        return extra(chat(client, temperature=0, **fields), "timings")

    plain = timings(extra_body=PLAIN)
    assert plain["mode"] == "plain" and plain["draft_n"] == 0 and plain["verify_steps"] == plain["predicted_n"]
    assert timings(extra_body={"speculative.n_max": 0})["draft_n"] == 0  # llama.cpp's way of saying plain
    spec = timings(extra_body={"speculative": {"mode": "speculative", "k": 3}})
    assert spec["mode"] == "speculative" and spec["draft_n"] > 0 and len(spec["draft_n_by_position"]) == 3
    # A model drafting for itself is accepted but where batch shapes flip a near-tie: fewer steps than tokens.
    assert spec["draft_n_accepted"] > 0 and spec["verify_steps"] < spec["predicted_n"]
    assert spec["acceptance_by_position"][0] == spec["draft_n_accepted_by_position"][0] / spec["draft_n_by_position"][0]
    copy = [{"role": "user", "content": "Repeat this line exactly: the quick brown fox jumps over the lazy dog"}]
    lookup = timings(messages=copy, extra_body={"speculative": {"mode": "lookup", "k": 4}})
    assert lookup["mode"] == "lookup" and lookup["draft_n"] > 0 and lookup["strategy"] == "prompt lookup"


def test_streamed_tokens_can_say_where_they_came_from(client):
    chunks = list(
        chat(
            client,
            temperature=0,
            stream=True,
            extra_body={"speculative": {"mode": "speculative", "k": 3}, "return_token_kinds": True},
        )
    )
    tokens = [extra(c, "token") for c in chunks if "token" in c.model_extra]
    assert len(tokens) == extra(chunks[-1], "timings")["predicted_n"]
    assert {t["kind"] for t in tokens} <= KINDS and "accepted" in {t["kind"] for t in tokens}


def test_a_stop_string_ends_the_answer_before_it(client):
    full = chat(client, temperature=0, extra_body=PLAIN).choices[0].message.content
    words = full.split()
    stop = words[len(words) // 2]
    cut = chat(client, temperature=0, extra_body=PLAIN, stop=[stop, "a string that never comes"]).choices[0]
    assert cut.message.content == full[: full.index(stop)] and cut.finish_reason == "stop"


def test_the_earliest_of_several_stop_strings_ends_the_answer_whatever_their_order(client):
    copy = [{"role": "user", "content": "Repeat this line exactly: the quick brown fox jumps over the lazy dog"}]
    full = chat(client, messages=copy, temperature=0, extra_body=PLAIN).choices[0].message.content
    assert " lazy dog" in full
    # "dog" completes in the same token as " lazy dog", which starts earlier: nothing of " lazy dog" may show.
    fields = dict(messages=copy, temperature=0, stop=["dog", " lazy dog"], extra_body=PLAIN)
    whole = chat(client, **fields).choices[0]
    assert whole.message.content == full[: full.index(" lazy dog")] and whole.finish_reason == "stop"
    assert streamed_text(chat(client, stream=True, **fields)) == whole.message.content


def test_bad_parameters_and_what_the_engine_cannot_do_are_400s_that_say_so(client, api_server):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    cases = [
        ({"temperature": -1}, "temperature", "finite number >= 0"),
        ({"top_p": 1.5}, "top_p", "[0, 1]"),
        ({"max_tokens": 0}, "max_tokens", ">= 1"),
        ({"n": 2}, "n", "must be 1"),
        ({"tools": [tool]}, "tools", "not supported"),
        ({"logprobs": True}, "logprobs", "not supported"),
        ({"messages": [{"role": "user", "content": [image]}]}, "messages[0].content[0]", "text only"),
        ({"extra_body": {"speculative": {"mode": "turbo"}}}, "speculative.mode", "auto, speculative, lookup, plain"),
        ({"extra_body": {"speculative": {"mode": "speculative", "k": 0}}}, "speculative.k", "[1, 31]"),
        ({"stream": True, "temperature": -1}, "temperature", "finite number >= 0"),  # before the stream starts
    ]
    for fields, param, says in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            chat(client, **fields)
        error = caught.value.body
        assert error["type"] == "invalid_request_error" and error["param"] == param, error
        assert says in error["message"], error
    with pytest.raises(openai.BadRequestError) as caught:
        chat(client, messages=[{"role": "user", "content": "word " * 3000}])
    assert caught.value.body["code"] == "context_length_exceeded"
    assert re.search(r"need \d+ tokens but the context holds 2048", caught.value.body["message"])
    status, body = raw(api_server, "/v1/chat/completions", b"{not json")
    assert status == 400 and body["error"]["message"].startswith("the request body is not valid JSON")
    # A lone surrogate, as a browser or curl can send it (the openai client cannot encode one), then the next request.
    for path, field in (("/v1/chat/completions", "messages"), ("/v1/completions", "prompt")):
        text = "abc \ud800 def"
        value = [{"role": "user", "content": text}] if field == "messages" else text
        status, body = raw(api_server, path, json.dumps({field: value, "max_tokens": 4}).encode())
        assert status == 400 and "not valid Unicode" in body["error"]["message"], body
    assert chat(client, temperature=0, max_tokens=4, extra_body=PLAIN).choices[0].message.content


def test_the_key_is_demanded_on_every_route_but_health(api_server):
    for key in (None, "sk-wrong"):
        for path, body in (("/v1/models", None), ("/v1/chat/completions", json.dumps({"messages": HAIKU}).encode())):
            status, answer = raw(api_server, path, body, key=key)
            assert status == 401 and answer["error"]["code"] == "invalid_api_key", answer
    wrong = OpenAI(base_url=api_server.url + "v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.completions.create(model="any", prompt="Hello", max_tokens=2)
    assert raw(api_server, "/health", key=None)[0] == 200


def test_malformed_requests_and_unknown_routes_are_openai_errors_and_the_next_request_is_served(client, api_server):
    hi = b'{"messages": [{"role": "user", "content": "hi"}], '
    for body, says in (
        (hi + b'"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "not valid JSON"),  # nested past Python's recursion
        (b'{"messages": [{"role": ["user"], "content": "hi"}]}', "messages[0].role must be one of"),
        (hi + b'"temperature": 1' + b"0" * 400 + b"}", "temperature must be"),  # a whole number past float's range
        (hi + b'"speculative": {"\\ud800": 1}}', "is not supported"),  # a lone surrogate quoted in the message
    ):
        status, answer = raw(api_server, "/v1/chat/completions", body)
        assert status == 400 and says in answer["error"]["message"], answer
    auth = {"Authorization": f"Bearer {KEY}"}
    for method, path, code in (("GET", "/v1/embeddings", 404), ("GET", "/v1/chat/completions", 405)):
        request = urllib.request.Request(api_server.url + path.lstrip("/"), method=method, headers=auth)
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=60)
        error = json.loads(caught.value.read())["error"]
        assert caught.value.code == code and set(error) == {"message", "type", "param", "code"}, error
        assert f"{method} {path}" in error["message"]
    (model,) = client.models.list().data
    assert client.models.retrieve(model.id).id == model.id
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
    # top_p 0, as OpenAI takes it: the most likely token only, whatever the temperature.
    greedy = chat(client, temperature=0, max_tokens=8, extra_body=PLAIN).choices[0].message.content
    assert chat(client, temperature=1.5, top_p=0, max_tokens=8, extra_body=PLAIN).choices[0].message.content == greedy


def ask(client: OpenAI, question: str, stream: bool) -> str:
    messages = [{"role": "user", "content": question}]
    answer = chat(client, temperature=0, max_tokens=32, messages=messages, extra_body=PLAIN, stream=stream)
    return streamed_text(answer) if stream else answer.choices[0].message.content


def test_two_clients_at_once_each_get_their_own_answer(client):
    questions = ["Name three fruits.", "What is the capital of Italy?"]
    alone = [ask(client, q, stream=False) for q in questions]
    together: list[str | None] = [None, None]

    def run(i: int) -> None:
        together[i] = ask(client, questions[i], stream=True)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert together == alone


def wait_for_log(server, pattern: str, count: int = 1, timeout: float = 60) -> list[re.Match]:
    """The lines of the server's log that match pattern, once there are at least count of them."""
    deadline = time.monotonic() + timeout
    while len(found := list(re.finditer(pattern, server.log.read_text()))) < count:
        assert time.monotonic() < deadline, f"no {pattern!r} in the log:\n{server.log.read_text()[-2000:]}"
        time.sleep(0.05)
    return found


STOPPED = r"completion: the client went away; stopped after (\d+) tokens"


def test_a_client_that_leaves_mid_stream_frees_the_engine_for_the_next_one(client, api_server):
    before = len(wait_for_log(api_server, STOPPED, count=0))
    stream = client.completions.create(**COUNT_ON, stream=True)
    for i, _ in enumerate(stream):
        if i == 4:
            break
    stream.close()  # the connection goes, mid-answer
    with chat(client, temperature=0, max_tokens=8, stream=True) as following:
        assert next(c for c in following if c.choices and c.choices[0].delta.content)  # it has the engine
        streamed_text(following)
    # The server noticed at once: the answer stopped long before its 1500 tokens (the following request, next in
    # line, could not have started before).
    stopped = wait_for_log(api_server, STOPPED, count=before + 1)[-1]
    assert int(stopped[1]) < 200
    wait_for_line(api_server, 0)


def test_a_client_that_gives_up_on_a_whole_answer_stops_it(api_server):
    before = len(wait_for_log(api_server, STOPPED, count=0))
    with pytest.raises(TimeoutError):
        raw(api_server, "/v1/completions", json.dumps(COUNT_ON).encode(), timeout=3)
    stopped = wait_for_log(api_server, STOPPED, count=before + 1)[-1]
    assert int(stopped[1]) < 1500
    wait_for_line(api_server, 0)


def test_a_client_that_leaves_while_its_long_prompt_is_read_stops_the_read_between_batches(api_server):
    before = len(wait_for_log(api_server, STOPPED, count=0))
    # Near the 2048-token context: 4 of llama.cpp's batches of 512, each seconds on one thread.
    body = json.dumps({"prompt": "word " * 1950, "max_tokens": 8, "temperature": 0}).encode()
    with pytest.raises(TimeoutError):
        raw(api_server, "/v1/completions", body, timeout=0.5)
    stopped = wait_for_log(api_server, STOPPED, count=before + 1)[-1]
    assert int(stopped[1]) == 0  # not one token: the read stopped at its next batch, not at its end
    wait_for_line(api_server, 0)


def test_a_client_that_leaves_while_waiting_in_line_leaves_the_line(client, api_server):
    body = json.dumps({"messages": HAIKU, "max_tokens": 4}).encode()
    outcome: list[object] = []

    def give_up_after_3_s() -> None:
        try:
            outcome.append(raw(api_server, "/v1/chat/completions", body, timeout=3))
        except OSError as e:
            outcome.append(e)

    with client.completions.create(**COUNT_ON, stream=True) as first:
        next(iter(first))  # it holds the engine now
        waiting = threading.Thread(target=give_up_after_3_s)
        waiting.start()
        wait_for_line(api_server, 2)
        waiting.join()
        assert isinstance(outcome[0], OSError)  # its client gave up, unanswered...
        wait_for_line(api_server, 1)  # ... and it left the line while the first answer still streams
    wait_for_log(api_server, "chat: the client went away while waiting in line")
    wait_for_line(api_server, 0)


def test_serve_starts_with_the_models_given_whatever_the_user_catalog_holds(tmp_path, tiny_model):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "models.toml").write_text("[pairs.mine\n")  # not TOML
    args = ["--target", str(tiny_model), "--threads", "1", "--n-ctx", "512"]
    for server in serving(tmp_path, ["serve"], args, {"HF_HUB_OFFLINE": "1"}, ready="/health"):
        status, models = raw(server, "/v1/models", key=None)
        assert status == 200 and [m["id"] for m in models["data"]] == [tiny_model.stem]  # named after the file
        body = json.dumps({**COUNT_ON, "max_tokens": 4, "speculative": {"mode": "plain"}}).encode()
        status, answer = raw(server, "/v1/completions", body, key=None)
        assert status == 200 and answer["usage"]["completion_tokens"] == 4


def test_ctrl_c_ends_an_answer_under_way_with_an_error_that_says_so(tmp_path, tiny_model):
    args = ["--target", str(tiny_model), "--threads", "1", "--n-ctx", "2048"]
    for server in serving(tmp_path, ["serve"], args, {"HF_HUB_OFFLINE": "1"}, ready="/health"):
        client = OpenAI(base_url=server.url + "v1", api_key="none", max_retries=0, timeout=120)
        chunks = iter(client.completions.create(**{**COUNT_ON, "stream": True}))
        assert next(chunks).choices  # it streams; 1500 tokens would take far longer than the shutdown's grace
        server.proc.send_signal(signal.SIGINT)
        with pytest.raises(openai.APIError, match=r"the server is shutting down: the answer stopped after \d+ tokens"):
            for _ in chunks:
                pass
        assert server.proc.wait(60) == 130
        log = server.log.read_text()
        assert "Traceback" not in log and "CancelledError" not in log and "Cancel 1 running task" not in log, log
