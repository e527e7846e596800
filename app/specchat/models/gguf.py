"""Read a GGUF file's header (metadata key/values) without loading its weights.

A GGUF file is untrusted input: every length is bounded by the file size before it is read.
"""

from __future__ import annotations

import functools
import math
import mmap
import reprlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from specchat.errors import NotGGUFError

GGUF_MAGIC = b"GGUF"

# GGUF value types -> struct format (scalars); 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_DEFAULT_ALIGNMENT, _MAX_DIMS = 32, 4  # GGUF_DEFAULT_ALIGNMENT, GGML_MAX_DIMS
# ggml type -> (elements per block, bytes per block), as ggml's ggml_blck_size and ggml_type_size give them (a test
# compares them with the library's): F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K..Q8_K, IQ2_XXS, IQ2_XS, IQ3_XXS,
# IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, I8, I16, I32, I64, F64, IQ1_M, BF16, TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0, Q2_0.
_TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18), 42: (64, 18),
}  # fmt: skip


class _Reader:
    """Walks a memory-mapped header; every length is checked against the file size first."""

    def __init__(self, buf: mmap.mmap, path: Path):
        self.buf, self.pos, self.path = buf, 4, path

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise NotGGUFError(f"{self.path}: truncated or corrupt GGUF header")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.scalar("<Q")).decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, count = self.scalar("<I"), self.scalar("<Q")
            if item_type in _SCALARS:
                fmt = _SCALARS[item_type]
                raw = self.take(struct.calcsize(fmt) * count)
                return list(struct.unpack(f"<{count}{fmt[1]}", raw))
            if count > len(self.buf):
                raise NotGGUFError(f"{self.path}: truncated or corrupt GGUF header (array of {count} items)")
            if item_type == _ARRAY:
                # ggml reads no arrays of arrays either, and following them down would let a crafted file nest
                # deeper than Python's recursion limit.
                raise NotGGUFError(f"{self.path}: corrupt GGUF header (an array of arrays)")
            return [self.value(item_type) for _ in range(count)]
        raise NotGGUFError(f"{self.path}: corrupt GGUF header (unknown value type {vtype})")


def read_metadata(path: str | Path) -> Mapping[str, Any]:
    """All metadata key/values of a GGUF file. Raises NotGGUFError for anything else, and for a file that ends before
    its tensor data does (a download or copy cut short): its header alone reads well, and llama.cpp would refuse it
    only once its weights load, in its own words.

    A file read again unchanged (the same inode, size and modification time) is not parsed again: loading a pair
    reads both headers to check the pair and again to load each model, and a vocabulary of 150k tokens is most of a
    header. The mapping is shared between readers, so it is read-only."""
    path = Path(path)
    if not path.is_file():
        if path.is_dir():
            raise NotGGUFError(f"{path} is a folder, not a GGUF model file; give the .gguf file itself")
        raise NotGGUFError(f"{path}: no such file")
    st = path.stat()
    return _read_whole(path, st.st_ino, st.st_size, st.st_mtime_ns)


# Two: a load reads the pair to check it, then the target again and the draft or its CPU copy; a Qwen header held
# here is 27 MB of Python objects.
@functools.lru_cache(maxsize=2)
def _read_whole(path: Path, inode: int, size: int, mtime_ns: int) -> Mapping[str, Any]:
    end, meta = _parse(path)
    if end > size:
        raise NotGGUFError(
            f"{path}: the file is cut short: its tensors need {end} bytes but it has {size}; download or copy it again"
        )
    return MappingProxyType(meta)


def _parse(path: Path) -> tuple[int, dict[str, Any]]:
    """(where the file's tensor data must end, metadata), read from its header."""
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise NotGGUFError(f"{path}: not a GGUF model file (it does not start with the GGUF magic bytes)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _read_header(_Reader(buf, path))


def _read_kv(r: _Reader) -> tuple[int, dict[str, Any]]:
    """(number of tensors, metadata), leaving r at the tensor infos."""
    version = r.scalar("<I")
    if version < 2:
        raise NotGGUFError(f"{r.path}: GGUF version {version} is too old; convert the model again")
    n_tensors, n_kv = r.scalar("<Q"), r.scalar("<Q")
    meta: dict[str, Any] = {"GGUF.version": version}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.scalar("<I"))
    return n_tensors, meta


def _read_header(r: _Reader) -> tuple[int, dict[str, Any]]:
    """(where the last tensor's data ends, metadata): the data section starts at the first multiple of
    general.alignment after the tensor infos, and each info gives its tensor's offset in it (ggml's gguf.cpp reads
    files the same way)."""
    n_tensors, meta = _read_kv(r)
    alignment = meta.get("general.alignment", _DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise NotGGUFError(f"{r.path}: corrupt GGUF header (alignment {alignment!r} is not a power of 2)")
    end = 0
    for _ in range(n_tensors):
        name, n_dims = r.string(), r.scalar("<I")
        if n_dims > _MAX_DIMS:
            raise NotGGUFError(f"{r.path}: corrupt GGUF header (tensor {name!r} has {n_dims} dimensions)")
        dims = [r.scalar("<Q") for _ in range(n_dims)]
        ggml_type, offset = r.scalar("<I"), r.scalar("<Q")
        if ggml_type not in _TYPE_SIZES:
            raise NotGGUFError(
                f"{r.path}: tensor {name!r} has a type ({ggml_type}) this version of specchat does not know"
            )
        block, size = _TYPE_SIZES[ggml_type]
        end = max(end, offset + math.prod(dims) // block * size)
    if not n_tensors:
        return r.pos, meta  # no data section to align to (a vocabulary-only file, as llama.cpp's tools write)
    return -(-r.pos // alignment) * alignment + end, meta


@dataclass(frozen=True)
class ModelInfo:
    """What decides whether two models can draft for each other, read from the header alone."""

    path: Path
    architecture: str
    name: str
    tokens: list[str] = field(repr=False)
    special: dict[str, int]
    chat_template: str | None
    context_length: int | None
    file_type: int | None

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)


def model_info(path: str | Path) -> ModelInfo:
    meta = read_metadata(path)
    arch = str(meta.get("general.architecture", "unknown"))
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        raise NotGGUFError(f"{path}: GGUF file has no tokenizer vocabulary")
    special = {
        key.removeprefix("tokenizer.ggml.").removesuffix("_token_id"): _whole(meta, key, path)
        for key in meta
        if key.startswith("tokenizer.ggml.") and key.endswith("_token_id")
    }
    return ModelInfo(
        path=Path(path),
        architecture=arch,
        name=str(meta.get("general.name", Path(path).stem)),
        tokens=tokens,
        special=special,
        chat_template=meta.get("tokenizer.chat_template"),
        context_length=_whole(meta, f"{arch}.context_length", path),
        file_type=_whole(meta, "general.file_type", path),
    )


def _whole(meta: dict[str, Any], key: str, path: str | Path) -> int | None:
    """An integer value, or None when the key is absent. The header is untrusted: any other type is a corrupt file,
    as llama.cpp, which reads these keys as integers, would find too."""
    value = meta.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise NotGGUFError(f"{path}: corrupt GGUF header ({key} is {reprlib.repr(value)}, not a whole number)")
    return value
