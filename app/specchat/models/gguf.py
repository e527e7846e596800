"""Read a GGUF file's header (metadata key/values) without loading its weights.

A GGUF file is untrusted input: every length is bounded by the file size before it is read.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.errors import NotGGUFError

GGUF_MAGIC = b"GGUF"

# GGUF value types -> struct format (scalars); 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


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
            return [self.value(item_type) for _ in range(count)]
        raise NotGGUFError(f"{self.path}: corrupt GGUF header (unknown value type {vtype})")


def read_metadata(path: str | Path) -> dict[str, Any]:
    """All metadata key/values of a GGUF file. Raises NotGGUFError for anything else."""
    path = Path(path)
    if not path.is_file():
        raise NotGGUFError(f"{path}: no such file")
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise NotGGUFError(f"{path}: not a GGUF model file (it does not start with the GGUF magic bytes)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _read_kv(_Reader(buf, path))


def _read_kv(r: _Reader) -> dict[str, Any]:
    version = r.scalar("<I")
    if version < 2:
        raise NotGGUFError(f"{r.path}: GGUF version {version} is too old; convert the model again")
    _n_tensors, n_kv = r.scalar("<Q"), r.scalar("<Q")
    meta: dict[str, Any] = {"GGUF.version": version}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.scalar("<I"))
    return meta


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
        key.removeprefix("tokenizer.ggml.").removesuffix("_token_id"): int(value)
        for key, value in meta.items()
        if key.startswith("tokenizer.ggml.") and key.endswith("_token_id")
    }
    return ModelInfo(
        path=Path(path),
        architecture=arch,
        name=str(meta.get("general.name", Path(path).stem)),
        tokens=tokens,
        special=special,
        chat_template=meta.get("tokenizer.chat_template"),
        context_length=meta.get(f"{arch}.context_length"),
        file_type=meta.get("general.file_type"),
    )
