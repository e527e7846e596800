"""The chat app as users get it: `python -m specchat ui` in a subprocess, driven by Debian's Chromium.

SmolLM2-135M drafts for itself (fast, and greedy decoding accepts its drafts), in a specchat home of its own.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers import ARTIFACTS as ROOT_ARTIFACTS
from helpers import Server, serving
from models.fakehub import COMMIT, FakeHub, Served  # tests/ is on sys.path: it holds the root conftest.py

ARTIFACTS = ROOT_ARTIFACTS / "ui"
# Settings the app starts with: greedy speculative decoding, short answers unless a test asks for more.
START_SETTINGS = {"mode": "speculative", "k": 4, "temperature": 0.0, "seed": 0, "max_tokens": 160, "overlay": True}


def _start(
    home: Path, args: list[str], env: dict[str, str] | None = None, host: str | None = None, ready: str = "/"
) -> Iterator[Server]:
    # Offline unless a test brings its own hub: nothing may leave this machine.
    yield from serving(home, ["ui", "--no-browser"], args, env or {"HF_HUB_OFFLINE": "1"}, ready, host=host)


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory, tiny_model) -> Iterator[Server]:
    """The app with SmolLM2 as target and draft, from the command line."""
    home = tmp_path_factory.mktemp("specchat-home")
    (home / "config").mkdir()
    (home / "config" / "ui_settings.json").write_text(json.dumps(START_SETTINGS))
    # One thread: the machine's two cores are shared, and llama.cpp's threads stall when they must wait for a core.
    yield from _start(home, ["--target", str(tiny_model), "--draft", str(tiny_model), "--threads", "1"])


@pytest.fixture
def loading_server(tmp_path, tiny_model) -> Iterator[Server]:
    """The chat_server's app in a new home, up while its model still loads: the load copies the draft for the CPU and
    times the models (tens of seconds here), and the page answers from the start."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "ui_settings.json").write_text(json.dumps(START_SETTINGS))
    yield from _start(tmp_path, ["--target", str(tiny_model), "--draft", str(tiny_model), "--threads", "1"])


@pytest.fixture
def start_app(tmp_path) -> Iterator[Callable[..., Server]]:
    """start_app(host, *args): the app with no model, served on host with args, up until the test ends."""
    running: list[Iterator[Server]] = []

    def start(host: str, *args: str) -> Server:
        home = tmp_path / f"home-{len(running)}"
        home.mkdir()
        running.append(_start(home, list(args), host=host))
        return next(running[-1])

    yield start
    for serving_one in running:
        serving_one.close()  # its finally stops the server


@pytest.fixture(scope="module")
def empty_server(tmp_path_factory) -> Iterator[Server]:
    """The app on a machine where no model is installed yet."""
    yield from _start(tmp_path_factory.mktemp("specchat-empty-home"), [])


@pytest.fixture
def new_page(browser):
    """Opens pages; afterwards, fails the test if any page asked for anything but its own server, or if its
    Content-Security-Policy refused anything (what the app itself does must work under it)."""
    contexts, requests, refused = [], [], []
    origins = {"data:", "blob:"}

    def open_page(url: str, **viewport):
        context = browser.new_context(viewport=viewport or {"width": 1400, "height": 1000})
        contexts.append(context)
        page = context.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
        origins.add("/".join(url.split("/", 3)[:3]) + "/")  # scheme://host:port/
        page.goto(url)
        return page

    yield open_page
    for context in contexts:
        context.close()
    remote = [u for u in requests if not u.startswith(tuple(origins))]
    assert not remote, f"the app made requests off its own server: {remote[:5]}"
    assert not refused, f"the page's Content-Security-Policy refused: {refused[:5]}"


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def smol_catalog(home: Path, model: Path, size: int, sha256: str) -> Path:
    """A catalog whose default pair, smol-pair, is SmolLM2 drafting for itself, the file model from test/smollm2."""
    catalog = home / "catalog.toml"
    catalog.write_text(
        f"""default_pair = "smol-pair"

[pairs.smol-pair]
description = "SmolLM2 135M drafting for itself"
target = "smol"
draft = "smol"
context_length = 2048
draft_length = 4

[models.smol]
repo = "test/smollm2"
file = "{model.name}"
revision = "{COMMIT}"
size = {size}
sha256 = "{sha256}"
"""
    )
    return catalog


@pytest.fixture(scope="module")
def hub_server(tmp_path_factory, tiny_model) -> Iterator[tuple[Server, FakeHub, Served]]:
    """The app with nothing installed, smol_catalog and a local fake hub serving it; the first transfer stalls after
    8 MB until the test releases it."""
    hub = FakeHub().start()
    served = hub.add("test/smollm2", tiny_model, stall_after=8 << 20)
    home = tmp_path_factory.mktemp("specchat-hub-home")
    catalog = smol_catalog(home, tiny_model, served.size, served.sha256)
    env = {"SPECCHAT_CATALOG": str(catalog), "HF_ENDPOINT": hub.url}
    try:
        for server in _start(home, ["--threads", "1"], env):
            yield server, hub, served
    finally:
        hub.stop()


@pytest.fixture
def installed_server(tmp_path, tiny_model) -> Iterator[tuple[Server, Path]]:
    """The app with smol_catalog's pair installed, as a download leaves it, and loading it: (the server, the pair's
    installed file)."""
    data = tiny_model.read_bytes()
    catalog = smol_catalog(tmp_path, tiny_model, len(data), hashlib.sha256(data).hexdigest())
    installed = tmp_path / "models" / "test--smollm2" / tiny_model.name  # ModelSource.path under SPECCHAT_HOME
    installed.parent.mkdir(parents=True)
    installed.write_bytes(data)
    for server in _start(tmp_path, ["--threads", "1"], {"SPECCHAT_CATALOG": str(catalog), "HF_HUB_OFFLINE": "1"}):
        yield server, installed
