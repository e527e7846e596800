"""`specchat bench` on the real test models, the suite loader, and the report's math."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from PIL import Image

from specchat.bench.report import ALL, build_report, fit_cost_model, median, solve_alpha, summarize, write_report
from specchat.bench.run import load_suite, run_configs, save_report
from specchat.engine import costmodel
from specchat.errors import SpecchatError

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "benchmarks" / "results" / "auto-greedy" / "report.json"
SPEC_BENCH_KINDS = {"multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag"}


def specchat(*args: str, cwd: Path | None = None, home: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "app")} | ({"SPECCHAT_HOME": str(home)} if home else {})
    return subprocess.run(
        [sys.executable, "-m", "specchat", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900
    )


# The math


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.72, 0.9, 0.999])
def test_solve_alpha_inverts_expected_tokens(alpha, k):
    assert solve_alpha(costmodel.expected_tokens(alpha, k), k) == pytest.approx(alpha, abs=1e-6)


def test_solve_alpha_clamps_measurements_outside_the_model():
    assert solve_alpha(0.9, 4) == 0.0  # fewer than one token per step cannot come from the model
    assert solve_alpha(5.0, 4) == 1.0  # every draft plus the bonus


def test_median_of_even_and_odd_counts():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert median([]) == 0.0


def _record(
    mode: str, by_n: dict[int, tuple[float, int]], draft_s: float = 0.0, drafted: int = 0, accepted: float = 0
) -> dict:
    return {
        "mode": mode,
        "verify_s_by_n": {str(n): s for n, (s, _) in by_n.items()},
        "verify_calls_by_n": {str(n): calls for n, (_, calls) in by_n.items()},
        "iterations": sum(calls for _, calls in by_n.values()),
        "draft_s": draft_s,
        "drafted": drafted,
        "accepted": accepted,
    }


def test_cost_model_fit_follows_design_md_definitions():
    e = costmodel.expected_tokens(0.8, 4)
    runs = [
        _record("plain", {1: (1.0, 10)}),  # t1 = 0.1 s
        _record("plain", {1: (3.0, 30)}),
        # Four drafts every step: r(5) = 2.5, c = 0.2, and E(4) tokens per step at alpha = 0.8.
        _record("speculative", {5: (2.5, 10)}, draft_s=0.8, drafted=40, accepted=10 * (e - 1)),
        # Lookup drafted 4 tokens in 10 steps, 2 in 8 and none in 2: r(3) = 2.0.
        _record("lookup", {5: (2.5, 10), 3: (1.6, 8), 1: (0.2, 2)}, draft_s=0.0056, drafted=56, accepted=30),
    ]
    fit = fit_cost_model(runs)
    assert fit.t1_s == pytest.approx(0.1)  # from plain runs only
    assert fit.r == pytest.approx({3: 2.0, 5: 2.5})
    assert fit.c == pytest.approx({"speculative": 0.2, "lookup": 0.001})
    r = costmodel.interpolate_r(fit.r)
    # With k drafts every step the prediction is design.md's S(k).
    assert fit.predicted_speedup("speculative", runs[2:3]) == pytest.approx(costmodel.speedup(0.8, 4, 0.2, r))
    # Lookup's steps are costed at the batch sizes they used: (20 steps + 30 accepted) / (25 + 16 + 2 + 0.056).
    assert fit.predicted_speedup("lookup", runs[3:]) == pytest.approx(50 / 43.056)
    assert fit.predicted_speedup("plain", runs[:2]) is None


def _timed(prompt: str, repeat: int, mode: str, by_n: dict[int, tuple[float, int]], drafted: int = 0) -> dict:
    """A run of 10 tokens taking exactly its verify steps, the way `specchat bench` records it."""
    return {
        **_record(mode, by_n, drafted=drafted, accepted=drafted),
        "id": prompt,
        "category": prompt,
        "repeat": repeat,
        "k": 0,
        "tokens": 10,
        "wall_s": sum(s for s, _ in by_n.values()),
        "drafted_by_pos": [],
        "accepted_by_pos": [],
        "strategy": mode,
        "prompt_s": 0.0,
    }


def test_steady_speedup_counts_each_run_in_its_own_steps_so_drift_between_runs_drops_out():
    runs = []
    for repeat, slowdown in ((0, 1.0), (1, 2.0)):  # in repeat 1 the machine ran at half speed for one auto run
        runs += [
            _timed("copy", repeat, "plain", {1: (1.0, 10)}),
            # Five batches of 2 at r(2) = 1.5, all drafts passing: no single-token step of its own, so it counts
            # in the plain run's steps beside it.
            _timed("copy", repeat, "auto", {2: (0.75, 5)}, drafted=5),
            _timed("prose", repeat, "plain", {1: (1.0, 10)}),
            _timed("prose", repeat, "auto", {1: (1.0 * slowdown, 10)}),
        ]
    rows = {(row["category"], row["mode"]): row for row in summarize(runs, None)}
    # 20 tokens in 10 + 7.5 steps, in both repeats; tokens/s says 1.14x in repeat 0 and 0.73x in repeat 1.
    assert rows[ALL, "auto"]["steady_speedup"] == pytest.approx(20 / 17.5)
    assert rows[ALL, "auto"]["speedup"] == pytest.approx(median([20 / 1.75, 20 / 2.75]) / 10)
    # The spread of speedup: each repeat against plain's in the same repeat (10 tok/s in both).
    assert rows[ALL, "auto"]["speedup_by_repeat"] == pytest.approx([20 / 1.75 / 10, 20 / 2.75 / 10])
    assert rows["prose", "auto"]["steady_speedup"] == pytest.approx(1.0)
    assert rows["copy", "auto"]["steady_speedup"] == pytest.approx(10 / 7.5)
    # Without a single-token step anywhere in its prompt's repeat, a run has no steps to count in.
    alone = summarize([run for run in runs if run["id"] == "copy" and run["mode"] == "auto"], None)
    assert {row["steady_speedup"] for row in alone} == {None}


def test_cost_model_is_not_fitted_without_single_token_steps():
    assert fit_cost_model([_record("speculative", {5: (1.0, 4)}, 0.1, 16, 12)]) is None


def test_plain_runs_once_and_other_modes_at_every_k():
    assert run_configs(["plain", "speculative", "lookup"], [2, 4]) == [
        ("plain", 0),
        ("speculative", 2),
        ("speculative", 4),
        ("lookup", 2),
        ("lookup", 4),
    ]


# The suite


def test_builtin_suite_has_spec_bench_kinds_and_code_prompts():
    items = load_suite("builtin")
    counts: dict[str, int] = {}
    for item in items:
        counts[item.category] = counts.get(item.category, 0) + 1
        assert item.messages and item.messages[-1]["role"] == "user" and item.messages[-1]["content"].strip()
    assert set(counts) == SPEC_BENCH_KINDS | {"code_generation", "code_editing"}
    assert min(counts.values()) >= 3, counts
    assert len({item.id for item in items}) == len(items)
    assert any(len(item.messages) > 1 for item in items if item.category == "multi_turn")
    # Code editing repeats its input: the function to rewrite is in the prompt.
    assert all("def " in item.messages[-1]["content"] for item in items if item.category == "code_editing")


def test_suite_lines_of_both_shapes_and_category_filter(tmp_path):
    suite = tmp_path / "s.jsonl"
    suite.write_text(
        '{"id": "a", "category": "x", "prompt": "Hello"}\n\n'
        '{"id": "b", "category": "y", "messages": [{"role": "user", "content": "Hi"}]}\n'
    )
    items = load_suite(str(suite))
    assert [(i.id, i.category, i.messages) for i in items] == [
        ("a", "x", [{"role": "user", "content": "Hello"}]),
        ("b", "y", [{"role": "user", "content": "Hi"}]),
    ]
    assert [i.id for i in load_suite(str(suite), ["y"])] == ["b"]
    with pytest.raises(SpecchatError, match="no prompts in categories z"):
        load_suite(str(suite), ["z"])


def test_bad_suite_line_names_file_and_line(tmp_path):
    suite = tmp_path / "bad.jsonl"
    suite.write_text('{"id": "a", "category": "x", "prompt": "ok"}\n{"id": "b", "prompt": "no category"}\n')
    with pytest.raises(SpecchatError, match=r"bad\.jsonl:2: a suite line must be"):
        load_suite(str(suite))


def test_suite_that_is_not_utf8_or_is_a_folder_is_refused_in_one_line(tiny_model, tmp_path):
    suite = tmp_path / "badutf.jsonl"
    suite.write_bytes(b'{"id": "a", "category": "c", "prompt": "caf\xe9"}\n')  # Latin-1, not UTF-8
    at = suite.read_bytes().index(0xE9)
    run = specchat("bench", "--target", str(tiny_model), "--suite", str(suite), "--out", str(tmp_path / "out"))
    assert run.returncode == 1 and run.stderr.splitlines() == [
        f"error: suite file {suite} is not UTF-8 text (invalid continuation byte at byte {at}); save it as UTF-8"
    ], run.stderr
    with pytest.raises(SpecchatError, match=f"^suite {tmp_path} is a folder, not a file; give a .jsonl suite file$"):
        load_suite(str(tmp_path))
    assert not (tmp_path / "out").exists()


# The report, when the run or its folder fails


def test_a_report_its_folder_fails_at_the_end_is_kept_elsewhere_and_said_so(tmp_path, monkeypatch, capsys):
    report = json.loads(RECORDED.read_text())
    out = tmp_path / "out"
    (out / "report.json").mkdir(parents=True)  # the folder takes no report.json, as a full disk would not
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(SpecchatError) as refused:
        save_report(report, out)
    message = str(refused.value)
    assert message.startswith(f"could not write the report in {out} (Is a directory); the results are in ")
    kept = Path(message.rsplit(" ", 1)[1])
    assert kept.parent == tmp_path and json.loads(kept.read_text()) == report
    # Nowhere on disk to keep them: the results go to standard output rather than nowhere.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    with pytest.raises(SpecchatError, match="the results are in report.json printed on standard output$"):
        save_report(report, out)
    assert json.loads(capsys.readouterr().out) == report


def test_a_report_of_the_first_runs_alone_is_written_and_marked_partial(tmp_path):
    recorded = json.loads(RECORDED.read_text())
    meta = {key: value for key, value in recorded.items() if key not in ("cost_model", "summary", "runs")}
    runs = recorded["runs"][:1]  # one plain run of one prompt: no speedup, no cost model's drafts
    written = write_report(
        build_report(meta | {"interrupted": "stopped by Ctrl-C after 1 of 192 runs"}, runs), tmp_path
    )
    assert {path.name for path in written} == {"report.json", "report.md", "tokens_per_s.png"}
    assert (
        "**Partial:** stopped by Ctrl-C after 1 of 192 runs; the results cover those runs only."
        in (tmp_path / "report.md").read_text()
    )
    assert len(json.loads((tmp_path / "report.json").read_text())["runs"]) == 1


def test_ctrl_c_during_the_benchmark_writes_the_runs_done_as_a_partial_report(tiny_model, tmp_path):
    suite = tmp_path / "two.jsonl"
    suite.write_text(
        '{"id": "a", "category": "x", "prompt": "Count from one to twenty."}\n'
        '{"id": "b", "category": "y", "prompt": "Name the planets of the solar system."}\n'
    )
    out = tmp_path / "out"
    args = ["--target", str(tiny_model), "--suite", str(suite), "--modes", "plain,lookup", "--k", "1,2"]
    args += ["--max-tokens", "16", "--repeats", "3", "--threads", "2", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "app"), "SPECCHAT_HOME": str(tmp_path / "home")}
    bench = subprocess.Popen(
        [sys.executable, "-m", "specchat", "bench", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    for line in bench.stderr:
        if line.startswith("[3/18]"):
            break
    bench.send_signal(signal.SIGINT)
    stdout, stderr = bench.communicate(timeout=300)
    assert bench.returncode == 130, stderr
    report = json.loads((out / "report.json").read_text())
    done = len(report["runs"])
    assert 3 <= done < 18
    assert report["interrupted"] == f"stopped by Ctrl-C after {done} of 18 runs (3 repeats asked)"
    assert report["settings"]["repeats"] == (done - 1) // 6 + 1  # begun: 2 prompts x 3 configs a repeat
    assert f"interrupted after {done} of 18 runs; writing the report of those" in stderr
    assert "**Partial:**" in (out / "report.md").read_text() and "wrote" in stdout and "Traceback" not in stderr


# The command on real models


@pytest.fixture(scope="module")
def bench_run(tiny_model, tmp_path_factory):
    """One real `specchat bench` with SmolLM2 drafting for itself (the file as it is) on a three-prompt suite."""
    tmp = tmp_path_factory.mktemp("bench")
    suite = tmp / "tiny.jsonl"
    suite.write_text(
        "\n".join(
            json.dumps(line)
            for line in [
                {"id": "code-1", "category": "code", "prompt": "Write a Python function that reverses a string."},
                {"id": "code-2", "category": "code", "prompt": "Write a Python function that sums a list."},
                {
                    "id": "chat-1",
                    "category": "chat",
                    "messages": [
                        {"role": "user", "content": "Name a fruit."},
                        {"role": "assistant", "content": "An apple."},
                        {"role": "user", "content": "Describe it in one sentence."},
                    ],
                },
            ]
        )
    )
    out = tmp / "out"
    args = ["--target", str(tiny_model), "--draft", str(tiny_model), "--draft-as-is", "--suite", str(suite)]
    args += ["--modes", "plain,speculative,lookup", "--k", "2,3", "--max-tokens", "24", "--repeats", "2"]
    run = specchat("bench", *args, "--threads", "2", "--out", str(out), home=tmp / "home")
    assert run.returncode == 0, run.stderr[-3000:]
    return run, out, json.loads((out / "report.json").read_text())


@pytest.mark.models
def test_bench_writes_report_files_and_plots(bench_run):
    run, out, report = bench_run
    md = (out / "report.md").read_text()
    for name in ("tokens_per_s.png", "speedup.png", "acceptance_by_position.png"):
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.width >= 800
        assert f"]({name})" in md
    for heading in ("## Machine", "## Models", "## Results", "## Cost model"):
        assert heading in md
    assert "speculative k=3" in md and "smollm2-135m-instruct-q4_1.gguf" in md
    # Progress on the terminal: one line per timed generation (3 prompts x 5 configs x 2 repeats).
    assert sum(line.startswith("[") for line in run.stderr.splitlines()) == 30
    assert "[30/30]" in run.stderr
    assert "wrote" in run.stdout and "report.json" in run.stdout


@pytest.mark.models
def test_report_json_keeps_machine_models_and_every_raw_timing(bench_run):
    _, _, report = bench_run
    machine = report["machine"]
    assert machine["cpu"] and machine["cores"] >= 1 and machine["threads"] == 2
    assert "CPU" in machine["system_info"] and machine["llama_cpp_python"] == "0.3.36"
    assert report["draft_note"] is None  # --draft-as-is: no CPU copy was considered
    for role in ("target", "draft"):
        model = report["models"][role]
        assert model["quantization"] == "Q4_1" and model["size_bytes"] > 50_000_000
    runs = report["runs"]
    assert len(runs) == 30
    assert {(r["mode"], r["k"]) for r in runs} == {
        ("plain", 0),
        ("speculative", 2),
        ("speculative", 3),
        ("lookup", 2),
        ("lookup", 3),
    }
    for r in runs:
        assert r["tokens"] > 0 and r["wall_s"] > 0 and r["verify_s"] > 0
        assert sum(r["verify_calls_by_n"].values()) == r["iterations"]
        assert r["strategy"] and r["finish_reason"] in ("eog", "length")


@pytest.mark.models
def test_speedup_is_the_ratio_of_medians_from_this_invocations_runs(bench_run):
    _, _, report = bench_run
    runs = report["runs"]

    def median_tps(category: str, mode: str, k: int) -> float:
        per_repeat = []
        for repeat in (0, 1):
            group = [
                r
                for r in runs
                if r["repeat"] == repeat and (r["mode"], r["k"]) == (mode, k) and category in (ALL, r["category"])
            ]
            per_repeat.append(sum(r["tokens"] for r in group) / sum(r["wall_s"] for r in group))
        return median(per_repeat)

    rows = {(row["category"], row["mode"], row["k"]): row for row in report["summary"]}
    assert set(rows) == {
        (c, m, k) for c in ("code", "chat", ALL) for m, k in run_configs(["plain", "speculative", "lookup"], [2, 3])
    }
    for (category, mode, k), row in rows.items():
        assert row["tokens_per_s"] == pytest.approx(median_tps(category, mode, k))
        assert row["speedup"] == pytest.approx(median_tps(category, mode, k) / median_tps(category, "plain", 0))


@pytest.mark.models
def test_self_drafting_accepts_everything_and_the_cost_model_is_fitted(bench_run):
    _, _, report = bench_run
    fit = report["cost_model"]
    assert fit["t1_s"] > 0
    assert {"3", "4"} <= set(fit["r"])  # verify batches of k + 1 for k = 2, 3
    assert fit["c"]["speculative"] > fit["c"]["lookup"] >= 0  # a model draft costs more than an n-gram lookup
    predicted = 0
    for row in report["summary"]:
        if row["mode"] == "speculative":
            # The model drafting for itself greedily: every draft accepted, so alpha = 1.
            assert row["acceptance_rate"] == 1.0 and row["alpha"] == 1.0
            assert row["acceptance_by_pos"] == [1.0] * row["k"]
            # 24 tokens are whole steps of k + 1 for k = 2, 3: every step verified k + 1 tokens, but the last of an
            # answer that ended sooner, whose draft ended with it (no draft runs past an end-of-generation token).
            whole = str(row["k"] + 1)
            runs = [
                run
                for run in report["runs"]
                if (run["mode"], run["k"]) == ("speculative", row["k"]) and row["category"] in (ALL, run["category"])
            ]
            for run in runs:
                shorter = {n: calls for n, calls in run["verify_calls_by_n"].items() if n != whole}
                assert not shorter if run["finish_reason"] == "length" else list(shorter.values()) in ([], [1])
            if all(set(run["verify_calls_by_n"]) == {whole} for run in runs):  # then design.md's S(k) at alpha = 1
                r = costmodel.interpolate_r({int(n): v for n, v in fit["r"].items()})
                assert row["predicted_speedup"] == pytest.approx(
                    costmodel.speedup(1.0, row["k"], fit["c"]["speculative"], r)
                )
                predicted += 1
        if row["mode"] == "plain":
            assert row["acceptance_rate"] is None and row["predicted_speedup"] is None
    assert predicted  # the code prompts run to 24 tokens


@pytest.mark.models
def test_bench_refuses_unknown_modes_and_speculation_without_a_draft(tiny_model, tmp_path):
    bad = specchat("bench", "--target", str(tiny_model), "--modes", "plain,warp", "--out", str(tmp_path / "a"))
    assert bad.returncode != 0 and "unknown mode(s) warp" in bad.stderr
    # A draft longer than any auto drafts, which no CPU's calibration found to pay: refused before the run.
    long = specchat(
        "bench", "--target", str(tiny_model), "--modes", "lookup", "--k", "4,600", "--out", str(tmp_path / "c")
    )
    assert long.returncode == 1 and long.stderr.strip() == "error: --k takes draft lengths from 1 to 31", long.stderr
    # Every mode, as asked by default: refused before the models load and auto times them (tens of seconds).
    no_draft = specchat("bench", "--target", str(tiny_model), "--out", str(tmp_path / "b"))
    assert no_draft.returncode == 1 and no_draft.stderr == (
        "error: speculative mode needs a draft model: give --draft (or --pair), or --modes without speculative\n"
    )
    assert not (tmp_path / "b").exists()


def test_bench_refuses_an_out_folder_that_cannot_take_the_report_before_it_runs(tiny_model, tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    full = tmp_path / "full"
    full.mkdir()
    (full / "report.json").write_text("{}")
    for out, message in (
        (file, f"--out {file} is a file; give a folder for the report"),
        (full, f"--out {full} already holds files; give a new or empty folder, so that none is overwritten"),
        (file / "sub", f"--out {file / 'sub'}: {file} is a file, so no folder can be made in it"),
        # os.access says root may write in /proc; only making the folder finds out it cannot.
        (
            Path("/proc/x"),
            "--out /proc/x: cannot make the report folder or write in it (No such file or directory); "
            "give a folder you can write in",
        ),
    ):
        run = specchat("bench", "--target", str(tiny_model), "--modes", "plain", "--repeats", "1", "--out", str(out))
        # One line and nothing else: no model loaded, no progress line, no traceback after a benchmark's worth of work.
        assert run.returncode == 1 and run.stderr.splitlines() == [f"error: {message}"], run.stderr
    assert file.read_text() == "mine" and [f.name for f in full.iterdir()] == ["report.json"]
