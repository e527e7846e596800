"""A copy of the draft re-quantized for the CPU: made once, chosen by measurement, and the output unchanged."""

from __future__ import annotations

import json

import pytest

from specchat.engine import BackendConfig, Engine, GenerationSettings
from specchat.engine.draft_copy import COPY_TYPE, MAX_TIME_RATIO, choose_draft, quantize
from specchat.errors import ModelLoadError
from specchat.models.compat import check_pair
from specchat.models.gguf import read_metadata

pytestmark = pytest.mark.models
CONFIG = BackendConfig(n_ctx=512)


def test_the_copy_is_a_q4_0_model_with_the_drafts_vocabulary(tiny_model, tmp_path):
    copy = tmp_path / "copy.gguf"
    quantize(tiny_model, copy, n_threads=2)
    meta = read_metadata(copy)
    assert meta["general.file_type"] == 2  # LLAMA_FTYPE_MOSTLY_Q4_0
    assert read_metadata(tiny_model)["general.file_type"] != 2
    assert check_pair(tiny_model, copy).ok  # same tokenizer: it can draft wherever the file could
    assert not list(tmp_path.glob("*.part"))


def test_a_file_that_cannot_be_quantized_is_refused_and_leaves_nothing(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelLoadError, match="could not re-quantize"):
        quantize(broken, tmp_path / "copy.gguf", n_threads=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.gguf"]


def test_the_choice_is_measured_once_and_kept(tiny_model, tmp_path):
    heard: list[str] = []
    choice = choose_draft(tiny_model, CONFIG, tmp_path, heard.append)
    assert heard == [
        f"Making a {COPY_TYPE} copy of the draft for this CPU (once)…",
        f"Timing the draft against its {COPY_TYPE} copy (once)…",
    ]
    assert choice.file_s > 0 and choice.copy_s > 0
    assert choice.uses_copy == (choice.copy_s <= MAX_TIME_RATIO * choice.file_s)
    copies = list(tmp_path.glob(f"*.{COPY_TYPE.lower()}.gguf"))
    # The copy is kept only where it drafts: a slower copy would be disk space for nothing.
    assert copies == ([choice.path] if choice.uses_copy else []) and choice.path.is_file()
    (record,) = tmp_path.glob("draft-choice-*.json")
    assert json.loads(record.read_text())["path"] == str(choice.path)

    assert choose_draft(tiny_model, CONFIG, tmp_path, heard.append) == choice
    assert len(heard) == 2, "a second load measured again"
    if choice.uses_copy:  # a deleted copy is made again, not trusted from the record
        choice.path.unlink()
        again = choose_draft(tiny_model, CONFIG, tmp_path, heard.append)
        assert heard[2:] == heard[:2] and again.path.is_file()


def test_one_copy_serves_every_thread_count(qwen_pair, tmp_path):
    draft = qwen_pair[1]  # the catalog's Qwen draft, whose copy drafts faster on every CPU measured so far
    heard: list[str] = []
    first = choose_draft(draft, BackendConfig(n_ctx=512, n_threads=1), tmp_path, heard.append)
    if not first.uses_copy:
        pytest.skip(f"the draft's {COPY_TYPE} copy drafts no faster than the file on this CPU: none is kept to share")
    second = choose_draft(draft, BackendConfig(n_ctx=512, n_threads=2), tmp_path, heard.append)
    # Each thread count times the two for itself, but the copy (about 0.5 GB) is made once: each value made another.
    assert heard.count(f"Timing the draft against its {COPY_TYPE} copy (once)…") == 2
    assert heard.count(f"Making a {COPY_TYPE} copy of the draft for this CPU (once)…") == 1
    assert len(list(tmp_path.glob("draft-choice-*.json"))) == 2
    assert list(tmp_path.glob(f"*.{COPY_TYPE.lower()}.gguf")) == ([first.path] if second.uses_copy else [])


def test_drafting_with_the_copy_keeps_every_token_the_targets_own(tiny_model, tmp_path):
    copy = tmp_path / "copy.gguf"
    quantize(tiny_model, copy, n_threads=2)
    engine = Engine.load(tiny_model, copy, CONFIG)
    steps = []
    engine.on_verify = steps.append
    try:
        messages = [{"role": "user", "content": "List three fruits."}]
        events = list(engine.chat(messages, GenerationSettings(mode="speculative", k=4, max_tokens=40)))
    finally:
        engine.close()
    assert events[-1].stats.accepted > 0
    # Greedy: each accepted draft and each correction is the target's argmax at its position (design.md's
    # exactness; batch and single-token decodes may differ in the last bits, so not a token-for-token replay).
    for step in steps:
        choice = step.logits.argmax(axis=1).tolist()
        assert step.drafts[: step.n_accepted] == choice[: step.n_accepted]
        assert step.next_token == choice[step.n_accepted]


def test_loading_with_a_copy_folder_says_how_the_draft_runs(tiny_model, tmp_path):
    engine = Engine.load(tiny_model, tiny_model, CONFIG, cpu_copy_dir=tmp_path)
    try:
        assert engine.draft_note.startswith((f"drafting with a {COPY_TYPE} copy of", "drafting with smollm2"))
        assert "ms a token" in engine.draft_note
    finally:
        engine.close()
    # A folder that cannot be written: the draft file drafts, and the note says why.
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    engine = Engine.load(tiny_model, tiny_model, CONFIG, cpu_copy_dir=blocked)
    try:
        assert engine.draft.path == tiny_model
        assert engine.draft_note.startswith(f"drafting with {tiny_model.name} as it is (no CPU copy:")
    finally:
        engine.close()
    # A draft on the GPU is left as it is: the copy is for the CPU's kernels.
    engine = Engine.load(tiny_model, tiny_model, BackendConfig(n_ctx=512, n_gpu_layers=-1), cpu_copy_dir=tmp_path)
    try:
        assert engine.draft.path == tiny_model and engine.draft_note is None
    finally:
        engine.close()
