"""Helpers shared by the catalog, download and compatibility tests."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from specchat.cli import models as models_cli

REPO_ROOT = Path(__file__).resolve().parents[2]


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
