"""Incremental, UTF-8 safe text out of token pieces, with stop strings held back until they are decided."""

from __future__ import annotations

import codecs
from collections.abc import Sequence


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
        for s in self._stop:
            at = self._held.find(s)
            if at >= 0:
                self._held, self.stopped = self._held[:at], True
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
