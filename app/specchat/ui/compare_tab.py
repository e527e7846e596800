"""The Compare tab: one prompt through plain, speculative and lookup decoding, side by side as they stream."""

from __future__ import annotations

import html
import time
from collections.abc import Iterator

import gradio as gr
import numpy as np

from specchat.bench import plots
from specchat.bench.compare import NEAR_TIE_LOGITS, Comparison, Run, compare
from specchat.bench.report import config_label
from specchat.engine import Engine, GenerationSettings, SamplingParams
from specchat.errors import SpecchatError
from specchat.host import WAIT_POLL_S, EngineHost
from specchat.logs import unexpected
from specchat.ui import SPINNER_HIDDEN

COLUMNS = ("plain", "speculative", "lookup")
TITLES = {"plain": "Plain decoding", "speculative": "Speculative (draft model)", "lookup": "Prompt lookup"}
NO_ENGINE = "Load a model pair first (Models tab): the comparison runs on the loaded models."
DEFAULT_PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring and an example."
# Streaming every token would flood the browser; a few updates a second look live.
_UPDATE_S = 0.15


def _header(run: Run | None, mode: str) -> str:
    if run is None:
        return f"**{TITLES[mode]}** · not run (no draft model loaded)"
    if run.stats is None:
        return f"**{TITLES[mode]}** · waiting"
    state = "done" if run.done else "running"
    return f"**{TITLES[mode]}** · {run.stats.tokens_per_s:.1f} tok/s · {run.stats.tokens} tokens · {state}"


def _stopped(header: str) -> str:
    """A header of _header's as Stop left its run: cut short, or never started."""
    return header.replace(" · running", " · stopped").replace(" · waiting", " · not run (stopped)")


def _summary(comparison: Comparison, engine: Engine) -> str:
    plain = comparison.plain.stats
    lines = [
        "| run | tok/s | speedup | acceptance | accepted per step | strategy | first difference from plain |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in comparison.runs:
        stats = run.stats
        if stats is None:
            continue
        if run is comparison.plain:
            lines.append(f"| plain | {stats.tokens_per_s:.1f} | 1.00x | - | - | {stats.strategy} | - |")
            continue
        speedup = comparison.speedup(run)
        div = comparison.divergence(run, engine)
        if div is None:
            where = "none: same tokens"
        else:
            where = f"token {div.position}: {div.plain_text!r} vs {div.other_text!r}"
            if div.near_tie is not None:
                verdict = "a near-tie" if div.near_tie else "not a near-tie"
                where += f" ({verdict}: target's top-2 margin {div.margin:.3f}, threshold {NEAR_TIE_LOGITS})"
            elif not comparison.greedy:
                where += " (sampling: each run draws its own random numbers, so texts may part anywhere)"
        lines.append(
            f"| {config_label(run.mode, run.k)} | {stats.tokens_per_s:.1f} | "
            f"{'-' if speedup is None else f'{speedup:.2f}x'} | {stats.acceptance_rate:.0%} | "
            f"{stats.mean_accepted:.2f} | {stats.strategy} | {html.escape(where).replace('|', '&#124;')} |"
        )
    note = "" if plain is None else f"Prompt: {plain.prompt_tokens} tokens in {plain.prompt_s:.2f} s (not timed). "
    return "\n".join(lines) + f"\n\n{note}Speeds count generation only; the runs went one after the other."


def _outputs(comparison: Comparison | None, status: str, summary: str = "", plot=None) -> list:
    runs = {run.mode: run for run in comparison.runs} if comparison else {}
    headers = [_header(runs.get(mode), mode) if comparison else f"**{TITLES[mode]}**" for mode in COLUMNS]
    texts = [runs[mode].text if mode in runs else "" for mode in COLUMNS]
    return [status, *headers, *texts, summary, plot]


def _timeline_plot(comparison: Comparison) -> np.ndarray:
    labels = [config_label(run.mode, run.k) for run in comparison.runs]
    figure = plots.line_chart(
        {label: run.timeline for label, run in zip(labels, comparison.runs)},
        "Tokens generated over time (steeper is faster)",
        "seconds of generation (prompt excluded)",
        "tokens generated",
        palette=plots.shades({label: [label] for label in labels}),
    )
    return plots.to_array(figure)


def build(host: EngineHost) -> None:
    """The tab's components, inside the caller's gr.Blocks / gr.Tab context."""
    with gr.Row():
        prompt = gr.Textbox(value=DEFAULT_PROMPT, label="Prompt", lines=4, scale=3, elem_id="compare-prompt")
        with gr.Column(scale=1):
            seed = gr.Number(value=0, precision=0, label="Seed")
            temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0: greedy)")
            k = gr.Slider(1, 16, value=4, step=1, label="Draft length k")
            max_tokens = gr.Slider(16, 1024, value=128, step=16, label="Max tokens", elem_id="compare-max-tokens")
    with gr.Row():
        run_button = gr.Button("Compare", variant="primary", elem_id="compare-run")
        stop_button = gr.Button("Stop", variant="stop", elem_id="compare-stop")
    status = gr.Markdown(elem_id="compare-status")
    headers, texts = [], []
    with gr.Row():
        for mode in COLUMNS:
            with gr.Column():
                headers.append(gr.Markdown(f"**{TITLES[mode]}**", elem_id=f"compare-header-{mode}"))
                texts.append(
                    gr.Textbox(
                        lines=14, max_lines=14, show_label=False, interactive=False, elem_id=f"compare-text-{mode}"
                    )
                )
    summary = gr.Markdown(elem_id="compare-summary")
    plot = gr.Image(label="Tokens over time", type="numpy", format="png", interactive=False, elem_id="compare-plot")

    def run(prompt_text: str, seed_value: float, temp: float, k_value: float, max_tok: float) -> Iterator[list]:
        """When the browser tab closes, Gradio closes this generator at its next yield: the with and finally blocks
        then stop the comparison and give up its turn."""
        state = host.status().state
        # While a model loads, the comparison waits in line for it (with None, the turn takes the model once loaded).
        engine = None if state == "loading" else host.engine
        if engine is None and state != "loading":
            yield _outputs(None, NO_ENGINE)
            return
        if not prompt_text.strip():
            yield _outputs(None, "Write a prompt first.")
            return
        messages = [{"role": "user", "content": prompt_text}]
        comparison = None
        try:
            settings = GenerationSettings(
                mode="plain",
                k=int(k_value),
                sampling=SamplingParams(float(temp)),
                seed=int(seed_value or 0),
                max_tokens=int(max_tok),
            )
            yield _outputs(None, "Starting…")
            # In line with the chat tabs' and the API's requests, in arrival order; any error gives up the turn.
            with host.turn(engine) as turn:
                while (ahead := turn.wait(WAIT_POLL_S)) is not None:
                    yield _outputs(None, turn.waiting(ahead))
                engine = turn.engine
                modes = [mode for mode in COLUMNS[1:] if mode != "speculative" or engine.draft is not None]
                runs = compare(engine, messages, settings, modes)
                shown = 0.0
                try:
                    for comparison in runs:
                        if time.monotonic() - shown >= _UPDATE_S:
                            shown = time.monotonic()
                            current = next((r for r in comparison.runs if not r.done), comparison.runs[-1])
                            yield _outputs(comparison, f"Running {current.mode}…")
                finally:
                    runs.close()  # its generation ends before the turn is given up: the next request finds it idle
                done = _summary(comparison, engine)
            yield _outputs(comparison, "Done.", done, _timeline_plot(comparison))
        except SpecchatError as e:
            yield _outputs(comparison, f"Error: {e}")
        except Exception as e:  # the turn is given up by now: the chat and the next comparison go on
            yield _outputs(comparison, unexpected(e, "The comparison"))

    running = run_button.click(
        run,
        [prompt, seed, temperature, k, max_tokens],
        [status, *headers, *texts, summary, plot],
        concurrency_limit=None,  # comparisons wait in the engine's line, where the page says how many are ahead
        **SPINNER_HIDDEN,  # the status line says what runs
    )
    # As the chat's Clear cancels its answer: Gradio closes run at its next yield, as for a closed tab, and its with
    # and finally blocks end the generation and give up the turn before the cancel returns.
    stop_button.click(None, None, None, cancels=[running])
    # Said once the cancel has returned (a cancelled event counts as failed; run says its own errors): said at the
    # click, it could be overwritten by the comparison's last update still on its way. A run cut short keeps its
    # last numbers.
    running.failure(
        lambda *shown: ["Stopped.", *map(_stopped, shown)],
        headers,
        [status, *headers],
        queue=False,
        **SPINNER_HIDDEN,
    )
