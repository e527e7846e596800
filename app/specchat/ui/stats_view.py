"""The live stats panel and the acceptance-by-position bar chart, as HTML and inline SVG.

An SVG drawn here follows the page's theme through currentColor and costs far less to redraw on every streamed
update than a matplotlib PNG of the same bars (measured with timeit when the report's charts moved to matplotlib).
"""

from __future__ import annotations

import html

from specchat.engine import Stats

_FINISH = {
    None: "generating",
    "eog": "finished",
    "length": "max tokens reached",
    "context": "context full",
    "stop": "stop string",
    "closed": "stopped",
}


def _card(key: str, label: str, value: str, hint: str = "") -> str:
    title = f' title="{html.escape(hint)}"' if hint else ""
    return (
        f'<div class="sc-stat"{title}><div class="sc-stat-value" data-stat="{key}">{html.escape(value)}</div>'
        f'<div class="sc-stat-label">{html.escape(label)}</div></div>'
    )


def stats_html(stats: Stats | None) -> str:
    if stats is None or stats.tokens == 0 and stats.finish_reason is None:
        return '<div class="sc-stats sc-stats-empty">Send a message to see speed and acceptance here.</div>'
    total = stats.draft_s + stats.verify_s + stats.sample_s
    share = [
        (name, s / total if total else 0.0)
        for name, s in (("draft", stats.draft_s), ("verify", stats.verify_s), ("other", stats.sample_s))
    ]
    split = "".join(f'<span class="sc-split-{name}" style="width:{f:.1%}"></span>' for name, f in share)
    cards = "".join(
        [
            _card("tokens_per_s", "tokens/s", f"{stats.tokens_per_s:.1f}", "generation speed, prompt excluded"),
            _card(
                "acceptance_rate",
                "acceptance",
                f"{stats.acceptance_rate:.0%}" if stats.drafted else "–",
                "share of drafted tokens the target kept",
            ),
            _card(
                "mean_accepted",
                "accepted / step",
                f"{stats.mean_accepted:.2f}",
                "draft tokens accepted per target verify step",
            ),
            # Not stats.k, the latest step's draft: the last steps draft only what max tokens leaves (0 at 1 left).
            _card("k", "draft length", str(len(stats.drafted_by_pos)), "the longest draft proposed in a step"),
            _card("drafted", "drafted", str(stats.drafted)),
            _card("accepted", "accepted", str(stats.accepted)),
            _card("tokens", "tokens", str(stats.tokens)),
            _card(
                "prompt_tokens",
                "prompt tokens decoded",
                str(stats.prompt_tokens),
                "prompt tokens evaluated for this answer; the rest came from the reused KV cache",
            ),
        ]
    )
    return (
        f'<div class="sc-stats" data-finish="{html.escape(stats.finish_reason or "running")}">'
        f'<div class="sc-stats-head"><span class="sc-mode">{html.escape(stats.mode)}</span>'
        f'<span class="sc-finish">{html.escape(_FINISH.get(stats.finish_reason, stats.finish_reason or ""))}</span>'
        f"</div>"
        f'<div class="sc-strategy" data-stat="strategy">{html.escape(stats.strategy)}</div>'
        f'<div class="sc-stat-grid">{cards}</div>'
        f'<div class="sc-split" title="where the time went">{split}</div>'
        f'<div class="sc-split-legend" data-stat="time_split">draft {stats.draft_s:.2f} s · '
        f"verify {stats.verify_s:.2f} s · other {stats.sample_s:.2f} s</div>"
        f"</div>"
    )


# The least room a position's label needs: two digits of the plot's tick font, with a gap.
TICK_ROOM_PX = 14


def tick_step(slot: float) -> int:
    """Every how many draft positions the plot labels one, for slot px per position: at a draft of 31, every label
    in a 280 px plot ran into the next."""
    return next((step for step in (1, 2, 5, 10) if slot * step >= TICK_ROOM_PX), 10)


def acceptance_svg(stats: Stats | None, width: int = 280, height: int = 150) -> str:
    """Bars of the share of drafts accepted at each draft position, for the latest answer."""
    rates = stats.acceptance_by_pos if stats is not None else []
    if not rates:
        return (
            '<div class="sc-plot-box"><div class="sc-plot sc-plot-empty">'
            "Acceptance by draft position appears here once drafts are made.</div></div>"
        )
    left, right, top, bottom = 34, 8, 18, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    slot = plot_w / len(rates)
    step = tick_step(slot)
    parts = [
        '<div class="sc-plot-box">',  # one root element, empty or not: the page's feed updates its children
        f'<svg class="sc-plot" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="acceptance by draft position">',
        f'<text x="{left}" y="11" class="sc-plot-title">acceptance by draft position</text>',
    ]
    for frac in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - frac)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" class="sc-grid"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" class="sc-tick">{frac:.0%}</text>')
    for i, (rate, accepted, drafted) in enumerate(zip(rates, stats.accepted_by_pos, stats.drafted_by_pos)):
        bar_h = plot_h * rate
        x = left + i * slot + slot * 0.15
        parts.append(
            f'<rect class="sc-bar" data-pos="{i + 1}" x="{x:.1f}" y="{top + plot_h - bar_h:.1f}" '
            f'width="{slot * 0.7:.1f}" height="{bar_h:.1f}">'
            f"<title>position {i + 1}: {accepted} of {drafted} accepted ({rate:.0%})</title></rect>"
        )
        if (i + 1) % step == 0 or (i == 0 and step > 2):
            parts.append(
                f'<text x="{x + slot * 0.35:.1f}" y="{height - bottom + 14}" text-anchor="middle" class="sc-tick">'
                f"{i + 1}</text>"
            )
    parts.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle" class="sc-tick">draft position</text>'
    )
    parts.append("</svg></div>")
    return "".join(parts)
