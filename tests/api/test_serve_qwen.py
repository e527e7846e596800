"""`specchat serve` with a real draft model: Qwen2.5-Coder 0.5B drafting for 1.5B."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from helpers import Server, serving


@pytest.fixture(scope="module")
def qwen_server(tmp_path_factory, qwen_pair) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("specchat-api-qwen-home")
    target, draft = qwen_pair
    # The draft file as it is: its CPU copy is tested elsewhere, and would add minutes here.
    args = ["--target", str(target), "--draft", str(draft), "--draft-as-is", "--threads", "1", "--n-ctx", "1024"]
    # Loading includes timing the pair for auto mode, minutes on two shared cores.
    yield from serving(home, ["serve"], args, {"HF_HUB_OFFLINE": "1"}, ready="/health", timeout=900)


def test_a_real_draft_model_drafts_and_the_target_takes_part_of_it(qwen_server, qwen_pair):
    client = OpenAI(base_url=qwen_server.url + "v1", api_key="none", max_retries=0, timeout=600)
    (model,) = client.models.list().data
    assert (model.model_extra["target"], model.model_extra["draft"]) == tuple(p.stem for p in qwen_pair)
    messages = [{"role": "user", "content": "Write a Python function that returns the squares of a list of numbers."}]
    answer = client.chat.completions.create(
        model="any",
        messages=messages,
        max_tokens=48,
        temperature=0,
        extra_body={"speculative": {"mode": "speculative", "k": 4}},
    )
    timings = answer.model_extra["timings"]
    assert answer.choices[0].message.content.strip() and timings["mode"] == "speculative"
    assert 0 < timings["draft_n_accepted"] <= timings["draft_n"] and len(timings["draft_n_by_position"]) == 4
    # Drafts accepted: fewer target steps than tokens.
    assert timings["verify_steps"] < timings["predicted_n"] and timings["acceptance_by_position"][0] > 0
