"""GGUF files read without loading their weights: where a file's tensor data must end."""

from __future__ import annotations

import ctypes
import struct
import sys
from pathlib import Path

import pytest
from gguf import GGUFWriter

from specchat.engine.llama_backend import BackendConfig
from specchat.engine.speculative import Engine
from specchat.errors import NotGGUFError
from specchat.models import gguf

from .support import run_cli


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
        gguf.read_metadata(path)
        assert gguf._parse(path)[0] == path.stat().st_size


def test_a_file_cut_anywhere_in_its_tensor_data_is_refused(tiny_model: Path, tmp_path: Path, capsys):
    whole = tiny_model.read_bytes()
    cut = tmp_path / "cut.gguf"
    for keep in (len(whole) - 1, len(whole) // 2, 8 * 1024 * 1024):
        cut.write_bytes(whole[:keep])
        with pytest.raises(NotGGUFError, match=f"cut short: its tensors need {len(whole)} bytes but it has {keep};"):
            gguf.read_metadata(cut)
    # Its header alone reads well: a check of headers called such a draft compatible.
    assert run_cli("check", str(tiny_model), str(cut)) == 1
    assert capsys.readouterr().err == (
        f"error: {cut}: the file is cut short: its tensors need {len(whole)} bytes but it has {8 * 1024 * 1024}; "
        "download or copy it again\n"
    )


def test_a_header_read_again_unchanged_is_not_parsed_again(tiny_model: Path, tmp_path: Path, monkeypatch):
    parsed = []
    parse = gguf._parse
    monkeypatch.setattr(gguf, "_parse", lambda path: parsed.append(path) or parse(path))
    gguf._read_whole.cache_clear()
    # Loading a pair reads both headers to check the pair and each again to load its model: one parse a file.
    Engine.load(tiny_model, tiny_model, BackendConfig(n_ctx=256, n_threads=1)).close()
    assert parsed == [tiny_model]
    with pytest.raises(TypeError):  # one mapping for every reader: none may change it for the others
        gguf.read_metadata(tiny_model)["general.name"] = "other"
    # A file changed since (here cut short) is read again, not answered from before.
    copy = tmp_path / "copy.gguf"
    whole = tiny_model.read_bytes()
    copy.write_bytes(whole)
    assert gguf.read_metadata(copy) == gguf.read_metadata(tiny_model)
    copy.write_bytes(whole[:-1])
    with pytest.raises(NotGGUFError, match="cut short"):
        gguf.read_metadata(copy)
    assert parsed == [tiny_model, copy, copy]


def _gguf_bytes(kv: bytes, n_kv: int = 1) -> bytes:
    """A GGUF v3 header with no tensors and the given key/value bytes."""
    return b"GGUF" + struct.pack("<IQQ", 3, 0, n_kv) + kv


def _string(text: str) -> bytes:
    return struct.pack("<Q", len(text)) + text.encode()


def test_arrays_nested_past_pythons_recursion_limit_are_a_corrupt_header(tmp_path: Path, capsys):
    depth = sys.getrecursionlimit() * 2
    nested = struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * depth + struct.pack("<IQ", 4, 0)
    crafted = tmp_path / "nested.gguf"
    crafted.write_bytes(_gguf_bytes(_string("x") + nested))

    with pytest.raises(NotGGUFError, match="corrupt GGUF header"):
        gguf.read_metadata(crafted)
    assert run_cli("add", str(crafted)) == 1
    assert capsys.readouterr().err == f"error: {crafted}: corrupt GGUF header (an array of arrays)\n"


@pytest.mark.parametrize("value", ["one", 1.5])
def test_a_token_id_that_is_not_a_whole_number_is_a_corrupt_header(tmp_path: Path, value, capsys):
    crafted = tmp_path / "bad-id.gguf"
    writer = GGUFWriter(crafted, "llama")
    writer.add_token_list(["<s>", "</s>", "a"])
    add = writer.add_string if isinstance(value, str) else writer.add_float32
    add("tokenizer.ggml.bos_token_id", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()

    with pytest.raises(NotGGUFError, match="corrupt GGUF header"):
        gguf.model_info(crafted)
    assert run_cli("check", str(crafted), str(crafted)) == 1
    assert capsys.readouterr().err == (
        f"error: {crafted}: corrupt GGUF header (tokenizer.ggml.bos_token_id is {value!r}, not a whole number)\n"
    )
