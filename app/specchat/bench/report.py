"""From raw benchmark runs to the report: medians, the fitted cost model, report.json, report.md and plots.

A run record is one generation's Stats.to_dict() plus "id", "category", "mode", "k" and "repeat"; its
verify_s_by_n / verify_calls_by_n keys are strings, as JSON keeps them, so a report can be rebuilt from
report.json alone.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specchat.engine import FIXED_K_MODES, costmodel

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ALL = "all"  # the category row that pools every prompt


def median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else 0.0


def solve_alpha(tokens_per_iteration: float, k: int, tol: float = 1e-9) -> float:
    """The acceptance alpha whose E(k) = (1 - alpha^(k+1)) / (1 - alpha) equals the measured tokens per iteration.

    E is increasing in alpha from 1 (alpha = 0) to k + 1 (alpha = 1), so bisection finds the one root.
    """
    if tokens_per_iteration <= 1.0:
        return 0.0
    if tokens_per_iteration >= k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if costmodel.expected_tokens(mid, k) < tokens_per_iteration:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def config_label(mode: str, k: int) -> str:
    return f"{mode} k={k}" if k else mode


@dataclass(frozen=True)
class CostFit:
    """design.md's cost model measured on this run: times are relative to one target step t1."""

    t1_s: float
    r: dict[int, float]  # target batch of n tokens, over t1
    c: dict[str, float]  # mode -> one draft token's cost, over t1

    def predicted_speedup(self, mode: str, runs: Sequence[dict]) -> float | None:
        """S = E / (d c + mean r(n)) over the runs' own steps: E = 1 + accepted drafts per step, d = drafts per
        step, r(n) at the batch sizes the steps used. With k drafts every step this is exactly design.md's
        S(k) = E(k) / (k c + r(k+1)); it stays fair to prompt lookup, which often drafts fewer than k or none."""
        iterations = sum(run["iterations"] for run in runs)
        if mode not in self.c or not iterations:
            return None
        r = costmodel.interpolate_r(self.r)
        verify = sum(calls * r(int(n)) for run in runs for n, calls in run["verify_calls_by_n"].items())
        draft = self.c[mode] * sum(run["drafted"] for run in runs)
        return (iterations + sum(run["accepted"] for run in runs)) / (verify + draft)


def _verify_totals(runs: Iterable[dict]) -> dict[int, tuple[float, int]]:
    totals: dict[int, tuple[float, int]] = {}
    for run in runs:
        for n, seconds in run["verify_s_by_n"].items():
            s, calls = totals.get(int(n), (0.0, 0))
            totals[int(n)] = (s + seconds, calls + run["verify_calls_by_n"][n])
    return totals


def fit_cost_model(runs: Sequence[dict]) -> CostFit | None:
    """t1 from plain decoding's single-token steps (from any run's when no plain run was made); r(n) from
    batches of n > 1; c per drafting mode from its draft time per drafted token. None without a timed t1."""
    plain = [run for run in runs if run["mode"] == "plain"]
    singles = _verify_totals(plain or runs).get(1)
    if not singles or singles[1] == 0:
        return None
    t1 = singles[0] / singles[1]
    batches = _verify_totals(run for run in runs if run["mode"] != "plain")
    r = {n: s / calls / t1 for n, (s, calls) in sorted(batches.items()) if n > 1 and calls}
    c = {}
    for mode in dict.fromkeys(run["mode"] for run in runs):
        drafting = [run for run in runs if run["mode"] == mode and run["drafted"]]
        if drafting:
            c[mode] = sum(run["draft_s"] for run in drafting) / sum(run["drafted"] for run in drafting) / t1
    return CostFit(t1_s=t1, r=r, c=c)


def _tokens_per_s_by_repeat(runs: Sequence[dict], units: Sequence[float] | None = None) -> dict[int, float]:
    """Throughput of each repeat over the group's prompts: total tokens over total generation time, with each
    run's time in units of that run's units[i] seconds where given (its single-token step: _single_step_s)."""
    by_repeat: dict[int, list[tuple[int, float]]] = {}
    for i, run in enumerate(runs):
        by_repeat.setdefault(run["repeat"], []).append((run["tokens"], run["wall_s"] / (units[i] if units else 1.0)))
    return {
        repeat: sum(n for n, _ in group) / max(sum(t for _, t in group), 1e-9)
        for repeat, group in sorted(by_repeat.items())
    }


def _single_step_s(runs: Sequence[dict]) -> list[float | None]:
    """Each run's own single-token target step; for a run that took none (all drafted), that of the other runs of
    its prompt in its repeat, which ran just before or after it. None where none of them took one."""
    pooled: dict[tuple[str, int], list[dict]] = {}
    for run in runs:
        pooled.setdefault((run["id"], run["repeat"]), []).append(run)
    steps = []
    for run in runs:
        s, calls = _verify_totals([run]).get(1) or _verify_totals(pooled[run["id"], run["repeat"]]).get(1, (0.0, 0))
        steps.append(s / calls if calls else None)
    return steps


def summarize(runs: Sequence[dict], fit: CostFit | None) -> list[dict]:
    """One row per category (and ALL) and mode/k. Speedup divides by plain's median in the same category; the
    steady speedup does the same with each run's time counted in its own single-token steps, so that the machine
    slowing down or speeding up between runs (shared cores) leaves the ratio of two modes alone."""
    runs = list(runs)
    step_s = dict(zip(map(id, runs), _single_step_s(runs)))

    def steady(group: list[dict]) -> float | None:
        units = [step_s[id(run)] for run in group]
        return None if None in units else median(_tokens_per_s_by_repeat(group, units).values())

    categories = [*dict.fromkeys(run["category"] for run in runs), ALL]
    configs = list(dict.fromkeys((run["mode"], run["k"]) for run in runs))
    rows = []
    for category in categories:
        in_category = [run for run in runs if category in (ALL, run["category"])]
        plain_runs = [run for run in in_category if run["mode"] == "plain"]
        plain_by_repeat = _tokens_per_s_by_repeat(plain_runs)
        plain_tps = median(plain_by_repeat.values()) if plain_runs else None
        plain_steady = steady(plain_runs) if plain_runs else None
        for mode, k in configs:
            group = [run for run in in_category if (run["mode"], run["k"]) == (mode, k)]
            if not group:
                continue
            by_repeat = _tokens_per_s_by_repeat(group)
            tps = median(by_repeat.values())
            steps_per_s = steady(group)
            drafted, accepted = sum(r["drafted"] for r in group), sum(r["accepted"] for r in group)
            iterations, tokens = sum(r["iterations"] for r in group), sum(r["tokens"] for r in group)
            width = max(len(r["drafted_by_pos"]) for r in group)
            by_pos = [
                (
                    sum(r["accepted_by_pos"][i] for r in group if i < len(r["accepted_by_pos"])),
                    sum(r["drafted_by_pos"][i] for r in group if i < len(r["drafted_by_pos"])),
                )
                for i in range(width)
            ]
            tokens_per_iteration = tokens / iterations if iterations else 0.0
            # E(k) of a step that drafts k, from how often each position passed where it was drafted: a step that
            # drafted fewer (a draft cut at the answer's end, prompt lookup's shorter matches) is not a rejection.
            fixed_k = drafted and mode in FIXED_K_MODES  # one source at one k: one alpha describes it
            alpha = solve_alpha(1 + sum(a / d for a, d in by_pos[:k] if d), k) if fixed_k else None
            predicted = fit.predicted_speedup(mode, group) if fit and drafted else None
            rows.append(
                {
                    "category": category,
                    "mode": mode,
                    "k": k,
                    "strategies": sorted({r["strategy"] for r in group}),
                    "runs": len(group),
                    "tokens": tokens,
                    "tokens_per_s": tps,
                    "tokens_per_s_by_repeat": list(by_repeat.values()),
                    "speedup": tps / plain_tps if plain_tps else None,
                    # Each repeat against plain's in the same repeat, which ran beside it: the spread of speedup.
                    "speedup_by_repeat": [
                        tps_r / plain_by_repeat[r] for r, tps_r in by_repeat.items() if plain_by_repeat.get(r)
                    ],
                    "steady_speedup": steps_per_s / plain_steady if steps_per_s and plain_steady else None,
                    "predicted_speedup": predicted,
                    "alpha": alpha,
                    "acceptance_rate": accepted / drafted if drafted else None,
                    "mean_accepted": accepted / iterations if drafted else None,
                    "tokens_per_iteration": tokens_per_iteration,
                    "drafts_per_iteration": drafted / iterations if iterations else 0.0,
                    "acceptance_by_pos": [a / d if d else None for a, d in by_pos],
                    "prompt_s": sum(r["prompt_s"] for r in group),
                }
            )
    return rows


def build_report(meta: dict, runs: list[dict]) -> dict:
    fit = fit_cost_model(runs)
    return {
        **meta,
        "cost_model": None if fit is None else {**asdict(fit), "r": {str(n): v for n, v in fit.r.items()}},
        "summary": summarize(runs, fit),
        "runs": runs,
    }


def _fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def render_markdown(report: dict, plot_files: Sequence[str]) -> str:
    machine, settings = report["machine"], report["settings"]
    interrupted = report.get("interrupted")
    partial = [f"**Partial:** {interrupted}; the results cover those runs only.", ""] if interrupted else []
    lines = [
        "# specchat benchmark",
        "",
        f"{report['started']} · specchat {report['version']} · `{report['command']}`",
        "",
        *partial,
        "## Machine",
        "",
        f"- CPU: {machine['cpu']} ({machine['cores']} cores; {machine['threads']} threads used, "
        f"{machine['threads_batch']} for batches)",
        f"- GPU: {machine['gpu']}",
        f"- llama-cpp-python {machine['llama_cpp_python']}; llama.cpp system info: `{machine['system_info']}`",
        "",
        "## Models",
        "",
        "| role | file | name | quantization | size |",
        "|---|---|---|---|---|",
    ]
    for role, model in report["models"].items():
        lines.append(
            f"| {role} | {model['file']} | {model['name']} | {model['quantization']} | "
            f"{model['size_bytes'] / 2**20:.0f} MiB |"
        )
    if report.get("draft_note"):
        lines += ["", f"The draft: {report['draft_note']}."]
    lines += [
        "",
        "## Settings",
        "",
        f"suite {settings['suite']} ({settings['prompts']} prompts; categories: {', '.join(settings['categories'])}); "
        f"modes {', '.join(settings['modes'])}; k {', '.join(map(str, settings['k']))}; "
        f"temperature {settings['temperature']}; max tokens {settings['max_tokens']}; repeats {settings['repeats']}; "
        f"seed {settings['seed']}. One warm-up generation before timing; each repeat runs every prompt through "
        "every mode back to back, alternating their order, so drift hits all modes alike. Tokens/s counts "
        "generation only (prompt processing apart) and is the median over repeats of each repeat's total "
        "tokens over total time; speedup divides by plain decoding's median in the same category of this run. "
        "Steady speedup does the same with each run's time counted in its own single-token target steps (a run "
        "that took none: those of its prompt's other runs in its repeat), which takes out the machine's drift "
        "from one run to the next where other work shares it.",
        "",
        "## Results",
        "",
        "| category | mode | tok/s | speedup | steady speedup | predicted | acceptance | accepted/step | tokens/step | "
        "acceptance by draft position |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["summary"]:
        by_pos = " ".join(_fmt(a, ".0%") for a in row["acceptance_by_pos"]) or "-"
        lines.append(
            f"| {row['category']} | {config_label(row['mode'], row['k'])} | {row['tokens_per_s']:.2f} | "
            f"{_fmt(row['speedup'], '.2f', 'x')} | {_fmt(row['steady_speedup'], '.2f', 'x')} | "
            f"{_fmt(row['predicted_speedup'], '.2f', 'x')} | {_fmt(row['acceptance_rate'], '.0%')} | "
            f"{_fmt(row['mean_accepted'])} | "
            f"{row['tokens_per_iteration']:.2f} | {by_pos} |"
        )
    lines += ["", "## Cost model (design.md) fitted on this run", ""]
    fit = report["cost_model"]
    if fit is None:
        lines.append("No single-token target step was timed (run plain mode too), so the model was not fitted.")
    else:
        lines += [
            f"- t1 = {fit['t1_s'] * 1000:.1f} ms per target step ({1 / fit['t1_s']:.1f} tok/s)",
            "- c (draft token cost over t1): " + (", ".join(f"{mode} {c:.3f}" for mode, c in fit["c"].items()) or "-"),
            "- r(n) (target batch of n over t1): "
            + (", ".join(f"r({n}) = {r:.2f}" for n, r in fit["r"].items()) or "-"),
            "- alpha is solved (bisection) through E(k) = (1 - alpha^(k+1)) / (1 - alpha) from E = 1 + the sum over "
            "draft positions of the share of the steps drafting that position that had it accepted: the tokens a step "
            "drafting k would give, also where steps drafted fewer (prompt lookup's shorter matches, a draft ending "
            "with the answer). Predicted S = (accepted drafts + 1 per step) / (d c + mean r(n)), with d the drafts per "
            "step and r(n) at each step's batch size: with k drafts every step this is S(k) = E(k) / (k c + r(k+1)).",
            "",
            "| mode | alpha | predicted | measured |",
            "|---|---|---|---|",
        ]
        for row in report["summary"]:
            if row["category"] == ALL and row["predicted_speedup"] is not None:
                lines.append(
                    f"| {config_label(row['mode'], row['k'])} | {_fmt(row['alpha'], '.3f')} | "
                    f"{_fmt(row['predicted_speedup'], '.2f', 'x')} | {_fmt(row['speedup'], '.2f', 'x')} |"
                )
    lines += ["", "## Strategies", "", "What the engine reported doing at the end of each run, per mode:", ""]
    for row in report["summary"]:
        if row["category"] == ALL:
            lines.append(f"- {config_label(row['mode'], row['k'])}: " + "; ".join(row["strategies"]))
    if report.get("auto_calibration"):
        cal = report["auto_calibration"]
        lines.append(
            f"\nauto mode's own calibration: t1 = {cal['t1'] * 1000:.1f} ms, c = {_fmt(cal['c'], '.3f')}, "
            + ", ".join(f"r({n}) = {r:.2f}" for n, r in cal["r"].items())
        )
    lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in plot_files]
    return "\n".join(lines) + "\n"


def charts(summary: Sequence[dict]) -> dict[str, Figure]:
    """The report's charts by file name, per category with the spread over repeats."""
    # matplotlib loads here, not with the module: every `specchat` command builds bench's parser (0.3 s here).
    from specchat.bench import plots

    categories = list(dict.fromkeys(row["category"] for row in summary))
    if len(categories) == 2:  # one category: its pooled row is the same numbers again
        categories = categories[:1]
    configs = list(dict.fromkeys((row["mode"], row["k"]) for row in summary))
    drafting = [cfg for cfg in configs if cfg[0] != "plain"]
    labels = {cfg: config_label(*cfg) for cfg in configs}
    palette = plots.shades({mode: [labels[cfg] for cfg in configs if cfg[0] == mode] for mode, _ in configs})
    rows = {(row["category"], row["mode"], row["k"]): row for row in summary}
    repeats = max(len(row["tokens_per_s_by_repeat"]) for row in summary)
    median_of = f"median of {repeats} repeats" if repeats > 1 else "one repeat"
    style = {
        "palette": palette,
        "spread_label": f"min to max of {repeats} repeats",
        "size": (max(900, 260 + len(categories) * (24 * len(configs) + 30)), 450),
    }

    def bars(cfgs: Sequence[tuple[str, int]], value: str, by_repeat: str, mark: str | None = None) -> dict:
        """Per config, per category: the row's value, whiskered over its repeats, marked with its mark."""

        def bar(row: dict | None) -> plots.Bar | None:
            if row is None or row[value] is None:
                return None
            spread = row[by_repeat]
            low, high = (min(spread), max(spread)) if len(spread) > 1 else (None, None)
            return plots.Bar(row[value], low, high, row[mark] if mark else None)

        return {labels[cfg]: [bar(rows.get((category, *cfg))) for category in categories] for cfg in cfgs}

    figures = {
        "tokens_per_s.png": plots.bar_chart(
            categories,
            bars(configs, "tokens_per_s", "tokens_per_s_by_repeat"),
            f"Generation speed by category ({median_of})",
            "tokens/s (generation only)",
            **style,
        )
    }
    speedups = bars(drafting, "speedup", "speedup_by_repeat", "predicted_speedup")
    if any(any(series) for series in speedups.values()):  # none without plain runs to divide by
        figures["speedup.png"] = plots.bar_chart(
            categories,
            speedups,
            f"Speedup over plain decoding by category ({median_of}; dashed: 1x)",
            "speedup over plain (x)",
            mark_label="predicted by the cost model",
            baseline=1.0,
            **style,
        )
    panels = {
        "all prompts" if category == ALL else category: {
            labels[cfg]: [(i + 1, a) for i, a in enumerate(rows[category, *cfg]["acceptance_by_pos"]) if a is not None]
            for cfg in drafting
            if (category, *cfg) in rows
        }
        for category in categories
    }
    if any(any(series.values()) for series in panels.values()):
        figures["acceptance_by_position.png"] = plots.fraction_panels(
            panels,
            "Acceptance by draft position, by category (all repeats pooled)",
            "draft position",
            "drafts accepted",
            palette=palette,
        )
    return figures


def write_plots(summary: Sequence[dict], out: Path) -> list[str]:
    """The charts as PNGs beside the report; returns their file names."""
    from specchat.bench import plots

    figures = charts(summary)
    for name, figure in figures.items():
        plots.save_png(figure, out / name)
    return list(figures)


def write_report(report: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    # The raw runs first: should the disk fill, they outlast the charts, which can be drawn again from them.
    (out / "report.json").write_text(json.dumps(report, indent=1))
    plot_files = write_plots(report["summary"], out)
    (out / "report.md").write_text(render_markdown(report, plot_files))
    return [out / "report.json", out / "report.md", *(out / name for name in plot_files)]
