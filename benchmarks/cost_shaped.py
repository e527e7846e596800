"""A target with a bigger model's cost and a small model's answers: identity blocks appended to a real GGUF.

    python benchmarks/cost_shaped.py SRC.gguf [--blocks N | --size-of 7b|14b] [--out PATH]

Each appended block is a copy of layer 0 with its output projections (attention's and the feed-forward's) zeroed:
it adds exactly nothing to the residual stream, so the model answers as SRC does, token for token, while llama.cpp
still reads and multiplies every one of its weights. A CPU user's 7B-class target costs what its file's bytes
cost to stream through the cores each token; `--size-of` appends blocks until the file is that model's size.
Written into the test-model cache folder (never the repository) as `SRC-stem+{N}id.gguf`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, ReaderTensor
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

# File sizes of the models a cost-shaped target stands in for (Qwen2.5-Coder Instruct, Q4_K_M, bartowski's files),
# the class of targets CPU users run.
MODEL_SIZES = {"7b": 4_680_000_000, "14b": 8_990_000_000}
# The projections whose output a block adds to the residual stream: zeroed, the block adds nothing.
ZEROED = ("attn_output.weight", "attn_output.bias", "ffn_down.weight", "ffn_down.bias")
FIRST_BLOCK = "blk.0."


def default_dir() -> Path:
    """The test-model cache folder (tests/fetch_models.py's): built files are large and never belong in the repo."""
    return Path(os.environ.get("SPEC_TEST_MODELS") or Path.home() / ".cache" / "spec-test-models")


def blocks_for_size(src_bytes: int, block_bytes: int, goal_bytes: int) -> int:
    """How many blocks of block_bytes bring a file of src_bytes nearest to goal_bytes (at least one)."""
    return max(1, round((goal_bytes - src_bytes) / block_bytes))


def padded(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def zero_is_zero(qtype: GGMLQuantizationType) -> bool:
    """Whether all-zero bytes decode to zeros in this type: true where every block's scale is stored in it."""
    _, type_size = GGML_QUANT_SIZES[qtype]  # one block of the type
    return bool(np.all(dequantize(np.zeros(type_size, dtype=np.uint8), qtype) == 0))


def block_count_key(reader: GGUFReader) -> str:
    arch = reader.fields["general.architecture"].contents()
    return f"{arch}.block_count"


def first_block(reader: GGUFReader) -> list[ReaderTensor]:
    return [t for t in reader.tensors if t.name.startswith(FIRST_BLOCK)]


def block_bytes(reader: GGUFReader) -> int:
    """What one appended block adds to the file: layer 0's tensor data, each padded to the file's alignment."""
    return sum(padded(t.n_bytes, reader.alignment) for t in first_block(reader))


def copy_fields(reader: GGUFReader, writer: GGUFWriter, n_layer: int, n_new: int) -> None:
    """Every key of the source, the block count raised by n_new; per-layer arrays repeat layer 0's value."""
    count_key = block_count_key(reader)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":  # the header's own, and the writer's
            continue
        vtype = field.types[0]
        if key == count_key:
            writer.add_key_value(key, n_layer + n_new, vtype)
        elif vtype == GGUFValueType.ARRAY:
            values = field.contents()
            if key.startswith(count_key.split(".")[0] + ".") and len(values) == n_layer:
                values = values + [values[0]] * n_new  # e.g. per-layer head counts in some architectures
            writer.add_key_value(key, values, vtype, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, field.contents(), vtype)


def tensors(reader: GGUFReader, n_layer: int, n_new: int) -> Iterator[tuple[str, ReaderTensor, bool]]:
    """(name, source tensor, whether zeroed): the source's tensors, then the identity blocks'."""
    for t in reader.tensors:
        yield t.name, t, False
    for i in range(n_new):
        for t in first_block(reader):
            yield f"blk.{n_layer + i}." + t.name.removeprefix(FIRST_BLOCK), t, t.name.endswith(ZEROED)


def pad(src: Path, n_new: int, out: Path) -> None:
    """Write out as src with n_new identity blocks appended (through a .part file, renamed when complete)."""
    reader = GGUFReader(src)
    n_layer = int(reader.fields[block_count_key(reader)].contents())
    for t in first_block(reader):
        if t.name.endswith(ZEROED) and not zero_is_zero(t.tensor_type):
            raise SystemExit(f"{t.name} is {t.tensor_type.name}, where zero bytes are not zeros: cannot zero it")
    if not any(t.name.endswith(ZEROED) for t in first_block(reader)):
        raise SystemExit(f"{src.name} has no {', '.join(ZEROED)} in layer 0: not a block this script knows")
    part = out.with_name(out.name + ".part")
    writer = GGUFWriter(part, reader.fields["general.architecture"].contents())
    writer.data_alignment = reader.alignment
    copy_fields(reader, writer, n_layer, n_new)
    plan = list(tensors(reader, n_layer, n_new))
    for name, t, _ in plan:
        writer.add_tensor_info(name, t.data.shape, t.data.dtype, t.n_bytes, raw_dtype=t.tensor_type)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, t, zeroed in plan:
            # From the memory map: the source's pages stream through, the file is never held in memory whole.
            writer.write_tensor_data(np.zeros_like(t.data) if zeroed else t.data)
        writer.close()
        os.replace(part, out)
    finally:
        part.unlink(missing_ok=True)


def default_name(src: Path, n_new: int) -> str:
    return f"{src.stem}+{n_new}id.gguf"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path, help="the GGUF model to pad")
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--blocks", type=int, help="identity blocks to append")
    size.add_argument("--size-of", choices=sorted(MODEL_SIZES), help="append blocks up to this model's file size")
    p.add_argument("--out", type=Path, help=f"the file to write (default: {default_dir()}/SRC-stem+Nid.gguf)")
    args = p.parse_args(argv)
    if args.blocks is not None and args.blocks < 1:
        p.error("--blocks must be at least 1")
    if args.blocks is None:
        block = block_bytes(GGUFReader(args.src))
        n_new = blocks_for_size(args.src.stat().st_size, block, MODEL_SIZES[args.size_of])
    else:
        n_new = args.blocks
    out = args.out or default_dir() / default_name(args.src, n_new)
    out.parent.mkdir(parents=True, exist_ok=True)
    pad(args.src, n_new, out)
    written = GGUFReader(out)
    n_layer = written.fields[block_count_key(written)].contents()
    print(f"{out}\n{out.stat().st_size / 1e9:.2f} GB, {n_layer} blocks ({n_new} identity blocks appended)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
