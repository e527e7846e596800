"""Fixtures for the catalog, download and compatibility tests: an isolated specchat home, the real test GGUF models,
a fake hub on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from .fakehub import FakeHub


@pytest.fixture(autouse=True)
def specchat_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own data/config folders and no hub settings or token from the machine it runs on."""
    home = tmp_path / "specchat-home"
    monkeypatch.setenv("SPECCHAT_HOME", str(home))
    for var in ("SPECCHAT_CATALOG", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def smollm(tiny_model: Path) -> Path:
    return tiny_model


@pytest.fixture
def fake_hub() -> FakeHub:
    hub = FakeHub().start()
    yield hub
    hub.stop()
