"""The page's live renderer of a streamed answer (live_js) in Chromium: fed OverlayStream's HTML update by update,
it must end with the same DOM as the whole answer's HTML, whatever the fences did on the way."""

from __future__ import annotations

import random

import pytest

from specchat.ui.overlay import KINDS, LIVE, OverlayStream, Piece, live_js

pytestmark = pytest.mark.browser

# Runs live_js on every update in turn, a tick or none between them (what arrived is shown over 3 ticks), then, once
# all is shown, renders the final HTML the way the chat does once the answer is done. Where asked to, the placeholder
# is rendered anew before an update, as when the chat re-renders its message.
REPLAY = f"""async ([streams, fresh, pauses]) => {{
  const live = {live_js(0.003, 0.001)};
  const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
  const results = [];
  for (const [i, [updates, final]] of streams.entries()) {{
    const chat = document.getElementById('sc-chat-overlay');
    chat.innerHTML = '<div class="bubble-wrap">{LIVE}</div>';
    for (const [j, html] of updates.entries()) {{
      if (fresh[i] === j) chat.firstChild.innerHTML = '{LIVE}';
      live(html);
      if (pauses[i][j]) await sleep(1);
    }}
    const box = chat.querySelector('.sc-live');
    while (box.scQueue.length) await sleep(1);
    const whole = document.createElement('div');
    whole.innerHTML = final;
    results.push([box.innerHTML, whole.innerHTML]);
  }}
  return results;
}}"""


def test_the_live_answer_ends_as_the_whole_answer_renders(browser):
    rng = random.Random(2026)
    texts = ["```", "`", "~~~", "\n", "\n\n", " ", "   ", "py", "a", "x = 1", "<&>", "````", "</div>", ""]
    streams, fresh, pauses = [], [], []
    for _ in range(300):
        pieces = [
            Piece(rng.choice(KINDS), "".join(rng.choices(texts, k=rng.randint(0, 3))), rng.choice([None, 1, 2]))
            for _ in range(rng.randint(1, 30))
        ]
        stream, updates, shown = OverlayStream(), [], 0
        while shown < len(pieces):
            step = rng.randint(1, 4)
            stream.extend(pieces[shown : shown + step])
            shown += step
            updates.append(stream.html())
        streams.append([updates, stream.html(final=True)])
        fresh.append(rng.randrange(len(updates)) if rng.random() < 0.2 else -1)
        pauses.append([rng.random() < 0.5 for _ in updates])
    page = browser.new_page()
    page.set_content('<div id="sc-chat-overlay"></div>')
    results = page.evaluate(REPLAY, [streams, fresh, pauses])
    page.close()
    mismatched = [i for i, (live, whole) in enumerate(results) if live != whole]
    assert not mismatched, (streams[mismatched[0]], results[mismatched[0]])
    assert any("<pre" in whole for _, whole in results)  # code blocks were among them
