"""GGUF files read without loading their weights: where a file's tensor data must end."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from specchat.errors import NotGGUFError
from specchat.models import gguf


def test_tensor_type_sizes_are_ggmls():
    from llama_cpp import GGML_TYPE_COUNT
    from llama_cpp._ggml import libggml  # the ggml that llama-cpp-python loads models with

    libggml.ggml_blck_size.restype = ctypes.c_int64
    libggml.ggml_type_size.restype = ctypes.c_size_t
    for ggml_type, (block, size) in gguf._TYPE_SIZES.items():
        assert (libggml.ggml_blck_size(ggml_type), libggml.ggml_type_size(ggml_type)) == (block, size), ggml_type
    # Every type ggml still loads is known (the rest are removed layouts, of block size 0).
    in_use = {t for t in range(GGML_TYPE_COUNT) if libggml.ggml_blck_size(t) > 0}
    assert in_use == set(gguf._TYPE_SIZES)


def test_the_tensor_data_of_whole_files_ends_where_the_file_does(model_paths: dict[str, Path]):
    for path in model_paths.values():
        gguf.check_complete(path)
        assert gguf._parse(path, gguf._data_end) == path.stat().st_size


def test_a_file_cut_anywhere_in_its_tensor_data_is_refused(tiny_model: Path, tmp_path: Path):
    whole = tiny_model.read_bytes()
    for keep in (len(whole) - 1, len(whole) // 2, 8 * 1024 * 1024):
        cut = tmp_path / "cut.gguf"
        cut.write_bytes(whole[:keep])
        with pytest.raises(NotGGUFError, match=f"cut short: its tensors need {len(whole)} bytes but it has {keep};"):
            gguf.check_complete(cut)
        assert gguf.read_metadata(cut) == gguf.read_metadata(tiny_model)  # the header alone reads well
