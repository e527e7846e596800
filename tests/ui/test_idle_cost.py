"""What the app costs with nothing to do: it may not keep a core busy, since on a small machine that share is taken
from llama.cpp's threads while an answer streams, and from everything else the rest of the time."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def wait_ready(server, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(server.url + "health", timeout=5):
                return
        except (urllib.error.HTTPError, OSError):
            if time.monotonic() > deadline:
                pytest.fail(f"the app's model was not ready within {timeout} s")
            time.sleep(0.5)


def test_an_idle_app_keeps_no_core_busy(chat_server):
    # Gradio's queue, as it comes on Linux, looks for work every millisecond: 0.047 of a core on a Zen 4 (app.py).
    wait_ready(chat_server)
    time.sleep(1)  # the last request's work ends
    pid = chat_server.proc.pid
    before, start = cpu_s(pid), time.monotonic()
    time.sleep(3)
    share = (cpu_s(pid) - before) / (time.monotonic() - start)
    assert share < 0.02, f"the idle app kept {share:.3f} of a core busy"
