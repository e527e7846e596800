"""Compatibility of draft and target, decided from real GGUF headers before any weights load."""

from __future__ import annotations

from pathlib import Path

import pytest

from fetch_models import MODELS
from specchat.models import catalog as cat
from specchat.models.compat import check_pair

from .support import run_cli


def test_the_qwen_coder_pair_can_draft(qwen_pair):
    target, draft = qwen_pair
    result = check_pair(target, draft)
    assert result.ok and result.reasons == []


def test_smollm2_cannot_draft_for_qwen_and_says_why(qwen_pair, tiny_model):
    target, draft = qwen_pair[0], tiny_model
    result = check_pair(target, draft)
    assert not result.ok
    assert "vocabulary sizes differ: target has 151936 tokens, draft has 49152" in result.reasons
    assert any(reason.startswith("special token 'eos' differs") for reason in result.reasons)


def test_models_check_prints_the_verdict(qwen_pair, tiny_model, capsys):
    (target, draft), smol = qwen_pair, tiny_model

    assert run_cli("check", str(target), str(draft)) == 0
    assert capsys.readouterr().out.startswith("compatible:")

    assert run_cli("check", str(target), str(smol)) == 1
    out = capsys.readouterr().out
    assert out.startswith("incompatible:") and "vocabulary sizes differ" in out


def test_models_check_of_a_catalog_model_that_is_not_downloaded_says_how_to_get_it(smollm, capsys):
    assert run_cli("check", "qwen2.5-1.5b-instruct", str(smollm)) == 1
    assert "run `specchat models download qwen2.5-1.5b-instruct`" in capsys.readouterr().err


def _local_copy(model: cat.ModelSource, model_paths: dict[str, Path]) -> Path | None:
    """The catalog model's file if it is on this machine: downloaded, or one of the test models with the same size
    and sha256 (tests/fetch_models.py checked that sha256 when it fetched the file)."""
    if model.installed:
        return model.path
    for name, path in model_paths.items():
        if (MODELS[name].size, MODELS[name].sha256) == (model.size, model.sha256):
            return path
    return None


@pytest.mark.parametrize("pair_name", sorted(cat.load_catalog(Path(__file__).parents[2] / "models.toml").pairs))
def test_every_catalog_pair_passes_the_check_where_its_files_are_present(pair_name: str, model_paths):
    catalog = cat.load_catalog()
    pair = catalog.pairs[pair_name]
    files = [_local_copy(catalog.models[name], model_paths) for name in (pair.target, pair.draft)]
    if None in files:
        pytest.skip(f"the files of pair {pair_name} are not on this machine (the hub is out of reach here)")
    result = check_pair(*files)
    assert result.ok, f"{pair_name}: {result}"
