"""The answers' JSON as OpenAI's API shapes it (objects, stream chunks, usage), with llama-server's `timings`."""

from __future__ import annotations

import time
import uuid

from specchat.engine import Stats, TokenEvent

# The engine's reasons to stop -> OpenAI's: its end-of-generation token and a stop string are both "stop".
FINISH_REASONS = {"eog": "stop", "stop": "stop", "length": "length", "context": "length"}  # OpenAI's: length for both


def timings(stats: Stats) -> dict:
    """llama-server's timings (same names, so that tools made for it read them), then specchat's own: the mode, what
    the loop was doing at the end and why (auto mode explains its choice), and acceptance by draft position."""
    prompt_ms, predicted_ms = stats.prompt_s * 1000, stats.wall_s * 1000
    prompt_n, predicted_n = stats.prompt_tokens, stats.tokens
    return {
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1000 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
        "predicted_per_second": stats.tokens_per_s,
        "draft_n": stats.drafted,
        "draft_n_accepted": stats.accepted,
        "mode": stats.mode,
        "strategy": stats.strategy,
        "verify_steps": stats.iterations,
        "draft_n_by_position": list(stats.drafted_by_pos),
        "draft_n_accepted_by_position": list(stats.accepted_by_pos),
        "acceptance_by_position": stats.acceptance_by_pos,
    }


def usage(prompt_tokens: int, stats: Stats | None) -> dict:
    completion = stats.tokens if stats is not None else 0
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion}


def token_kind(event: TokenEvent) -> dict:
    """Where a streamed token came from (accepted / corrected / bonus draft, or the target alone), for an overlay."""
    return {"id": event.token, "kind": event.kind, "draft_pos": event.draft_pos}


class Reply:
    """The shapes of one answer: chat (chat.completion) or completion (text_completion), whole or streamed."""

    def __init__(self, chat: bool, model: str, include_usage: bool = False):
        """include_usage: streamed chunks carry "usage": null, and a last chunk the usage (stream_options)."""
        self.chat, self.model, self.include_usage = chat, model, include_usage
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())

    def _envelope(self, obj: str, choices: list[dict]) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}

    def whole(self, text: str, prompt_tokens: int, stats: Stats) -> dict:
        """The non-streamed answer."""
        finish = FINISH_REASONS.get(stats.finish_reason, "stop")
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
        body = self._envelope(
            "chat.completion" if self.chat else "text_completion", [{**choice, "finish_reason": finish}]
        )
        return {**body, "usage": usage(prompt_tokens, stats), "timings": timings(stats)}

    def chunk(self, text: str | None, finish: str | None = None, first: bool = False) -> dict:
        """One streamed piece. text None: no content (the finishing chunk); first: the chat's role comes with it."""
        if self.chat:
            delta = {"role": "assistant"} if first else {}
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        chunk = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [choice])
        return {**chunk, "usage": None} if self.include_usage else chunk

    def finishing_chunk(self, stats: Stats) -> dict:
        """The chunk with the finish reason, and the timings, as llama-server sends them."""
        return {**self.chunk(None, FINISH_REASONS.get(stats.finish_reason, "stop")), "timings": timings(stats)}

    def usage_chunk(self, prompt_tokens: int, stats: Stats | None) -> dict:
        """stream_options.include_usage: a last chunk with no choices, as OpenAI sends it."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._envelope(obj, []), "usage": usage(prompt_tokens, stats)}
