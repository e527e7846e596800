"""The server-side cost of one streamed update of the chat tab, by the size of the conversation: the app's own
rendering (ui/app.py's _add and feed_update or _streamed), and then what sends it to the browser, with its size. With
the overlay on, that is the answer's feed (ui/feed.py: the JSON of what changed, the live answer's HTML and the
panels; the overlay chat keeps its placeholder until the answer is done); with it off, Gradio's postprocess of the
Markdown chat and the diff against its previous value.

The conversation holds earlier turns of about half the tokens and the answer being streamed, the other half; each
update adds the tokens decoded in an update interval (15 tokens/s). Token texts come from a fixed answer of prose,
lists and a fenced code block, so that code blocks are rendered as they stream.

    python benchmarks/ui_update_cost.py [--tokens 50,500,2000] [--updates 200] [--overlay on|off]

Not a test: the times depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import gradio as gr
from gradio.utils import diff

from specchat.engine import Stats, TokenEvent
from specchat.ui.app import UPDATE_INTERVAL_S, _add, _streamed, chat_views, feed_update
from specchat.ui.feed import changes
from specchat.ui.overlay import OverlayStream

ANSWER = """To reverse a linked list, walk it once and turn each link around:

1. Keep the previous node, starting from none.
2. For each node, remember its next node, point it back at the previous one, and move on.

```python
def reverse(head):
    previous = None
    while head is not None:
        head.next, previous, head = previous, head, head.next
    return previous
```

It runs in linear time and constant memory. A recursive version is shorter, but it uses a stack frame per node.
"""
KINDS = ["accepted", "accepted", "bonus", "corrected", "target"]


def token_texts(n: int) -> list[str]:
    """n pieces of about 4 characters, cut from ANSWER repeated."""
    text = ANSWER * (n * 4 // len(ANSWER) + 1)
    return [text[i * 4 : i * 4 + 4] for i in range(n)]


def events(texts: list[str], stats: Stats) -> list[TokenEvent]:
    return [TokenEvent(0, t, KINDS[i % len(KINDS)], i % 4 + 1, stats) for i, t in enumerate(texts)]


def earlier_turns(n_tokens: int) -> list[dict]:
    """Finished exchanges of about n_tokens in all, as the app keeps them."""
    conv, left = [], n_tokens
    while left > 0:
        size = min(left, 250)
        stream = OverlayStream()
        answer = {"role": "assistant", "content": "", "pieces": stream.pieces, "html": ""}
        _add(answer, stream, events(token_texts(size), Stats()))
        answer["html"] = stream.html(final=True)
        conv += [{"role": "user", "content": "Write a Python function that reverses a linked list."}, answer]
        left -= size
    return conv


def measure(n_tokens: int, updates: int, overlay: bool) -> dict:
    per_update = max(1, round(15 * UPDATE_INTERVAL_S))
    streamed = n_tokens // 2
    conv = earlier_turns(n_tokens - streamed)
    stream, stats = OverlayStream(), Stats()
    answer = {"role": "assistant", "content": "", "pieces": stream.pieces, "html": ""}
    conv.append(answer)
    texts = token_texts(streamed + updates * per_update)
    _add(answer, stream, events(texts[:streamed], stats))
    chat = gr.Chatbot()

    def value(update: object) -> object:
        processed = chat.postprocess(update)
        return processed.model_dump() if hasattr(processed, "model_dump") else processed

    previous = feed_update(stream, stats) if overlay else value(chat_views(conv, False)[1])
    ours, sending, sent = [], [], []
    for u in range(updates):
        new = events(texts[streamed + u * per_update : streamed + (u + 1) * per_update], stats)
        t0 = time.perf_counter()
        _add(answer, stream, new)
        update = feed_update(stream, stats) if overlay else _streamed(conv, stats)
        t1 = time.perf_counter()
        if overlay:  # as the feed sends it: what changed
            now = update
            edits = changes(previous, now)
        else:  # the Markdown chat, the 4th output
            now = value(update[3])
            edits = diff(previous, now)
        t2 = time.perf_counter()
        previous = now
        ours.append(t1 - t0)
        sending.append(t2 - t1)
        sent.append(len(json.dumps(edits)))
    ms = lambda xs: round(statistics.median(xs) * 1000, 3)  # noqa: E731
    return {
        "tokens": n_tokens,
        "app_ms": ms(ours),
        "send_ms": ms(sending),
        "sent_bytes": statistics.median(sent),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", default="50,500,2000", help="conversation sizes, comma-separated")
    p.add_argument("--updates", type=int, default=200, help="updates timed per size (medians are reported)")
    p.add_argument("--overlay", choices=["on", "off"], default="on")
    args = p.parse_args()
    print(f"{'tokens':>6} {'app ms':>8} {'send ms':>9} {'sent bytes':>10}")
    for n in (int(t) for t in args.tokens.split(",")):
        r = measure(n, args.updates, args.overlay == "on")
        print(f"{r['tokens']:6d} {r['app_ms']:8.3f} {r['send_ms']:9.3f} {r['sent_bytes']:10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
