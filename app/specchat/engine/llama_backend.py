"""One loaded GGUF model over llama-cpp-python's low-level calls: the only module that imports llama_cpp.

`tokens` always mirrors what the KV cache holds, so any request can reuse the longest common prefix
(`eval_prefix`) and a closed or failed generation leaves the model consistent. The build's facts (system info,
GPU offload, quantization names) and re-quantizing a model live here too, so that a llama-cpp-python upgrade is
checked in one file.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp._internals import LlamaBatch, LlamaContext
from llama_cpp._internals import LlamaModel as _Model
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from specchat.errors import InvalidInputError, ModelLoadError, PromptTooLongError, SpecchatError
from specchat.models.gguf import read_metadata

# Hears of a prompt's reading, (tokens read, tokens to read), between llama.cpp's batches; False stops the reading.
Reading = Callable[[int, int], bool]

# ggml.h's enum ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (llama-cpp-python's _logger.py
# lists an older order, in which 3 was ERROR: with it, warnings showed and errors vanished).
_GGML_LOG_ERROR, _GGML_LOG_CONT = 4, 5
_last_level = 0
_held = threading.local()  # .lines: where llama.cpp's errors logged by this thread go instead of stderr


@llama_cpp.llama_log_callback
def _log_errors_only(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    # All of llama.cpp's output comes through here (it prints nothing itself): keep its errors, drop the chatter.
    global _last_level
    if level != _GGML_LOG_CONT:
        _last_level = level
    if _last_level == _GGML_LOG_ERROR:
        message = text.decode("utf-8", errors="replace")
        held = getattr(_held, "lines", None)
        if held is None:
            sys.stderr.write(message)
        else:
            held.append(message)


llama_cpp.llama_log_set(_log_errors_only, ctypes.c_void_p(0))
# llama-cpp-python's Llama would do this (and each load) inside suppress_stdout_stderr, which points the process's
# file descriptors 1 and 2 at /dev/null meanwhile: from a loading thread, that swallows every other thread's output.
llama_cpp.llama_backend_init()


@contextmanager
def _errors_held() -> Iterator[list[str]]:
    """llama.cpp's error lines that this thread causes meanwhile, kept for the one exception that reports them."""
    _held.lines = lines = []
    try:
        yield lines
    finally:
        del _held.lines


@contextmanager
def _interrupt_after() -> Iterator[None]:
    """Ctrl+C during a long llama.cpp call on the main thread (a load, a quantization), raised once the call returns.
    llama.cpp logs through _log_errors_only meanwhile, and a KeyboardInterrupt raised in that callback is printed and
    dropped by ctypes: the command would go on as if nothing was asked. Other threads never see the signal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    asked: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, _frame: asked.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    if asked:
        raise KeyboardInterrupt


def system_info() -> str:
    """llama.cpp's build features (AVX2, AVX512, CUDA, ...): part of what a timing depends on."""
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip()


def build_info() -> dict[str, object]:
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "system_info": system_info(),
    }


def quantization_name(file_type: int | None) -> str:
    """general.file_type as llama.cpp names it (Q4_K_M, Q8_0, ...)."""
    names = {
        value: name.removeprefix("LLAMA_FTYPE_").removeprefix("MOSTLY_")
        for name, value in vars(llama_cpp).items()
        if name.startswith("LLAMA_FTYPE_") and isinstance(value, int)
    }
    return names.get(file_type, "unknown") if file_type is not None else "unknown"


def quantize_q4_0(source: Path, dest: Path, n_threads: int) -> bool:
    """Write dest as a pure Q4_0 copy of source (every weight matrix, the output one too); False if llama.cpp failed."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = n_threads
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.output_tensor_type = llama_cpp.GGML_TYPE_Q4_0
    params.allow_requantize = True
    params.pure = True  # no per-tensor mix: the point is kernels the CPU runs fast, everywhere
    # Its errors held: the caller says in one line what failing means (the draft is used as it is).
    with _errors_held(), _interrupt_after():
        return llama_cpp.llama_model_quantize(str(source).encode(), str(dest).encode(), ctypes.byref(params)) == 0


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


# linux/mman.h (Linux 6.1+): back a range with huge pages now, whatever the system's transparent-huge-page setting.
_MADV_COLLAPSE = 25
_HUGE_PAGE = 2 << 20


def private_mappings() -> set[tuple[int, int]]:
    """The process's private, writable, anonymous memory (malloc's, where ggml keeps repacked weights and the KV
    cache), as (start, end) ranges; empty where /proc is not Linux's."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return set()
    ranges = set()
    for line in lines:
        fields = line.split()
        if fields[1] == "rw-p" and (len(fields) < 6 or fields[5] == "[heap]"):
            start, end = fields[0].split("-")
            ranges.add((int(start, 16), int(end, 16)))
    return ranges


def back_with_huge_pages(ranges: Iterable[tuple[int, int]]) -> int:
    """Collapse the 2 MiB-aligned pieces of ranges into huge pages; the bytes collapsed.

    Decoding reads every weight once a token: with 4 KiB pages that is a TLB miss every 4 KiB. Where the system
    leaves huge pages to those who ask (Debian's and Ubuntu's "madvise"), llama.cpp does not ask. A piece that
    cannot be collapsed (never touched, or a kernel before 6.1) stays as it is, so this never fails.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    done = 0
    for start, end in ranges:
        first = -(-start // _HUGE_PAGE) * _HUGE_PAGE
        for piece in range(first, end - _HUGE_PAGE + 1, _HUGE_PAGE):
            # One piece at a time: a range's madvise stops at its first piece that cannot be collapsed.
            if libc.madvise(piece, _HUGE_PAGE, _MADV_COLLAPSE) == 0:
                done += _HUGE_PAGE
    return done


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@dataclass(frozen=True)
class BackendConfig:
    n_ctx: int = 4096
    n_threads: int | None = None  # single-token decodes; None: every core this process may use
    n_threads_batch: int | None = None  # multi-token batches (prompt, verification); None: as n_threads
    n_gpu_layers: int = 0  # -1: all layers on the GPU (CUDA / Metal builds)
    n_batch: int = 512
    # llama.cpp's own default (auto: fused attention where the device has it). llama-cpp-python's Llama turns it off;
    # on these CPUs that decodes slower (docs/performance.md, "llama-server, the peer").
    flash_attn: bool = True
    # Weights llama.cpp copied into memory of its own (repacked for this CPU) on huge pages (back_with_huge_pages):
    # every decode reads them all; a second or two at load buys a few percent on every token after
    # (docs/performance.md, "llama-server, the peer").
    huge_pages: bool = sys.platform == "linux"

    def __post_init__(self) -> None:
        # llama.cpp reads a context of 0 as the model's trained length and a negative thread count as its own
        # default: neither is what a user who typed the number asked for. 0 or None threads: every core.
        least = {"n_ctx": 1, "n_threads": 0, "n_threads_batch": 0, "n_batch": 1}
        for name, low in least.items():
            value = getattr(self, name)
            if value is not None and value < low:
                raise SpecchatError(f"{name} must be at least {low}, not {value}")

    @property
    def threads(self) -> tuple[int, int]:
        n = self.n_threads or default_threads()
        return n, self.n_threads_batch or n


class LlamaModel:
    def __init__(self, path: str | Path, config: BackendConfig = BackendConfig()):
        self.path = Path(path)
        self.config = config
        self.metadata = read_metadata(self.path)  # raises NotGGUFError with a clear message
        self._check_context(config.n_ctx)
        # llama-cpp-python's high-level Llama has no per-position logits flags, no KV rollback by position and no
        # vocabulary queries (eog, pieces) without detokenizing, and when quiet it silences the whole process while it
        # loads: the model and its context are made here, with the settings Llama gave them but flash attention.
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = config.n_gpu_layers  # negative: all layers
        model_params.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = config.n_ctx
        params.n_batch = params.n_ubatch = min(config.n_ctx, config.n_batch)
        params.n_threads, params.n_threads_batch = config.threads
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO if config.flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        model = None
        mapped = private_mappings() if config.huge_pages else set()
        with _errors_held() as errors, _interrupt_after():
            try:
                # verbose=True: no suppress_stdout_stderr around the load (the log callback above keeps it quiet).
                model = _Model(path_model=str(self.path), params=model_params, verbose=True)
                self._ctx = LlamaContext(model=model, params=params, verbose=True)
            except (ValueError, RuntimeError) as e:
                if model is not None:
                    model.close()
                # llama.cpp's own reason (e.g. tensor data beyond the end of the file) is in its error log, each line
                # led by the function that logged it.
                reason = "; ".join(re.sub(r"^\w+: ", "", line.strip()) for line in errors if line.strip()) or str(e)
                raise ModelLoadError(f"{self.path.name}: llama.cpp could not load this model ({reason})") from None
        self._model = model
        if config.huge_pages:
            back_with_huge_pages(private_mappings() - mapped)
        self._vocab = self._model.vocab
        self._formatter: Jinja2ChatFormatter | None = None
        self.n_vocab: int = self._model.n_vocab()
        self.n_ctx: int = self._ctx.n_ctx()
        self.n_batch: int = llama_cpp.llama_n_batch(self._ctx.ctx)  # llama.cpp may lower it for a small context
        self._batch = LlamaBatch(n_tokens=config.n_batch, embd=0, n_seq_max=1, verbose=False)
        self._pieces: dict[int, bytes] = {}
        self.tokens: list[int] = []  # what the KV cache holds, position by position
        self.n_decoded = 0  # tokens evaluated since load: shows prefix reuse at work
        self.eog_ids = frozenset(t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, t))

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name", self.path.stem))

    @property
    def chat_template(self) -> str | None:
        return self.metadata.get("tokenizer.chat_template")

    def render_chat(self, messages: Sequence[dict]) -> str:
        """The model's own chat template (from its GGUF, in a Jinja sandbox) applied to messages."""
        if self._formatter is None:
            if not self.chat_template:
                raise SpecchatError(f"{self.path.name} has no chat template; use plain completion instead")
            self._formatter = Jinja2ChatFormatter(
                template=self.chat_template, eos_token=self.token_text(self.eos), bos_token=self.token_text(self.bos)
            )
        try:
            return self._formatter(messages=list(messages)).prompt
        except Exception as e:  # the template is untrusted input: any failure is the model file's
            raise SpecchatError(f"the model's chat template failed to render: {e}") from None

    def token_text(self, token: int) -> str:
        return llama_cpp.llama_vocab_get_text(self._vocab, token).decode("utf-8", errors="replace")

    @property
    def bos(self) -> int:
        return llama_cpp.llama_vocab_bos(self._vocab)

    @property
    def eos(self) -> int:
        return llama_cpp.llama_vocab_eos(self._vocab)

    @property
    def add_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))

    def tokenize(self, text: str, add_bos: bool = False, special: bool = True) -> list[int]:
        return self._model.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)

    def piece(self, token: int) -> bytes:
        """The bytes a token adds to the text (special tokens render as nothing)."""
        piece = self._pieces.get(token)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            if n > len(buf):
                buf = ctypes.create_string_buffer(n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            piece = self._pieces[token] = buf.raw[: max(n, 0)]
        return piece

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def check_room(self, n_tokens: int) -> None:
        """n_tokens: the prompt and the answer's first token."""
        if n_tokens > self.n_ctx:
            size, asked = f"{self.n_ctx}", self.config.n_ctx
            if self.n_ctx > asked:  # llama.cpp pads the context (GGML_PAD in llama-context.cpp)
                size += f" (the asked {asked}, which llama.cpp rounds up to a multiple of 256)"
            raise PromptTooLongError(
                f"the prompt and the answer's first token need {n_tokens} tokens but the context holds {size}: "
                "shorten the conversation or raise the context size"
            )

    def decode(self, tokens: Sequence[int], all_logits: bool = False, copy: bool = True) -> np.ndarray:
        """Evaluate tokens after the cache; logits rows for every token (all_logits) or the last one.

        Returns (rows, n_vocab) float32: a copy, or with copy=False a view of llama.cpp's buffer, which the next
        decode overwrites (a verify step reads its rows once: copying 16 of 151936 floats took 3 ms a step).
        """
        if not tokens:
            raise ValueError("decode needs at least one token")
        self.check_room(self.n_past + len(tokens))
        step = self.n_batch
        chunks = []  # each chunk's rows, where there are several: llama.cpp keeps only the latest batch's
        for start in range(0, len(tokens), step):
            chunk = tokens[start : start + step]
            self._batch.set_batch(chunk, n_past=self.n_past, logits_all=all_logits)
            self._ctx.decode(self._batch)
            self.tokens.extend(chunk)
            self.n_decoded += len(chunk)
            if all_logits and len(tokens) > step:
                chunks.append(self._logits(len(chunk)).copy())
        if chunks:
            return np.concatenate(chunks)
        logits = self._logits(len(tokens) if all_logits else 1)
        return logits.copy() if copy else logits

    def _check_context(self, n_ctx: int) -> None:
        """Before any weights load: a huge context asks llama.cpp for memory the machine lacks (the kernel then kills
        the process), and one past the model's training is answered worse. The default stays allowed, as llama.cpp
        allows it, for models trained on less."""
        trained = self.metadata.get(f"{self.metadata.get('general.architecture')}.context_length")
        if isinstance(trained, int) and 0 < trained < n_ctx and n_ctx > BackendConfig.n_ctx:
            most = max(trained, BackendConfig.n_ctx)
            raise InvalidInputError(
                f"a context of {n_ctx} tokens is more than {self.path.name} was trained for: {most} at most"
            )

    def _logits(self, rows: int) -> np.ndarray:
        """The latest batch's last `rows` logits rows, as a view of llama.cpp's buffer."""
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits(self._ctx.ctx), shape=(rows, self.n_vocab))

    def rollback(self, n_keep: int) -> None:
        """Forget every cached position from n_keep on."""
        if n_keep < self.n_past:
            self._ctx.kv_cache_seq_rm(0, n_keep, -1)
            del self.tokens[n_keep:]

    def hold(self, seq: Sequence[int], reading: Reading | None = None) -> bool:
        """Make the cache hold exactly seq, decoding only the positions it lacks; no logits are wanted.

        A cache that holds seq already decodes nothing. Decoding a held position again, alone, would compute its
        keys and values in another batch shape than before, and greedy answers part at near-ties on such
        differences: the same prompt asked twice would be answered differently.

        reading: told (positions decoded, positions to decode) before each batch and once all are decoded; where it
        returns False before a batch, hold stops there, the cache holding the part of seq read so far, and returns
        False. The batches are decode's own, so that a read watched this way computes what an unwatched one does.
        """
        self.rollback(common_prefix(self.tokens, seq))
        lacking = seq[self.n_past :]
        for done in range(0, len(lacking), self.n_batch):
            if reading is not None and not reading(done, len(lacking)):
                return False
            self.decode(lacking[done : done + self.n_batch], copy=False)
        if reading is not None:
            reading(len(lacking), len(lacking))
        return True

    def eval_prefix(self, seq: Sequence[int]) -> np.ndarray:
        """Make the cache hold exactly seq and return the logits after its last token.

        Only what differs from the cached tokens is decoded (KV prefix reuse); the last token is always
        decoded again when needed because llama.cpp keeps logits of the latest batch only.
        """
        self.rollback(min(common_prefix(self.tokens, seq), len(seq) - 1))
        return self.decode(seq[self.n_past :])[0]

    def close(self) -> None:
        self._batch.close()
        self._ctx.close()
        self._model.close()
