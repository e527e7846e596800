"""The API as users get it: `python -m specchat serve` in a subprocess on 127.0.0.1, driven by the official openai
client. SmolLM2-135M drafts for itself (fast, and greedy decoding accepts its drafts), in a specchat home of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from helpers import Server, serving

KEY = "sk-specchat-test"


@pytest.fixture(scope="module")
def api_server(tmp_path_factory, tiny_model) -> Iterator[Server]:
    """SmolLM2 as target and draft, behind an API key given the environment's way (SPECCHAT_API_KEY)."""
    home = tmp_path_factory.mktemp("specchat-api-home")
    # One thread: the machine's two cores are shared, and llama.cpp's threads stall when they must wait for a core.
    args = ["--target", str(tiny_model), "--draft", str(tiny_model), "--threads", "1", "--n-ctx", "2048"]
    env = {"HF_HUB_OFFLINE": "1", "SPECCHAT_API_KEY": KEY}
    yield from serving(home, ["serve"], args, env, ready="/health")


@pytest.fixture
def client(api_server) -> OpenAI:
    # No retries: a test must see the first answer, not a retried one.
    return OpenAI(base_url=api_server.url + "v1", api_key=KEY, max_retries=0, timeout=300)
