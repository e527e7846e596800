"""Shared fixtures: the real GGUF test models, fetched by ../shared/models/fetch_test_models.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import CHROMIUM, CHROMIUM_ARGS

REPO = Path(__file__).resolve().parents[1]
FETCH = REPO.parent / "shared" / "models" / "fetch_test_models.py"
TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
TINY = "smollm2-135m-instruct-q4_1.gguf"


@pytest.fixture(scope="session")
def model_paths() -> dict[str, Path]:
    """name -> path of every test model; skips (saying why) only where the models cannot be had."""
    folder = os.environ.get("SPEC_TEST_MODELS")
    if folder and all((Path(folder) / n).is_file() for n in (TARGET, DRAFT, TINY)):
        return {n: Path(folder) / n for n in (TARGET, DRAFT, TINY)}
    if not FETCH.is_file():
        pytest.skip(f"real test models absent: {FETCH} (the shared models script) is not beside this checkout")
    run = subprocess.run([sys.executable, str(FETCH)], capture_output=True, text=True)
    paths = dict(line.split("\t", 1) for line in run.stdout.splitlines() if "\t" in line)
    if run.returncode != 0 or not all(n in paths for n in (TARGET, DRAFT, TINY)):
        pytest.fail(f"fetch_test_models.py failed:\n{run.stdout}{run.stderr}")
    return {n: Path(p) for n, p in paths.items()}


@pytest.fixture(scope="session")
def qwen_pair(model_paths) -> tuple[Path, Path]:
    return model_paths[TARGET], model_paths[DRAFT]


@pytest.fixture(scope="session")
def tiny_model(model_paths) -> Path:
    return model_paths[TINY]



@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium through Playwright; skips (saying why) only where that browser is not installed."""
    if not CHROMIUM.is_file():
        pytest.skip(f"Debian's Chromium is absent at {CHROMIUM} (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()
