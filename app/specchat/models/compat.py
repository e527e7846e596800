"""Can one model draft for another? Decided from the two GGUF headers, before any weights load."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specchat.models.gguf import ModelInfo, model_info

# A draft may have a few extra or missing tail tokens (padding rows) as llama.cpp's speculative example allows.
MAX_VOCAB_SIZE_DIFFERENCE = 128
# Special tokens that both models must agree on: they end turns and frame the chat template.
_SPECIAL_KEYS = ("bos", "eos", "eot", "eom")


@dataclass(frozen=True)
class Compatibility:
    ok: bool
    reasons: list[str]

    def __str__(self) -> str:
        return "compatible" if self.ok else "; ".join(self.reasons)


def check_infos(target: ModelInfo, draft: ModelInfo) -> Compatibility:
    reasons: list[str] = []
    n_t, n_d = target.n_vocab, draft.n_vocab
    if abs(n_t - n_d) > MAX_VOCAB_SIZE_DIFFERENCE:
        reasons.append(f"vocabulary sizes differ: target has {n_t} tokens, draft has {n_d}")
    n = min(n_t, n_d)
    mismatches = [i for i in range(n) if target.tokens[i] != draft.tokens[i]]
    if mismatches:
        i = mismatches[0]
        reasons.append(
            f"{len(mismatches)} of {n} token texts differ (first at id {i}: "
            f"target {target.tokens[i]!r}, draft {draft.tokens[i]!r})"
        )
    for key in _SPECIAL_KEYS:
        t, d = target.special.get(key), draft.special.get(key)
        if t != d and t is not None and d is not None:
            reasons.append(f"special token '{key}' differs: target {t}, draft {d}")
    return Compatibility(ok=not reasons, reasons=reasons)


def check_pair(target_path: str | Path, draft_path: str | Path) -> Compatibility:
    """Raises NotGGUFError when either file is not a GGUF model."""
    return check_infos(model_info(target_path), model_info(draft_path))
