"""Token events -> HTML: the accepted/corrected overlay, its legend, and the clean Markdown view.

Pure functions over plain data so the chat history can be re-rendered when the user flips the switch.
Token text comes from the model and is untrusted: every character goes through html.escape.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import NamedTuple

KINDS = ("accepted", "corrected", "bonus", "target")
LABELS = {
    "accepted": "accepted draft token",
    "corrected": "target's correction",
    "bonus": "bonus token",
    "target": "target token",
}
# A fenced code block opens with ``` or ~~~ (up to three spaces of indent) and closes with the same fence.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)


class Piece(NamedTuple):
    """One emitted token as the overlay needs it."""

    kind: str
    text: str
    draft_pos: int | None


def text_of(pieces: Iterable[Piece]) -> str:
    return "".join(p.text for p in pieces)


def tooltip(kind: str, draft_pos: int | None) -> str:
    return LABELS[kind] if draft_pos is None else f"{LABELS[kind]} · draft position {draft_pos}"


def code_regions(text: str) -> list[tuple[int, int]]:
    """(start, end) character ranges of fenced code blocks, fences included; an unclosed one runs to the end."""
    regions: list[tuple[int, int]] = []
    pos = 0
    while (opening := _FENCE.search(text, pos)) is not None:
        fence = opening.group(1)
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        body = text.find("\n", opening.end())
        match = closing.search(text, body + 1) if body != -1 else None
        if match is None:
            regions.append((opening.start(), len(text)))
            break
        # The newline after the closing fence belongs to the block, or the prose after it starts with a blank line.
        end = match.end() + 1 if text.startswith("\n", match.end()) else match.end()
        regions.append((opening.start(), end))
        pos = end
    return regions


def _span(piece: Piece, text: str) -> str:
    pos = "" if piece.draft_pos is None else f' data-pos="{piece.draft_pos}"'
    # Newlines become <br>: a literal blank line would end the HTML block inside the chat's Markdown renderer.
    body = html.escape(text).replace("\n", "<br>")
    return (
        f'<span class="sc-tok sc-{piece.kind}" data-kind="{piece.kind}"{pos} '
        f'title="{tooltip(piece.kind, piece.draft_pos)}">{body}</span>'
    )


def overlay_html(pieces: Sequence[Piece]) -> str:
    """One line of HTML: a span per token (colored by kind), code blocks kept as <pre> blocks."""
    pieces = [p for p in pieces if p.text]
    text = text_of(pieces)
    bounds, offset = [], 0
    for p in pieces:
        bounds.append((offset, offset + len(p.text)))
        offset += len(p.text)
    cuts = [(0, False)]
    for start, end in code_regions(text):
        cuts += [(start, True), (end, False)]
    cuts.append((len(text), False))
    out = ['<div class="sc-overlay">']
    for (start, is_code), (end, _) in zip(cuts, cuts[1:]):
        if start >= end:
            continue
        spans = "".join(
            _span(p, p.text[max(a, start) - a : min(b, end) - a])
            for p, (a, b) in zip(pieces, bounds)
            if a < end and b > start
        )
        out.append(f'<pre class="sc-code"><code>{spans}</code></pre>' if is_code else spans)
    out.append("</div>")
    return "".join(out)


def legend_html() -> str:
    items = "".join(
        f'<span class="sc-legend-item"><span class="sc-tok sc-{k}">{html.escape(LABELS[k])}</span></span>'
        for k in KINDS
    )
    return f'<div class="sc-legend">{items}</div>'


def stylesheet() -> str:
    """assets/overlay.css: packaged as specchat/assets in a wheel, at the repository root in a checkout."""
    packaged = resources.files("specchat") / "assets" / "overlay.css"
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parents[3] / "assets" / "overlay.css").read_text(encoding="utf-8")
