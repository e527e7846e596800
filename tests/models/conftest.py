"""Fixtures for the catalog, download and compatibility tests: an isolated specchat home, the real test GGUF models,
a fake hub on 127.0.0.1 and a way to run `specchat models ...` through argparse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .fakehub import FakeHub
from .support import FETCH_SCRIPT, SMOLLM, need


@pytest.fixture(autouse=True)
def specchat_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own data/config folders and no hub settings or token from the machine it runs on."""
    home = tmp_path / "specchat-home"
    monkeypatch.setenv("SPECCHAT_HOME", str(home))
    for var in ("SPECCHAT_CATALOG", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture(scope="session")
def gguf_models() -> dict[str, Path]:
    """The real test models (name -> path), assembled by the shared fetch script (it honours SPEC_TEST_MODELS)."""
    if not FETCH_SCRIPT.is_file():
        pytest.skip(f"the test-model fetch script is absent ({FETCH_SCRIPT}), so no real GGUF models are available")
    run = subprocess.run([sys.executable, str(FETCH_SCRIPT)], capture_output=True, text=True, timeout=1800)
    models = {}
    for line in run.stdout.splitlines():
        name, _, path = line.partition("\t")
        if path:
            models[name] = Path(path)
    if not models:
        pytest.skip(f"the real test models could not be fetched here: {run.stderr.strip()[-300:]}")
    return models


@pytest.fixture
def smollm(gguf_models: dict[str, Path]) -> Path:
    return need(gguf_models, SMOLLM)[0]


@pytest.fixture
def fake_hub() -> FakeHub:
    hub = FakeHub().start()
    yield hub
    hub.stop()
