"""Tried and not kept: a draft whose output matrix keeps only the most frequent tokens (FR-Spec's idea).

    pip install wordfreq    # the trial's prose counts; the app does not use it
    python benchmarks/results/tried-vocab-cut/trial.py DRAFT.gguf [--sizes 24576,32768,49152]

Makes the app's Q4_0 copy of the draft, ranks the Qwen2 tokenizer's ids by a frequency table counted here (this
Python's standard library and /usr/include for code, installed packages' METADATA and /usr/share/doc READMEs for
English prose, wordfreq's lists for 13 languages), and writes copies whose vocabulary (tokenizer, token_embd and
output rows) holds the N most frequent ids plus the 256 byte tokens and the control tokens. Then, in one process:

- the time of one draft token for each copy, interleaved over rounds (the machine drifts);
- the draft's greedy agreement with the target over the recorded suite answers (benchmarks/results/
  replay-greedy.json), two ways: context tokens outside the cut vocabulary fed as their longest kept prefix, and
  every context token fed exactly, as its Q4_0 embedding row from the full copy (llama.cpp takes embeddings in
  place of token ids), so that only the output is cut.

The results are in README.md beside this file.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import statistics
import struct
import sys
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp._internals import LlamaBatch

from specchat.engine.calibration import TIMING_TEXT, decode_seconds
from specchat.engine.draft_copy import quantize
from specchat.engine.llama_backend import LlamaModel
from specchat.models.gguf import _SCALARS as SCALARS  # GGUF value type -> struct format

HERE = Path(__file__).parent
RECORDING = HERE.parent / "replay-greedy.json"
BLOCK_BYTES = {0: (1, 4), 1: (1, 2), 2: (32, 18)}  # ggml type: (weights a block, bytes a block); F32, F16, Q4_0
LANGUAGES = {"en": 0.3, "de": 0.1, "fr": 0.1, "es": 0.1, "zh": 0.1, "it": 0.05, "pt": 0.05, "ru": 0.05, "ja": 0.05}
LANGUAGES |= {"ko": 0.03, "nl": 0.03, "pl": 0.02, "tr": 0.02}


class Gguf:
    """A GGUF file's key/values (raw encoded values) and tensors, enough to rewrite its vocabulary."""

    def __init__(self, path: Path):
        self.buf = memoryview(path.read_bytes())
        self.pos = 4
        self.version, n_tensors, n_kv = self.scalar("<I"), self.scalar("<Q"), self.scalar("<Q")
        self.kv: dict[str, tuple[int, bytes]] = {}
        for _ in range(n_kv):
            key, vtype = self.string(), self.scalar("<I")
            start = self.pos
            self.skip(vtype)
            self.kv[key] = (vtype, bytes(self.buf[start : self.pos]))
        self.tensors = []
        for _ in range(n_tensors):
            name = self.string()
            dims = [self.scalar("<Q") for _ in range(self.scalar("<I"))]
            self.tensors.append((name, dims, self.scalar("<I"), self.scalar("<Q")))
        self.align = struct.unpack("<I", self.kv["general.alignment"][1])[0] if "general.alignment" in self.kv else 32
        self.data_start = -(-self.pos // self.align) * self.align

    def scalar(self, fmt: str):
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.scalar("<Q")
        self.pos += n
        return bytes(self.buf[self.pos - n : self.pos]).decode("utf-8", errors="replace")

    def skip(self, vtype: int) -> None:
        if vtype in SCALARS:
            self.pos += struct.calcsize(SCALARS[vtype])
        elif vtype == 8:
            n = self.scalar("<Q")  # read before adding: `pos += scalar()` would add to the old pos
            self.pos += n
        else:
            item, count = self.scalar("<I"), self.scalar("<Q")
            if item in SCALARS:
                self.pos += struct.calcsize(SCALARS[item]) * count
            else:
                for _ in range(count):
                    self.skip(item)

    def strings(self, key: str) -> list[bytes]:
        """A key's array of strings, as bytes."""
        raw = memoryview(self.kv[key][1])
        _, count = struct.unpack_from("<IQ", raw)
        out, pos = [], 12
        for _ in range(count):
            n = struct.unpack_from("<Q", raw, pos)[0]
            out.append(bytes(raw[pos + 8 : pos + 8 + n]))
            pos += 8 + n
        return out

    def token_types(self) -> np.ndarray:
        return np.frombuffer(self.kv["tokenizer.ggml.token_type"][1][12:], dtype="<i4")  # past item type and count

    def tensor(self, name: str) -> tuple[list[int], int, memoryview]:
        for tname, dims, ttype, offset in self.tensors:
            if tname == name:
                per_block, block_bytes = BLOCK_BYTES[ttype]
                size = int(np.prod(dims)) // per_block * block_bytes
                return dims, ttype, self.buf[self.data_start + offset : self.data_start + offset + size]
        raise KeyError(name)

    def write_cut(self, dest: Path, keep: np.ndarray) -> None:
        """Write dest with the vocabulary cut to the ids in keep (sorted), in that order."""
        new_id = {int(t): i for i, t in enumerate(keep)}
        strings = self.strings("tokenizer.ggml.tokens")
        kv = dict(self.kv)
        kv["tokenizer.ggml.tokens"] = (9, struct.pack("<IQ", 8, len(keep)) + b"".join(_enc(strings[t]) for t in keep))
        types = self.token_types()
        kv["tokenizer.ggml.token_type"] = (9, struct.pack("<IQ", 5, len(keep)) + types[keep].tobytes())
        for key, (vtype, raw) in self.kv.items():
            if key.startswith("tokenizer.ggml.") and key.endswith("_token_id"):
                kv[key] = (vtype, struct.pack(SCALARS[vtype], new_id[struct.unpack(SCALARS[vtype], raw)[0]]))
        tensors = []
        for name, _, _, _ in self.tensors:
            dims, ttype, data = self.tensor(name)
            if name in ("token_embd.weight", "output.weight"):
                data = np.frombuffer(data, dtype=np.uint8).reshape(dims[1], -1)[keep]
                dims = [dims[0], len(keep)]
            tensors.append((name, dims, ttype, bytes(data)))
        head = b"GGUF" + struct.pack("<IQQ", self.version, len(tensors), len(kv))
        head += b"".join(_enc(key.encode()) + struct.pack("<I", vtype) + raw for key, (vtype, raw) in kv.items())
        offset = 0
        for name, dims, ttype, data in tensors:
            head += _enc(name.encode()) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ttype, offset)
            offset += -(-len(data) // self.align) * self.align
        with open(dest, "wb") as f:
            f.write(head + b"\0" * (-len(head) % self.align))
            for *_, data in tensors:
                f.write(data + b"\0" * (-len(data) % self.align))


def substitutes(strings: list[bytes], keep: np.ndarray) -> np.ndarray:
    """For every id, its id in the cut vocabulary: itself where kept, else its longest kept prefix (the byte tokens
    are all kept, so there is one)."""
    by_text = {strings[t]: i for i, t in enumerate(keep)}
    out = np.empty(len(strings), dtype=np.int64)
    for t, s in enumerate(strings):
        out[t] = next(by_text[s[:j]] for j in range(len(s), 0, -1) if s[:j] in by_text)
    return out


def _enc(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def token_frequencies(vocab: llama_cpp.Llama) -> np.ndarray:
    import wordfreq

    n_vocab = vocab.n_vocab()

    def count(patterns: list[str], limit: int) -> np.ndarray:
        counts, total = np.zeros(n_vocab), 0
        for path in (p for pattern in patterns for p in sorted(glob.glob(pattern, recursive=True))):
            try:
                text = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if text.strip():
                np.add.at(counts, vocab.tokenize(text.encode()[:200_000], add_bos=False, special=False), 1)
                total += len(text)
            if total > limit:
                break
        return counts / max(counts.sum(), 1)

    lib = f"{sys.base_prefix}/lib/python{sys.version_info.major}.{sys.version_info.minor}"
    code = count([f"{lib}/**/*.py"], 40_000_000)
    c_code = count(["/usr/include/**/*.h"], 10_000_000)
    prose = count([f"{sys.prefix}/lib/python3*/site-packages/*.dist-info/METADATA", "/usr/share/doc/**/README*"], 10**7)
    words = np.zeros(n_vocab)
    for lang, weight in LANGUAGES.items():
        counts = np.zeros(n_vocab)
        top = sorted(wordfreq.get_frequency_dict(lang, wordlist="best").items(), key=lambda kv: -kv[1])[:40000]
        for word, f in top:
            for form, w in ((word, f), (word.capitalize(), 0.15 * f)):
                np.add.at(counts, vocab.tokenize((" " + form).encode(), add_bos=False, special=False), w)
        words += weight * counts / counts.sum()
    return 0.35 * code + 0.05 * c_code + 0.25 * prose + 0.35 * words


class EmbeddingFed:
    """A cut copy driven with the full copy's Q4_0 input rows: context tokens go in exactly."""

    def __init__(self, model: LlamaModel, full: Gguf):
        dims, _, data = full.tensor("token_embd.weight")
        self.n_embd = dims[0]
        self.rows = np.frombuffer(data, dtype=np.uint8).reshape(dims[1], self.n_embd // 32, 18)
        self.model, self.n_past = model, 0
        self.batch = LlamaBatch(n_tokens=model.n_batch, embd=self.n_embd, n_seq_max=1, verbose=False)

    def embed(self, ids: list[int]) -> np.ndarray:
        blocks = self.rows[np.asarray(ids)]
        scale = blocks[..., :2].copy().view(np.float16).astype(np.float32)
        q = blocks[..., 2:]
        values = np.concatenate([(q & 0x0F).astype(np.int8) - 8, (q >> 4).astype(np.int8) - 8], axis=-1)
        return np.ascontiguousarray((values * scale).reshape(len(ids), self.n_embd), dtype=np.float32)

    def decode_all(self, ids: list[int]) -> np.ndarray:
        b, e = self.batch.batch, self.embed(ids)
        ctypes.memmove(b.embd, e.ctypes.data, e.nbytes)
        b.n_tokens = len(ids)
        for i in range(len(ids)):
            b.pos[i], b.seq_id[i][0], b.n_seq_id[i], b.logits[i] = self.n_past + i, 0, 1, True
        self.model._ctx.decode(self.batch)
        self.n_past += len(ids)
        ptr = llama_cpp.llama_get_logits(self.model._ctx.ctx)
        return np.ctypeslib.as_array(ptr, shape=(len(ids), self.model.n_vocab)).copy()

    def reset(self) -> None:
        self.model.rollback(0)  # the same context serves token-fed decodes: clear both kinds of history
        self.model._ctx.kv_cache_seq_rm(0, 0, -1)
        self.n_past = 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("draft", type=Path)
    ap.add_argument("--sizes", default="24576,32768,49152")
    ap.add_argument("--work", type=Path, default=Path("trial-vocab-cut"), help="where the copies are written")
    args = ap.parse_args()
    args.work.mkdir(exist_ok=True)
    q40 = args.work / "q4_0.gguf"
    if not q40.exists():
        quantize(args.draft, q40, 2)
    full = Gguf(q40)
    table = args.work / "frequencies.npy"
    if not table.exists():
        np.save(table, token_frequencies(llama_cpp.Llama(str(q40), vocab_only=True, verbose=False)))
    freq = np.load(table)
    strings = full.strings("tokenizer.ggml.tokens")
    types = full.token_types()
    always = set(range(256)) | set(np.flatnonzero(types != 1).tolist())  # bytes and control tokens
    models, keeps = {"full": LlamaModel(q40)}, {}
    for n in map(int, args.sizes.split(",")):
        keep = list(always)
        keep += [int(t) for t in np.argsort(-freq, kind="stable") if int(t) not in always][: n - len(keep)]
        keeps[n] = np.array(sorted(keep))
        full.write_cut(args.work / f"cut-{n}.gguf", keeps[n])
        models[n] = LlamaModel(args.work / f"cut-{n}.gguf")

    context = models["full"].tokenize(TIMING_TEXT)
    times: dict = {name: [] for name in models}
    for name, model in models.items():
        model.eval_prefix([0] * len(context) if name != "full" else context)
        decode_seconds(model, [0])
    for _ in range(15):
        for name, model in models.items():
            times[name].append(decode_seconds(model, [0]))
    t_full = statistics.median(times["full"])
    print(f"full Q4_0 copy: {t_full * 1000:.1f} ms a token")
    for n in keeps:
        print(f"cut to {n}: {statistics.median(times[n]) * 1000:.1f} ms ({statistics.median(times[n]) / t_full:.3f})")

    answers = json.loads(RECORDING.read_text())["answers"]
    for n, keep in keeps.items():
        kept, sub = set(keep.tolist()), substitutes(strings, keep)
        fed = EmbeddingFed(models[n], full)
        rows: dict[str, list] = {}
        for a in answers:
            prompt, answer = a["prompt"], np.array(a["tokens"])
            models[n].rollback(0)
            models[n].eval_prefix(sub[prompt[:-1]].tolist())
            logits = models[n].decode(sub[[prompt[-1], *answer[:-1]]].tolist(), all_logits=True)
            fed.reset()
            fed.decode_all(prompt[:-1])
            exact = fed.decode_all([prompt[-1], *answer[:-1].tolist()])
            fed.reset()  # the next answer's token-fed decodes start from an empty cache
            rows.setdefault(a["category"], []).append(
                [
                    np.mean(np.array(a["guesses"]) == answer),
                    np.mean(keep[logits.argmax(axis=1)] == answer),
                    np.mean(keep[exact.argmax(axis=1)] == answer),
                    np.mean([t in kept for t in answer]),
                ]
            )
        rows["all"] = [r for v in list(rows.values()) for r in v]
        print(f"\ncut to {n}: greedy agreement (full copy / cut, substituted context / cut, exact context), coverage")
        for category, values in rows.items():
            print(f"  {category}: " + " / ".join(f"{v:.3f}" for v in np.mean(values, axis=0)))


if __name__ == "__main__":
    main()
