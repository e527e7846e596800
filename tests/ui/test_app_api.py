"""`specchat ui` serves the OpenAI-compatible API too: the same process, port, engine and line as the chat tab."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from openai import OpenAI

from helpers import Server, serving

KEY = "sk-app-test"
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"  # a prompt the tiny model continues for hundreds of tokens


@pytest.fixture(scope="module")
def app_server(tmp_path_factory, tiny_model) -> Iterator[Server]:
    """The app with SmolLM2 as target and draft, its API behind a key given on the command line; up once the model
    is ready (the app loads it in the background)."""
    home = tmp_path_factory.mktemp("specchat-app-api-home")
    (home / "config").mkdir()
    (home / "config" / "ui_settings.json").write_text(json.dumps({"max_tokens": 32, "temperature": 0.0}))
    args = ["--target", str(tiny_model), "--draft", str(tiny_model), "--threads", "1", "--api-key", KEY]
    yield from serving(home, ["ui", "--no-browser"], args, {"HF_HUB_OFFLINE": "1"}, ready="/health")


@pytest.fixture
def client(app_server) -> OpenAI:
    return OpenAI(base_url=app_server.url + "v1", api_key=KEY, max_retries=0, timeout=300)


def test_the_app_answers_the_api_beside_the_page(app_server, client, tiny_model):
    answer = client.chat.completions.create(
        model="any", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0
    )
    assert answer.choices[0].message.content.strip()
    assert answer.model_extra["timings"]["predicted_n"] == answer.usage.completion_tokens
    assert [m.id for m in client.models.list().data] == [tiny_model.stem]
    with urllib.request.urlopen(app_server.url, timeout=30) as page:
        assert page.status == 200 and b"<html" in page.read(2000).lower()
    # A /v1 path or method the API does not serve is the API's error, not the page's (Gradio's, mounted at the root).
    auth = {"Authorization": f"Bearer {KEY}"}
    for method, path, code in (("GET", "v1/embeddings", 404), ("GET", "v1/chat/completions", 405)):
        request = urllib.request.Request(app_server.url + path, method=method, headers=auth)
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=30)
        error = json.loads(caught.value.read())["error"]
        assert caught.value.code == code and f"{method} /{path}" in error["message"], error
        assert set(error) == {"message", "type", "param", "code"}
    assert caught.value.headers["Allow"] == "POST"
    log = app_server.log.read_text()
    assert f"Running on local URL:  http://127.0.0.1:{app_server.port}" in log
    assert f"OpenAI-compatible API: http://127.0.0.1:{app_server.port}/v1" in log


def test_the_chat_tab_waits_in_the_same_line_as_the_api(app_server, client, new_page):
    page = new_page(app_server.url)
    page.wait_for_selector('#sc-model .sc-model[data-state="ready"]', timeout=180_000)
    counting = {"model": "any", "prompt": COUNTING, "max_tokens": 1500, "temperature": 0}
    with client.completions.create(**counting, stream=True, extra_body={"speculative": {"mode": "plain"}}) as stream:
        next(iter(stream))  # the API's request holds the engine
        page.fill("#sc-input textarea", "What is the capital of France?")
        page.click("#sc-send")
        page.wait_for_selector('#sc-status .sc-status[data-state="waiting"]', timeout=60_000)
        assert "Waiting in line: 1 request ahead" in page.locator("#sc-status").inner_text()
    # The API's client went away: its answer stops, and the chat tab's comes.
    page.wait_for_selector('#sc-status .sc-status[data-state="done"]', timeout=180_000)
