"""The API while a model loads: 503 as llama-server answers ("Loading model"), with a Retry-After for clients."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import uvicorn

from helpers import Server
from specchat.api.server import create_app
from specchat.engine import BackendConfig
from specchat.host import EngineHost

CHAT = b'{"model": "any", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}'


@pytest.fixture
def served_host(tmp_path, monkeypatch) -> Iterator[tuple[EngineHost, str]]:
    """A host with no model yet, its API served by uvicorn on 127.0.0.1 in this process, in a new specchat home."""
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    host = EngineHost(draft_as_is=True)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(host), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "uvicorn did not start"
            thread.join(0.05)
        yield host, f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        host.wait_loaded(300)
        host.close()


def get(url: str, body: bytes | None = None) -> tuple[int, dict[str, str]]:
    """(status, headers with lower-case names) of a GET, or of a POST of body."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}


def test_while_a_model_loads_the_api_answers_503_with_retry_after(served_host, qwen_pair):
    host, url = served_host
    for status, headers in (get(url + "/health"), get(url + "/v1/chat/completions", CHAT)):
        assert status == 503 and "retry-after" not in headers  # no model at all: asking again will not help
    # The Qwen draft as a model of its own: its first load in a new home takes seconds (the weights, then auto mode's
    # timing of this machine), milliseconds' requests come well within it.
    host.load(qwen_pair[1], None, BackendConfig(n_ctx=512, n_threads=1))
    answers = [get(url + "/health"), get(url + "/v1/chat/completions", CHAT)]
    assert host.status().state == "loading"  # so the answers above were given while it loaded
    for status, headers in answers:
        assert status == 503 and headers.get("retry-after") == "1", (status, headers)
    assert host.wait_loaded(300).state == "ready"
    for status, headers in (get(url + "/health"), get(url + "/v1/chat/completions", CHAT)):
        assert status == 200 and "retry-after" not in headers


def test_specchat_serve_answers_503_while_its_model_loads_then_serves(tmp_path, qwen_pair):
    # The Qwen draft as the model, in a new home: its load and auto mode's timing of this machine take seconds.
    args = ["--target", str(qwen_pair[1]), "--threads", "1", "--n-ctx", "512"]
    server = Server(tmp_path, ["serve"], args, {"HF_HUB_OFFLINE": "1"}, ready="/health")
    try:
        deadline = time.monotonic() + 60
        while True:  # until the port listens: Python's imports come first
            assert server.proc.poll() is None, server.log.read_text()
            try:
                first = get(server.url + "health")
                break
            except urllib.error.URLError:
                assert time.monotonic() < deadline, server.log.read_text()
                time.sleep(0.02)
        assert first[0] == 503 and first[1].get("retry-after") == "1", first
        server.wait_up(300)
        assert get(server.url + "v1/chat/completions", CHAT)[0] == 200
        assert "Ready at http://127.0.0.1:" in server.log.read_text()
    finally:
        server.stop()


def test_specchat_serve_ends_with_one_line_when_its_model_cannot_load(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(64))  # GGUF's magic, then nothing a loader can read
    args = ["--target", str(broken), "--n-ctx", "512"]
    server = Server(tmp_path, ["serve"], args, {"HF_HUB_OFFLINE": "1"}, ready="/health")
    try:
        assert server.proc.wait(120) == 1
    finally:
        server.stop()
    lines = server.log.read_text().strip().splitlines()
    assert lines[-1].startswith("error: ") and "broken.gguf" in lines[-1], lines
    assert "Traceback" not in server.log.read_text()
