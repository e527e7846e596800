"""benchmarks/cost_shaped.py: identity blocks make a model costlier without changing a token of its answers."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import llama_cpp
import pytest
from gguf import GGMLQuantizationType, GGUFReader
from llama_cpp._internals import LlamaModel as RawModel

from specchat.engine import Engine, GenerationSettings, SamplingParams

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cost_shaped.py"
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Water boils at"]
ADDED = 10


def load_script():
    spec = importlib.util.spec_from_file_location("cost_shaped", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cost_shaped = load_script()


def test_size_of_picks_the_block_count_nearest_the_named_file():
    # The 1.5B Qwen file and one of its blocks (its layer 0, 30.0 MB): 119 blocks make 4.69 GB, as the 7B's file.
    src, block = 1_117_320_768, 29_990_912
    assert cost_shaped.blocks_for_size(src, block, cost_shaped.MODEL_SIZES["7b"]) == 119
    assert cost_shaped.blocks_for_size(src, block, cost_shaped.MODEL_SIZES["14b"]) == 263
    assert cost_shaped.blocks_for_size(src, block, src) == 1  # a named model smaller than the source: one block


def test_zero_bytes_are_zero_weights_in_the_types_models_use():
    for qtype in ("F32", "F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q4_K", "Q5_K", "Q6_K"):
        assert cost_shaped.zero_is_zero(GGMLQuantizationType[qtype]), qtype


@pytest.fixture(scope="module")
def padded(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cost-shaped")
    env = {**os.environ, "SPEC_TEST_MODELS": str(folder)}
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(tiny_model), "--blocks", str(ADDED)], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr
    out = folder / f"{tiny_model.stem}+{ADDED}id.gguf"  # into the models folder, named for what it holds
    assert run.stdout.splitlines()[0] == str(out)
    return out


def greedy_tokens(path: Path) -> list[list[int]]:
    engine = Engine.load(path)
    try:
        settings = GenerationSettings(mode="plain", sampling=SamplingParams(0.0), max_tokens=24)
        return [[e.token for e in engine.generate(prompt, settings)] for prompt in PROMPTS]
    finally:
        engine.close()


def test_the_padded_model_answers_token_for_token_as_the_real_one(tiny_model, padded):
    assert greedy_tokens(padded) == greedy_tokens(tiny_model)


def loaded_shape(path: Path) -> tuple[int, int]:
    """(layers, weights) as llama.cpp loaded them: what each decoded token is multiplied through."""
    model = RawModel(path_model=str(path), params=llama_cpp.llama_model_default_params(), verbose=True)
    try:
        return llama_cpp.llama_model_n_layer(model.model), model.n_params()
    finally:
        model.close()


def test_the_padded_model_runs_every_added_block_and_keeps_every_field(tiny_model, padded):
    (layers, weights), (padded_layers, padded_weights) = loaded_shape(tiny_model), loaded_shape(padded)
    source = GGUFReader(tiny_model)
    block = sum(t.n_elements for t in source.tensors if t.name.startswith("blk.0."))
    assert padded_layers == layers + ADDED
    assert padded_weights == weights + ADDED * block
    assert padded.stat().st_size > tiny_model.stat().st_size + ADDED * cost_shaped.block_bytes(source) * 0.99
    written = GGUFReader(padded)
    assert written.fields.keys() == source.fields.keys()
    for key, field in source.fields.items():
        if not key.startswith("GGUF.") and key != "llama.block_count":
            assert written.fields[key].contents() == field.contents(), key
