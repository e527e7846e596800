"""Helpers shared by test modules (conftest.py holds the fixtures)."""

from __future__ import annotations

import socket
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"  # screenshots to look at; git-ignored
CHROMIUM = Path("/usr/bin/chromium")  # Debian's: `playwright install` cannot download browsers here
# Flags that keep Chromium off the network it cannot reach and out of the sandbox root cannot use.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


# design.md's target batch costs r(n) for the Qwen2.5-Coder pair (two AMD EPYC cores, an AVX2 build), without its
# r(16): interpolate_r extends the line past r(9)
DESIGN_R = {2: 1.61, 3: 2.21, 4: 2.49, 5: 3.14, 9: 6.95}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
