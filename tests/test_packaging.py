"""`pip install .` must ship what the installed app reads at run time: the catalog, the suite, the stylesheet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHIPPED = {
    "specchat/models.toml": "models.toml",
    "specchat/benchmarks/suite.jsonl": "benchmarks/suite.jsonl",
    "specchat/assets/overlay.css": "assets/overlay.css",
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from this checkout by the build backend, unpacked into a folder of its own (what installing a
    pure-Python wheel does; pip's own start-up would double this test's time)."""
    pytest.importorskip("hatchling", reason="hatchling (the build backend, in the test extras) is not installed")
    tmp = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", tmp], cwd=REPO, capture_output=True
    )
    assert build.returncode == 0, build.stderr.decode()[-2000:]
    wheel = next(tmp.glob("specchat-*.whl"))
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as z:
        for member, source in SHIPPED.items():
            assert z.read(member) == (REPO / source).read_bytes(), member
        z.extractall(site)
    return site


def test_the_installed_package_finds_its_data_outside_the_checkout(installed, tmp_path):
    probe = (
        "import json, specchat\n"
        "from specchat.models.catalog import load_catalog\n"
        "from specchat.bench.run import builtin_suite_path\n"
        "from specchat.ui.overlay import stylesheet\n"
        "c = load_catalog()\n"
        "print(json.dumps([specchat.__file__, c.default, len(c.pairs), str(builtin_suite_path()), len(stylesheet())]))"
    )
    env = {**os.environ, "PYTHONPATH": str(installed), "SPECCHAT_HOME": str(tmp_path / "home")}
    env.pop("SPECCHAT_CATALOG", None)
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    module, default, n_pairs, suite, css = json.loads(run.stdout)
    assert Path(module).is_relative_to(installed)  # not the checkout's app/
    assert default == "qwen2.5-1.5b" and n_pairs >= 6
    assert Path(suite).is_relative_to(installed) and css > 0
