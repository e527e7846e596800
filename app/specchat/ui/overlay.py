"""Token events -> HTML: the accepted/corrected overlay, its legend, and the clean Markdown view.

Functions over plain data, so that the chat history can be re-rendered when the user flips the switch, and
OverlayStream, which renders an answer's overlay as it streams, a few new tokens at a time.
Token text comes from the model and is untrusted: every character goes through html.escape in the overlay, and the
Markdown view gets it with its HTML and images made visible text (safe_markdown).
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from markdown_it import MarkdownIt

KINDS = ("accepted", "corrected", "bonus", "target")
LABELS = {
    "accepted": "accepted draft token",
    "corrected": "target's correction",
    "bonus": "bonus token",
    "target": "target token",
}
# A fenced code block opens with ``` or ~~~ (up to three spaces of indent) and closes with the same fence.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
# An inline link or image, as the Markdown view's renderer reads one: [text](destination "title"). No backtick, bracket
# or angle bracket inside, where code spans and raw HTML would take precedence over the link.
_LINK = (
    r"(!?)\[((?:[^\[\]`\\\n]|\\[^\n])*)\]"
    r"\((<[^<>`\n]*>|(?:[^\s()<>\[\]`\\]|\([^\s()<>\[\]`\\]*\))*)((?:\s+(?:\"[^\"`\n]*\"|'[^'`\n]*'))?)\s*\)"
)
# What safe_markdown looks at outside fenced code: a backslash escape (kept), a run of backticks (a code span's
# delimiter), a link or image, the < of raw HTML or of an autolink, the ! of a reference image.
_MARKUP = re.compile(rf"\\[\s\S]|`+|{_LINK}|<|!(?=\[)")
# They become entities, shown as themselves: a backslash escape would be taken into a bare URL right before it.
_ENTITIES = {"<": "&lt;", "!": "&#33;"}
# The start of a line that is a code fence, or may still grow into one (see code_regions).
_MAY_FENCE = re.compile(r" {0,3}(?:`{3,}|~{3,}|`{0,2}\Z|~{0,2}\Z)")
# A bare URL, which the renderer links (GFM) up to the next space, backticks included: none opens a code span there.
_BARE_URL = re.compile(r"(?:https?://|ftp://|www\.)\S*", re.IGNORECASE)
# A lone surrogate (U+D800-U+DFFF), which a browser can send, has no UTF-8 form: the page's JSON cannot carry it back.
_SURROGATE = re.compile("[\ud800-\udfff]")
# Block structure only, with raw HTML off: what the Markdown view's renderer sees once safe_markdown has escaped it.
_BLOCKS = MarkdownIt("commonmark", {"html": False})
# A line break as Markdown counts them (not str.splitlines', which counts U+2028 and others too).
_NEWLINE = re.compile(r"\r\n?|\n")
# Any ASCII punctuation may be backslash-escaped in Markdown; escaped, it is shown as itself and never read as markup.
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


class Piece(NamedTuple):
    """One emitted token as the overlay needs it."""

    kind: str
    text: str
    draft_pos: int | None


def displayable(text: str) -> str:
    """text as it can be sent back to the browser: each lone surrogate becomes U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


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


_OPEN = '<div class="sc-overlay">'
_CODE_START = '<pre class="sc-code"><code>'
_CODE_END = "</code></pre>"


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
    stream = OverlayStream()
    stream.extend(pieces)
    return stream.html(final=True)


class OverlayStream:
    """overlay_html of an answer whose pieces arrive a few at a time, rendering only what is new: the cost of an
    update does not grow with the answer (bar the joins of its text and HTML, and a regex scan for fences).

    A piece's HTML depends on the code blocks around it, and those are decided by their fences' lines: while the last
    line is, or may still grow into, a fence, it may still open a block, grow its fence or turn out not to close one.
    So the HTML of every piece that ends before that line (and before the last piece, which may close a block at the
    very end of the text) is final: it is kept, and only the pieces after it are rendered again.

    While streaming, html() leaves off the closing tags at the end (the browser closes them), so that each update's
    HTML is the previous one with text appended, unless a fence changed the latest line: Gradio then sends only what
    was appended.
    """

    def __init__(self) -> None:
        self.pieces: list[Piece] = []
        self._shown: list[Piece] = []  # the pieces with text; empty ones (a split character's first bytes) add nothing
        self._ends: list[int] = []  # where each shown piece ends in _text
        self._text = ""
        self._kept = _OPEN  # the final HTML of the first _n_kept shown pieces
        self._n_kept = 0

    def extend(self, pieces: Iterable[Piece]) -> None:
        for p in pieces:
            self.pieces.append(p)
            if p.text:
                self._shown.append(p)
                self._text += p.text
                self._ends.append(len(self._text))

    def html(self, final: bool = False) -> str:
        """The answer's HTML so far; final: with every tag closed, as overlay_html gives it."""
        fragments = list(self._fragments())
        last_line = self._text.rfind("\n") + 1
        decided = len(self._text) if _MAY_FENCE.match(self._text, last_line) is None else last_line
        done = min(bisect.bisect_right(self._ends, decided), len(self._shown) - 1)
        if done > self._n_kept:
            self._kept += "".join(html for piece, html in fragments if piece < done)
            fragments = [(piece, html) for piece, html in fragments if piece >= done]
            self._n_kept = done
        tail = [html for _, html in fragments]
        if final:
            tail.append("</div>")
        elif tail and tail[-1] == _CODE_END:
            tail.pop()
        return self._kept + "".join(tail)

    def _fragments(self) -> Iterator[tuple[int, str]]:
        """(index of the shown piece, HTML) from the first piece not kept on: the piece's spans, and a code block's
        tags with the piece its fence starts or ends in."""
        pieces, ends, text = self._shown, self._ends, self._text
        i = self._n_kept
        start_at = ends[i - 1] if i else 0
        cuts = [(0, False)]
        for start, end in code_regions(text):
            cuts += [(start, True), (end, False)]
        cuts.append((len(text), False))
        for (start, is_code), (end, _) in zip(cuts, cuts[1:]):
            if start >= end or end <= start_at:
                continue
            if is_code and start >= start_at:
                yield i, _CODE_START
            last = i
            while i < len(pieces) and (a := ends[i] - len(pieces[i].text)) < end:
                last = i
                yield i, _span(pieces[i], pieces[i].text[max(a, start) - a : min(ends[i], end) - a])
                if ends[i] > end:  # the piece goes on in the next region
                    break
                i += 1
            if is_code:
                yield last, _CODE_END


# The answer being streamed, in the overlay chat: a placeholder that live_js fills, so that the chat's own component
# (which renders a message's whole HTML again on every change) renders it once, when the answer is done.
LIVE = '<div class="sc-live"></div>'
_LIVE_TAGS = "|".join(re.escape(tag).replace("/", r"\/") for tag in (_OPEN, _CODE_START, _CODE_END, "</div>"))


def live_js(reveal_s: float, tick_s: float) -> str:
    """The page's renderer of a streamed answer: given OverlayStream.html() as it grows, it fills the placeholder.
    HTML that grows by appending becomes nodes appended where the open tags leave off; anything else (a fence that
    changed the last line, a placeholder rendered anew) is rendered from the start. What arrives is shown a few
    tokens every tick_s seconds, all of it within reveal_s (the time to the next update), so that an answer sent
    to the page a few times a second still reads as a stream. Keeps the chat at its end if it was there."""
    ticks = max(1, round(reveal_s / tick_s))
    return f"""(html) => {{
  const box = document.querySelector('#sc-chat-overlay .sc-live');
  if (!box || !html) return;
  if (!box.scStack || !html.startsWith(box.scShown)) {{
    box.replaceChildren();
    box.scStack = [box];
    box.scShown = '';
    box.scQueue = [];
  }}
  for (const part of html.slice(box.scShown.length).split(/({_LIVE_TAGS})/)) {{
    if (part) box.scQueue.push(...part.split(/(?=<span )/));
  }}
  box.scShown = html;
  box.scPerTick = Math.ceil(box.scQueue.length / {ticks});
  const show = (part) => {{
    const stack = box.scStack;
    if (part.startsWith('</')) {{
      if (stack.length > 1) stack.pop();
      return;
    }}
    stack[stack.length - 1].insertAdjacentHTML('beforeend', part);
    if (part === '{_OPEN}' || part === '{_CODE_START}') {{
      // An opening tag, parsed alone, is an element closed at once: what follows goes inside its innermost.
      let opened = stack[stack.length - 1].lastElementChild;
      while (opened.lastElementChild) opened = opened.lastElementChild;
      stack.push(opened);
    }}
  }};
  const tick = () => {{
    const scroller = box.closest('.bubble-wrap');
    const atEnd = scroller && scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 48;
    for (let n = box.scPerTick; n > 0 && box.scQueue.length; n--) show(box.scQueue.shift());
    if (atEnd) scroller.scrollTop = scroller.scrollHeight;
    box.scTimer = box.scQueue.length && box.isConnected ? setTimeout(tick, {tick_s * 1000:.0f}) : 0;
  }};
  if (!box.scTimer) tick();
}}"""


@lru_cache(maxsize=256)  # a streamed update renders every message again; only the last one changes
def safe_markdown(text: str) -> str:
    """Message text for the Markdown view, which must load nothing from elsewhere: raw HTML (an <img>, a <form>, an
    <iframe>) is escaped to show as text, an image becomes a link, and each link shows its target after it. Code
    blocks and code spans are left as written.

    Markdown read at the source is best effort against text crafted to be read two ways; the app's
    Content-Security-Policy (ui/app.py) is what keeps the page from loading anything, whatever renders.
    """
    starts = [0, *(n.end() for n in _NEWLINE.finditer(text)), len(text)]  # where each line begins, then the end
    out, pos = [], 0
    for token in _BLOCKS.parse(text):
        if token.type == "fence" and token.map is not None:
            begin, end = starts[token.map[0]], starts[min(token.map[1], len(starts) - 1)]
            out += [_escape_markup(text[pos:begin]), text[begin:end]]
            pos = end
    out.append(_escape_markup(text[pos:]))
    return "".join(out)


def _escape_markup(text: str) -> str:
    """safe_markdown outside fenced code. A code span is taken to end on its own line, hold no '|' (a table's cell
    border) and start outside a bare URL: where the renderer would see one all the same, its text is escaped too,
    which shows an entity in the code at worst."""
    urls = [(u.start(), u.end()) for u in _BARE_URL.finditer(text)]
    out, pos = [], 0
    while (m := _MARKUP.search(text, pos)) is not None:
        out.append(text[pos : m.start()])
        found, pos = m.group(), m.end()
        if found[0] == "`":
            closing = re.compile(rf"(?<!`){found}(?!`)").search(text, pos)
            inside = text[pos : closing.start()] if closing is not None else "\n"
            in_url = any(start < m.start() < end for start, end in urls)
            if "\n" not in inside and "|" not in inside and not in_url:
                found, pos = text[m.start() : closing.end()], closing.end()
        elif found in _ENTITIES:
            found = _ENTITIES[found]
        elif found[0] != "\\":
            found = _shown_link(m)
        out.append(found)
    out.append(text[pos:])
    return "".join(out)


def _shown_link(link: re.Match) -> str:
    """The link as written, its target after it as text; an image as a link to it."""
    bang, label, destination, title = link.group(1, 2, 3, 4)
    url = destination.strip("<>")
    shown = " (" + _PUNCTUATION.sub(r"\\\1", url) + ")" if url and url != label else ""
    if bang:
        label = f"image: {label}" if label else "image"
    return f"[{_escape_markup(label)}]({destination}{title}){shown}"


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
