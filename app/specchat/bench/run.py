"""`specchat bench`: run a prompt suite through modes and draft lengths and write the report.

Thin layer over the engine: load the models, run every (prompt, mode, k) once per repeat, keep every raw
timing, and hand the records to bench_report for the medians, the fitted cost model and the files.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from specchat import __version__
from specchat.bench.report import build_report, config_label, write_report
from specchat.engine import FIXED_K_MODES
from specchat.engine.calibration import K_LONG
from specchat.errors import SpecchatError

if TYPE_CHECKING:
    from specchat.engine import Engine, GenerationSettings, LlamaModel

BUILTIN = "builtin"
_REPO_SUITE = Path(__file__).resolve().parents[3] / "benchmarks" / "suite.jsonl"


@dataclass(frozen=True)
class SuiteItem:
    id: str
    category: str
    messages: list[dict]


def builtin_suite_path() -> Path:
    """The suite shipped in the wheel (package data), or the repository's when running from source."""
    packaged = resources.files("specchat") / "benchmarks" / "suite.jsonl"
    if packaged.is_file():
        return Path(str(packaged))
    return _REPO_SUITE


def _suite_text(path: Path) -> str:
    if path.is_dir():
        raise SpecchatError(f"suite {path} is a folder, not a file; give a .jsonl suite file")
    if not path.is_file():
        raise SpecchatError(f"suite file {path} does not exist")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SpecchatError(
            f"suite file {path} is not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8"
        ) from None
    except OSError as e:
        raise SpecchatError(f"cannot read suite file {path} ({e.strerror or e})") from None


def load_suite(spec: str, categories: Sequence[str] | None = None) -> list[SuiteItem]:
    """Lines of {"id", "category", "prompt"} or {"id", "category", "messages"}; a prompt becomes one user turn."""
    path = builtin_suite_path() if spec == BUILTIN else Path(spec)
    items = []
    for number, line in enumerate(_suite_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            messages = entry.get("messages") or [{"role": "user", "content": entry["prompt"]}]
            item = SuiteItem(str(entry["id"]), str(entry["category"]), list(messages))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise SpecchatError(
                f"{path}:{number}: a suite line must be a JSON object with id, category and prompt or messages ({e})"
            ) from None
        items.append(item)
    if categories:
        unknown = set(categories) - {item.category for item in items}
        if unknown:
            raise SpecchatError(f"no prompts in categories {', '.join(sorted(unknown))} in {path}")
        items = [item for item in items if item.category in categories]
    if not items:
        raise SpecchatError(f"{path} holds no prompts")
    return items


def run_configs(modes: Sequence[str], ks: Sequence[int]) -> list[tuple[str, int]]:
    """The fixed-k modes at every draft length; plain and auto once (k = 0: they do not take one)."""
    return [(mode, k) for mode in modes for k in (ks if mode in FIXED_K_MODES else [0])]


def benchmark(
    engine: Engine,
    items: Sequence[SuiteItem],
    configs: Sequence[tuple[str, int]],
    make_settings: Callable[[str, int, int], GenerationSettings],
    repeats: int,
    progress: Callable[[str], None],
    records: list[dict],
) -> None:
    """Every item through every config, `repeats` times; one record per generation, appended to `records` as
    it finishes, so that the runs done before a Ctrl-C are the caller's to report.

    make_settings(mode, k, repeat) gives each generation's settings (the repeat varies the sampling seed).

    Configs of one prompt run back to back and their order flips every repeat, so slow drift (heat, other
    load) hits every mode alike; one untimed warm-up generation first pays llama.cpp's first-decode costs.
    """
    warm_mode, warm_k = next((cfg for cfg in configs if cfg[0] != "plain"), configs[0])
    for _ in engine.chat(items[0].messages, make_settings(warm_mode, warm_k, 0)):
        pass
    total, done, started = repeats * len(items) * len(configs), 0, time.perf_counter()
    for repeat in range(repeats):
        order = list(configs) if repeat % 2 == 0 else list(reversed(configs))
        for item in items:
            for mode, k in order:
                # Each prompt on its own: another prompt's answer in this suite is no user's earlier request.
                engine.answers.clear()
                for _ in engine.chat(item.messages, make_settings(mode, k, repeat)):
                    pass
                stats = engine.last_stats.to_dict()
                stats["verify_s_by_n"] = {str(n): s for n, s in stats["verify_s_by_n"].items()}
                stats["verify_calls_by_n"] = {str(n): c for n, c in stats["verify_calls_by_n"].items()}
                records.append({"id": item.id, "category": item.category, "repeat": repeat, **stats, "k": k})
                done += 1
                elapsed = time.perf_counter() - started
                accept = f", acceptance {stats['acceptance_rate']:.0%}" if stats["drafted"] else ""
                progress(
                    f"[{done}/{total}] repeat {repeat + 1} {item.id} {config_label(mode, k)}: "
                    f"{stats['tokens']} tokens, {stats['tokens_per_s']:.2f} tok/s{accept} "
                    f"(elapsed {elapsed:.0f} s, left ~{elapsed / done * (total - done):.0f} s)"
                )


def machine_info(engine: Engine) -> dict:
    from specchat.engine.calibration import cpu_name
    from specchat.engine.llama_backend import build_info

    threads, threads_batch = engine.target.config.threads
    gpu_layers = engine.target.config.n_gpu_layers
    build = build_info()
    offload = "supported" if build["gpu_offload"] else "not supported"
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "threads": threads,
        "threads_batch": threads_batch,
        "gpu": f"offload {offload} by this build; n_gpu_layers = {gpu_layers}",
        "platform": platform.platform(),
        "python": platform.python_version(),
        "llama_cpp_python": build["llama_cpp_python"],
        "system_info": build["system_info"],
    }


def model_info(model: LlamaModel) -> dict:
    from specchat.engine.llama_backend import quantization_name

    meta = model.metadata
    return {
        "file": model.path.name,
        "path": str(model.path),
        "size_bytes": model.path.stat().st_size,
        "name": model.name,
        "architecture": meta.get("general.architecture"),
        "quantization": quantization_name(meta.get("general.file_type")),
        "n_vocab": model.n_vocab,
    }


def _csv(kind: Callable[[str], object]) -> Callable[[str], list]:
    def parse(text: str) -> list:
        try:
            return [kind(part.strip()) for part in text.split(",") if part.strip()]
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def register(subparsers) -> None:
    from specchat.engine import MODES
    from specchat.launch import add_model_arguments

    p = subparsers.add_parser(
        "bench",
        help="benchmark modes and draft lengths on a prompt suite",
        description="Run a prompt suite through plain, speculative and lookup decoding and write report.json, "
        "report.md and PNG plots.",
    )
    add_model_arguments(p)
    p.add_argument("--suite", default=BUILTIN, help="a .jsonl suite file, or 'builtin' (default)")
    p.add_argument("--categories", type=_csv(str), help="comma-separated categories to keep (default: all)")
    modes = ["plain", *(mode for mode in MODES if mode != "plain")]
    p.add_argument(
        "--modes", type=_csv(str), default=modes, help=f"comma-separated, of {', '.join(MODES)} (default: all)"
    )
    p.add_argument(
        "--k",
        type=_csv(int),
        default=[1, 2, 4, 8],
        help="comma-separated draft lengths of speculative and lookup modes (default 1,2,4,8); auto picks its own",
    )
    p.add_argument("--temperature", type=float, default=0.0, help="0 decodes greedily (default)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="repeat r samples with seed + r (-1: random seeds)")
    p.add_argument("--out", type=Path, help="a new or empty report folder (default: bench-out/<date-time>)")
    p.set_defaults(func=cmd_bench)


def check_out(out: Path) -> None:
    """Refuse a report folder that could not take the report, before the benchmark runs (and its results are lost).

    Only making the folder and writing a file in it is a sure test: os.access says yes to root, in /proc too,
    and knows nothing of read-only or full disks. What the test made it takes away, so that a run which fails
    before its report (a model that will not load) leaves nothing behind.
    """
    if out.exists() and not out.is_dir():
        raise SpecchatError(f"--out {out} is a file; give a folder for the report")
    if out.is_dir() and any(out.iterdir()):
        raise SpecchatError(f"--out {out} already holds files; give a new or empty folder, so that none is overwritten")
    existing = next(folder for folder in (out.absolute(), *out.absolute().parents) if folder.exists())
    if not existing.is_dir():
        raise SpecchatError(f"--out {out}: {existing} is a file, so no folder can be made in it")
    made = [folder for folder in (out.absolute(), *out.absolute().parents) if not folder.exists()]
    probe = out / "report.json"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_text("{}")
    except OSError as e:
        raise SpecchatError(
            f"--out {out}: cannot make the report folder or write in it ({e.strerror or e}); "
            "give a folder you can write in"
        ) from None
    finally:
        with contextlib.suppress(OSError):  # what cannot be taken away stays: the check's verdict is what matters
            probe.unlink(missing_ok=True)
            for folder in made:  # the deepest first
                folder.rmdir()


def keep_elsewhere(report: dict) -> str:
    """report.json where the system keeps temporary files, else on standard output: where the results went."""
    try:
        handle, name = tempfile.mkstemp(prefix="specchat-bench-", suffix=".json")
        with os.fdopen(handle, "w") as file:
            json.dump(report, file, indent=1)
        return name
    except OSError:
        print(json.dumps(report), flush=True)
        return "report.json printed on standard output"


def save_report(report: dict, out: Path) -> list[Path]:
    """write_report; if the folder fails it at the end (a full disk, a folder taken away), one line that says so
    and where the results were kept instead, as a whole benchmark's wait is in them."""
    try:
        return write_report(report, out)
    except OSError as e:
        kept = keep_elsewhere(report)
        raise SpecchatError(
            f"could not write the report in {out} ({e.strerror or e}); the results are in {kept}"
        ) from None


def run_meta(args: argparse.Namespace, engine: Engine, items: Sequence[SuiteItem], started: dt.datetime) -> dict:
    """What the report says of the run besides its timings: all known before the first timed generation."""
    return {
        "auto_calibration": asdict(engine.calibration()) if "auto" in args.modes else None,
        "version": __version__,
        "started": started.isoformat(timespec="seconds"),
        "command": shlex.join(["specchat", *sys.argv[1:]]),
        "machine": machine_info(engine),
        "models": {"target": model_info(engine.target)} | ({"draft": model_info(engine.draft)} if engine.draft else {}),
        "draft_note": engine.draft_note,
        "settings": {
            "suite": args.suite,
            "prompts": len(items),
            "categories": list(dict.fromkeys(item.category for item in items)),
            "modes": args.modes,
            "k": args.k,
            "temperature": args.temperature,
            "max_tokens": args.max_tokens,
            "repeats": args.repeats,
            "seed": args.seed,
        },
    }


def print_summary(report: dict) -> None:
    for row in report["summary"]:
        if row["category"] == "all":
            speedup = "" if row["speedup"] is None else f", {row['speedup']:.2f}x plain"
            predicted = "" if row["predicted_speedup"] is None else f" (model: {row['predicted_speedup']:.2f}x)"
            print(f"{config_label(row['mode'], row['k'])}: {row['tokens_per_s']:.2f} tok/s{speedup}{predicted}")


def cmd_bench(args: argparse.Namespace) -> int:
    from specchat.engine import MODES, RANDOM_SEED, GenerationSettings, SamplingParams
    from specchat.launch import load_engine, print_progress, resolve_models

    unknown = [mode for mode in args.modes if mode not in MODES]
    if unknown or not args.modes:
        raise SpecchatError(f"unknown mode(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(MODES)}")
    if not args.k or min(args.k) < 1 or max(args.k) > K_LONG:
        raise SpecchatError(f"--k takes draft lengths from 1 to {K_LONG}")
    if args.repeats < 1 or args.max_tokens < 1:
        raise SpecchatError("--repeats and --max-tokens must be at least 1")
    items = load_suite(args.suite, args.categories)
    sampling = SamplingParams(args.temperature)

    def make_settings(mode: str, k: int, repeat: int) -> GenerationSettings:
        seed = args.seed if args.seed == RANDOM_SEED else args.seed + repeat
        return GenerationSettings(mode=mode, k=k, sampling=sampling, seed=seed, max_tokens=args.max_tokens)

    configs = run_configs(args.modes, args.k)
    make_settings(*configs[0], 0)  # the seed's check, before the models load
    target, draft = resolve_models(args)
    if draft is None and "speculative" in args.modes:  # before the load and auto's calibration (tens of seconds)
        raise SpecchatError(
            "speculative mode needs a draft model: give --draft (or --pair), or --modes without speculative"
        )
    started = dt.datetime.now().astimezone()
    out = args.out or Path("bench-out") / started.strftime("%Y%m%d-%H%M%S")
    check_out(out)

    engine = load_engine(args, target, draft)
    records: list[dict] = []
    try:
        # Fail before any timing (e.g. speculative without a draft model); auto calibrates here, untimed.
        for mode in args.modes:
            engine.drafter(mode)
        meta = run_meta(args, engine, items, started)
        total = len(items) * len(configs) * args.repeats
        print_progress(f"{len(items)} prompts x {len(configs)} configs x {args.repeats} repeats; warming up")
        try:
            benchmark(engine, items, configs, make_settings, args.repeats, print_progress, records)
        except KeyboardInterrupt:
            if not records:
                raise
            # The runs done are what the user waited for: report them, marked as a part of the run.
            done = f"{len(records)} of {total} runs ({args.repeats} repeats asked)"
            meta["interrupted"] = f"stopped by Ctrl-C after {done}"
            # The settings say what the results hold: the repeats begun, the last maybe in part.
            meta["settings"]["repeats"] = records[-1]["repeat"] + 1
            print_progress(f"interrupted after {len(records)} of {total} runs; writing the report of those")
    finally:
        engine.close()
    report = build_report(meta, records)
    print_summary(report)
    files = save_report(report, out)
    print("wrote " + ", ".join(str(f) for f in files))
    return 130 if "interrupted" in meta else 0
