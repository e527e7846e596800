"""Helpers shared by the catalog, download and compatibility tests."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from specchat.cli import models as models_cli

REPO_ROOT = Path(__file__).resolve().parents[2]
FETCH_SCRIPT = REPO_ROOT.parent / "shared" / "models" / "fetch_test_models.py"
SMOLLM = "smollm2-135m-instruct-q4_1.gguf"
QWEN_TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def need(models: dict[str, Path], *names: str) -> list[Path]:
    missing = [n for n in names if n not in models]
    if missing:
        pytest.skip(f"real test model(s) {', '.join(missing)} could not be fetched on this machine")
    return [models[n] for n in names]


def run_cli(*argv: str) -> int:
    """`specchat models ...` through the same argparse wiring the real CLI uses."""
    parser = argparse.ArgumentParser(prog="specchat")
    models_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["models", *argv])
    return args.func(args)


def write_catalog(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "app"), env.get("PYTHONPATH")]))
    return env
