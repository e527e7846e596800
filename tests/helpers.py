"""Helpers shared by test modules (conftest.py holds the fixtures)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

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


def process_cpu_s(pids: list[int]) -> float:
    """utime + stime of the processes, in seconds (threads included; a process gone meanwhile counts 0)."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat
    return total / os.sysconf("SC_CLK_TCK")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Server:
    """`python -m specchat COMMAND --port PORT ARGS` in a subprocess with a specchat home of its own, as users run it
    (`ui` or `serve`); its output goes to home/server.log."""

    def __init__(
        self,
        home: Path,
        command: list[str],
        args: list[str],
        env: dict[str, str],
        ready: str = "/",
        host: str | None = None,
    ):
        """ready: the path that answers 200 once the server is up (the page for ui, /health for serve); host: the
        address to serve on (--host; None: the command's default, 127.0.0.1, which a test checks)."""
        self.home = home
        self.port = free_port(host or "127.0.0.1")
        self.url = f"http://{host or '127.0.0.1'}:{self.port}/"
        self.ready_url = self.url + ready.lstrip("/")
        # The machine's own catalog and hub settings must not leak in; the test's own env decides them.
        inherited = {
            k: v for k, v in os.environ.items() if k not in ("SPECCHAT_CATALOG", "HF_ENDPOINT", "HF_HUB_OFFLINE")
        }
        env = {**inherited, "SPECCHAT_HOME": str(home), "PYTHONPATH": str(REPO / "app"), **env}
        self.log = home / "server.log"
        where = ["--host", host] if host else []
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "specchat", *command, *where, "--port", str(self.port), *args],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_up(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.ready_url, timeout=2):
                    return
            except OSError:  # not listening yet, or (HTTPError) not ready
                time.sleep(0.5)
        pytest.fail(f"the server did not answer on {self.ready_url} within {timeout} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def serving(
    home: Path,
    command: list[str],
    args: list[str],
    env: dict[str, str],
    ready: str = "/",
    timeout: float = 180,
    host: str | None = None,
) -> Iterator[Server]:
    """A fixture's body: the server, up (within timeout seconds), for as long as the fixture lasts."""
    server = Server(home, command, args, env, ready, host)
    try:
        server.wait_up(timeout)
        yield server
    finally:
        server.stop()
