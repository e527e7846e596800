"""Incremental, UTF-8 safe text out of token pieces, with stop strings held back until they are decided."""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from specchat.errors import InvalidInputError


def check_text(text: str, what: str) -> None:
    """Refuse text that is not valid Unicode: a lone surrogate (U+D800-U+DFFF), which a browser can send and which
    Python makes of bytes that are not UTF-8 in a command line, has no UTF-8 form for the tokenizer.

    Refused rather than replaced with U+FFFD: the model would answer text the user did not write, without a word why.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidInputError(
            f"{what} is not valid Unicode: character {e.start + 1} is a lone surrogate (U+{ord(text[e.start]):04X}), "
            "the trace of text that was not valid UTF-8; remove it or fix the text's encoding"
        ) from None


def check_messages(messages: Sequence[dict]) -> None:
    """check_text on every text of a chat (contents, roles, names)."""
    for number, message in enumerate(messages, 1):
        for key, value in message.items():
            if isinstance(value, str):
                check_text(value, f"the {key} of message {number}")


class TextStream:
    def __init__(self, stop: Sequence[str] = ()):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]  # an empty stop string would match everything
        self._held = ""  # decoded text not yet released: it may be the start of a stop string
        self.text = ""  # everything released so far
        self.stopped = False

    def push(self, piece: bytes) -> str:
        """Feed one token's bytes; return the text that is now safe to show."""
        # A character split across tokens stays in the decoder until its last byte arrives.
        self._held += self._decoder.decode(piece)
        # The earliest stop string ends the answer, whichever the list names first: a later one may start before it.
        found = [at for at in (self._held.find(s) for s in self._stop) if at >= 0]
        if found:
            self._held, self.stopped = self._held[: min(found)], True
            return self._release(len(self._held))
        return self._release(len(self._held) - self._partial_stop())

    def flush(self) -> str:
        if not self.stopped:
            self._held += self._decoder.decode(b"", final=True)
        return self._release(len(self._held))

    def _partial_stop(self) -> int:
        """Length of the longest tail of the held text that could still grow into a stop string."""
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(self._held)), best, -1):
                if self._held.endswith(s[:n]):
                    best = n
                    break
        return best

    def _release(self, n: int) -> str:
        out, self._held = self._held[:n], self._held[n:]
        self.text += out
        return out
