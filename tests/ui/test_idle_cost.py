"""What the app costs with nothing to do: it may not keep a core busy, since on a small machine that share is taken
from llama.cpp's threads while an answer streams, and from everything else the rest of the time."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from helpers import Server, process_cpu_s
from ui.conftest import _start


@pytest.fixture(scope="module")
def ready_app(tmp_path_factory, tiny_model) -> Iterator[Server]:
    """The app with SmolLM2 as target and draft, up once its model is ready (the app loads it in the background)."""
    home = tmp_path_factory.mktemp("specchat-idle-home")
    args = ["--target", str(tiny_model), "--draft", str(tiny_model), "--threads", "1"]
    yield from _start(home, args, ready="/health")


def test_an_idle_app_keeps_no_core_busy(ready_app):
    # Gradio's queue, as it comes on Linux, looks for work every millisecond: 0.047 of a core on a Zen 4 (app.py).
    time.sleep(1)  # the work of loading ends
    pid = ready_app.proc.pid
    before, start = process_cpu_s([pid]), time.monotonic()
    time.sleep(3)
    share = (process_cpu_s([pid]) - before) / (time.monotonic() - start)
    assert share < 0.02, f"the idle app kept {share:.3f} of a core busy"
