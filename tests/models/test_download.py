"""Downloads against a fake hub on 127.0.0.1 serving a real GGUF file (SmolLM2 135M, 98 MB).

huggingface_hub itself is not mocked: it talks HTTP to the fake hub, which answers with the hub's own headers.
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from specchat.models import catalog as cat
from specchat.models import download as dl

from .fakehub import FakeHub
from .support import run_cli, subprocess_env, write_catalog

REPO = "test/SmolLM2-135M-Instruct-GGUF"
DRAFT_REPO = "test/SmolLM2-135M-Instruct-draft-GGUF"
MB = 1 << 20


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * MB):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture(scope="module")
def smollm_sha(tiny_model: Path) -> str:
    return sha256_of(tiny_model)


@pytest.fixture
def hub_catalog(tmp_path: Path, smollm: Path, smollm_sha: str, monkeypatch: pytest.MonkeyPatch) -> cat.Catalog:
    """A catalog of models on the fake hub: `smol` carries the sha256 in the catalog, `smol-draft` relies on the
    hub's LFS sha256, `gated-smol` is in a gated repo, `missing` names a file the repo does not have."""
    size = smollm.stat().st_size
    path = write_catalog(
        tmp_path / "catalog.toml",
        f"""
default_pair = "smol-pair"

[pairs."smol-pair"]
description = "the same tiny model as target and draft"
target = "smol"
draft = "smol-draft"

[models.smol]
repo = "{REPO}"
file = "{smollm.name}"
size = {size}
sha256 = "{smollm_sha}"
quantization = "Q4_1"

[models."smol-draft"]
repo = "{DRAFT_REPO}"
file = "{smollm.name}"
size = {size}

[models."gated-smol"]
repo = "test/gated-GGUF"
file = "{smollm.name}"
gated = true

[models.missing]
repo = "{REPO}"
file = "no-such-file.gguf"

[models.private]
repo = "test/private-or-missing-repo"
file = "{smollm.name}"
""",
    )
    monkeypatch.setenv("SPECCHAT_CATALOG", str(path))
    return cat.load_catalog()


def wait_until_part_reaches(part: Path, size: int, running: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60
    while not (part.is_file() and part.stat().st_size >= size):
        assert running(), f"the download ended before its part reached {size} bytes"
        assert time.monotonic() < deadline, f"the download's part never reached {size} bytes"
        time.sleep(0.05)


def assert_not_installed(model: cat.ModelSource) -> None:
    assert not model.path.exists()
    assert not model.installed
    with pytest.raises(cat.NotInstalledError, match="specchat models download"):
        cat.resolve_model(model.name)


def test_download_completes_is_verified_and_reports_progress(fake_hub: FakeHub, hub_catalog, smollm, smollm_sha):
    fake_hub.add(REPO, smollm)
    events: list[dl.DownloadProgress] = []

    path = dl.download_model("smol", endpoint=fake_hub.url, progress=events.append)

    model = hub_catalog.models["smol"]
    assert path == model.path and model.installed
    assert sha256_of(path) == smollm_sha
    assert cat.resolve_model("smol") == path
    assert not dl.partial_path(path).exists() and not path.with_name(path.name + ".partial.json").exists()
    done = [e.bytes_done for e in events if e.stage == "downloading"]
    assert done == sorted(done) and done[0] == 0 and done[-1] == model.size
    assert [e.stage for e in events][-2:] == ["verifying", "done"]
    assert any(e.speed > 0 and e.eta is not None for e in events if e.stage == "downloading")
    assert events[-1].fraction == 1.0
    # One transfer of the whole file, and no request for it the second time: it is installed.
    assert [g.bytes_sent for g in fake_hub.cdn_gets()] == [model.size]
    assert dl.download_model("smol", endpoint=fake_hub.url) == path
    assert len(fake_hub.requests) == 2  # the HEAD and the GET of the first download only


def test_dropped_connection_resumes_where_it_stopped(fake_hub: FakeHub, hub_catalog, smollm, smollm_sha):
    served = fake_hub.add(REPO, smollm, cut_after=35 * MB)

    path = dl.download_model("smol", endpoint=fake_hub.url)

    assert sha256_of(path) == smollm_sha
    first, second = fake_hub.cdn_gets()
    assert first.range is None and first.bytes_sent == 35 * MB
    resumed_at = int(second.range.removeprefix("bytes=").removesuffix("-"))
    assert 0 < resumed_at <= 35 * MB
    assert second.bytes_sent == served.size - resumed_at < served.size


def test_killed_process_resumes_where_it_stopped(fake_hub: FakeHub, hub_catalog, smollm, smollm_sha, capsys):
    served = fake_hub.add(REPO, smollm, stall_after=35 * MB)
    model = hub_catalog.models["smol"]
    part = dl.partial_path(model.path)
    script = (
        "import sys; from specchat.models.download import download_model; download_model('smol', endpoint=sys.argv[1])"
    )
    child = subprocess.Popen([sys.executable, "-c", script, fake_hub.url], env=subprocess_env())
    try:
        wait_until_part_reaches(part, 30 * MB, running=lambda: child.poll() is None)
    finally:
        child.kill()
        child.wait()
        fake_hub.release.set()
    kept = part.stat().st_size
    assert kept >= 30 * MB

    # A killed download never looks installed.
    assert_not_installed(model)
    assert run_cli("list", "--json") == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)["models"]}
    assert listed["smol"]["installed"] is False and listed["smol"]["status"].startswith("partly downloaded")

    path = dl.download_model("smol", endpoint=fake_hub.url)

    assert sha256_of(path) == smollm_sha
    resumed = fake_hub.cdn_gets()[-1]
    assert resumed.range == f"bytes={kept}-"
    assert resumed.bytes_sent == served.size - kept < served.size


def test_cancel_keeps_the_part_and_a_second_run_resumes(fake_hub: FakeHub, hub_catalog, smollm, smollm_sha):
    # The first transfer stalls at 35 MB, so the cancel lands mid-file however fast this machine moves bytes (a cancel
    # from the progress callback came after the last byte once, on CI). It comes from another thread, as the UI's does.
    served = fake_hub.add(REPO, smollm, stall_after=35 * MB)
    model = hub_catalog.models["smol"]
    part = dl.partial_path(model.path)
    cancel = threading.Event()
    outcome: list[object] = []

    def download() -> None:
        try:
            outcome.append(dl.download_model("smol", endpoint=fake_hub.url, cancel=cancel))
        except Exception as e:
            outcome.append(e)

    worker = threading.Thread(target=download, daemon=True)
    worker.start()
    try:
        wait_until_part_reaches(part, 30 * MB, running=worker.is_alive)
        cancel.set()
    finally:
        fake_hub.release.set()
        worker.join(timeout=60)
    assert not worker.is_alive(), "the cancelled download did not stop"
    (error,) = outcome
    assert isinstance(error, dl.DownloadCancelled) and "resume" in str(error)
    kept = part.stat().st_size
    assert 30 * MB <= kept < served.size
    assert_not_installed(model)

    assert sha256_of(dl.download_model("smol", endpoint=fake_hub.url)) == smollm_sha
    assert fake_hub.cdn_gets()[-1].range == f"bytes={kept}-"


def test_corrupted_download_is_refused_by_the_hub_sha256_and_leaves_nothing_installed(
    fake_hub: FakeHub, hub_catalog, smollm
):
    fake_hub.add(DRAFT_REPO, smollm, corrupt=True)  # smol-draft has no sha256 in the catalog: the hub's is used

    with pytest.raises(dl.ChecksumMismatchError, match="failed its sha256 check"):
        dl.download_model("smol-draft", endpoint=fake_hub.url)

    model = hub_catalog.models["smol-draft"]
    assert_not_installed(model)
    assert not dl.partial_path(model.path).exists()
    assert [p.name for p in model.path.parent.iterdir() if not p.name.endswith(".lock")] == []


def test_a_hub_that_promised_more_bytes_than_it_has_leaves_no_download_stuck(fake_hub: FakeHub, hub_catalog, smollm):
    served = fake_hub.add(REPO, smollm, reported_size=smollm.stat().st_size + 1000)
    model = hub_catalog.models["smol"]

    with pytest.raises(dl.HubUnreachableError, match="ended early"):
        dl.download_model("smol", endpoint=fake_hub.url)
    # The server has no byte past the part (416): the part is all it has to give, and its sha256 decides.
    assert dl.download_model("smol", endpoint=fake_hub.url) == model.path
    assert sha256_of(model.path) == served.sha256
    assert [g.status for g in fake_hub.cdn_gets()] == [200, 416]


def test_a_part_the_hub_cannot_add_to_that_fails_its_sha256_is_deleted(fake_hub: FakeHub, hub_catalog, smollm):
    fake_hub.add(REPO, smollm, reported_size=smollm.stat().st_size + 1000, corrupt=True)
    model = hub_catalog.models["smol"]

    with pytest.raises(dl.HubUnreachableError, match="ended early"):
        dl.download_model("smol", endpoint=fake_hub.url)
    with pytest.raises(dl.ChecksumMismatchError, match="failed its sha256 check .* and was deleted"):
        dl.download_model("smol", endpoint=fake_hub.url)
    assert_not_installed(model)
    assert [p.name for p in model.path.parent.iterdir() if not p.name.endswith(".lock")] == []


def test_catalog_sha256_that_differs_from_the_hub_stops_before_downloading(
    fake_hub: FakeHub, tmp_path: Path, smollm, monkeypatch
):
    fake_hub.add(REPO, smollm)
    path = write_catalog(
        tmp_path / "wrong.toml",
        f"""default_pair = "p"
[pairs.p]
target = "m"
draft = "m"
[models.m]
repo = "{REPO}"
file = "{smollm.name}"
sha256 = "{"0" * 64}"
""",
    )
    with pytest.raises(dl.ChecksumMismatchError, match="update its sha256"):
        dl.download_model("m", catalog=cat.load_catalog(path), endpoint=fake_hub.url)
    assert fake_hub.cdn_gets() == []


def test_gated_repo_without_token_says_what_to_do(fake_hub: FakeHub, hub_catalog, smollm):
    fake_hub.add("test/gated-GGUF", smollm)
    fake_hub.gated.add("test/gated-GGUF")

    with pytest.raises(dl.HubAccessError) as err:
        dl.download_model("gated-smol", endpoint=fake_hub.url)

    assert "gated" in str(err.value) and "HF_TOKEN" in str(err.value) and "\n" not in str(err.value)
    assert [r.status for r in fake_hub.requests] == [401]
    assert_not_installed(hub_catalog.models["gated-smol"])


def test_gated_repo_with_a_token_without_access_gets_a_403_message(fake_hub: FakeHub, hub_catalog, smollm):
    fake_hub.add("test/gated-GGUF", smollm)
    fake_hub.gated.add("test/gated-GGUF")

    with pytest.raises(dl.HubAccessError, match="accept its license"):
        dl.download_model("gated-smol", endpoint=fake_hub.url, token="hf_not_the_right_one")
    assert [r.status for r in fake_hub.requests] == [403]


def test_gated_repo_with_a_token_downloads_and_the_token_stays_on_the_hub(
    fake_hub: FakeHub, hub_catalog, smollm, smollm_sha, monkeypatch, capsys
):
    fake_hub.add("test/gated-GGUF", smollm)
    fake_hub.gated.add("test/gated-GGUF")
    monkeypatch.setenv("HF_TOKEN", fake_hub.token)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)

    assert run_cli("download", "gated-smol") == 0

    assert sha256_of(hub_catalog.models["gated-smol"].path) == smollm_sha
    hub_head, cdn_get = fake_hub.requests
    assert hub_head.authorization == f"Bearer {fake_hub.token}"
    assert cdn_get.server == "cdn" and cdn_get.authorization is None  # never sent to the CDN host
    out = capsys.readouterr()
    assert fake_hub.token not in out.out + out.err
    assert "%" in out.err and "left" in out.err and "ready" in out.out


def test_private_or_unknown_repo_401(fake_hub: FakeHub, hub_catalog):
    with pytest.raises(dl.HubAccessError, match="not found or is private"):
        dl.download_model("private", endpoint=fake_hub.url)
    assert [r.status for r in fake_hub.requests] == [401]


def test_missing_file_404(fake_hub: FakeHub, hub_catalog, smollm):
    fake_hub.add(REPO, smollm)
    with pytest.raises(dl.HubAccessError, match="has no file 'no-such-file.gguf'"):
        dl.download_model("missing", endpoint=fake_hub.url)
    assert [r.status for r in fake_hub.requests] == [404]


def test_no_network_says_so(hub_catalog):
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(dl.HubUnreachableError, match="cannot reach the Hugging Face hub"):
        dl.download_model("smol", endpoint=f"http://127.0.0.1:{port}")


def test_hf_hub_offline_stops_before_any_request(fake_hub: FakeHub, hub_catalog, smollm, monkeypatch):
    fake_hub.add(REPO, smollm)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(dl.HubUnreachableError, match="HF_HUB_OFFLINE"):
        dl.download_model("smol", endpoint=fake_hub.url)
    assert fake_hub.requests == []


def test_free_disk_space_is_checked_first(fake_hub: FakeHub, hub_catalog, smollm):
    fake_hub.add(DRAFT_REPO, smollm, reported_size=10**18)
    with pytest.raises(dl.NotEnoughSpaceError, match="not enough free disk space"):
        dl.download_model("smol-draft", endpoint=fake_hub.url)
    assert fake_hub.cdn_gets() == []
    assert not dl.partial_path(hub_catalog.models["smol-draft"].path).exists()


def test_pair_download_reports_overall_progress_and_installs_the_pair(
    fake_hub: FakeHub, hub_catalog, smollm, smollm_sha
):
    fake_hub.add(REPO, smollm)
    fake_hub.add(DRAFT_REPO, smollm)
    assert cat.installed_default_pair() is None
    with pytest.raises(cat.NotInstalledError, match="specchat models download smol-pair"):
        cat.resolve_pair("smol-pair")
    events: list[dl.DownloadProgress] = []

    target, draft = dl.download_pair("smol-pair", endpoint=fake_hub.url, progress=events.append)

    assert (target, draft) == cat.resolve_pair("smol-pair") == cat.installed_default_pair()
    assert sha256_of(target) == sha256_of(draft) == smollm_sha
    overall = [e.overall_done for e in events]
    assert overall == sorted(overall)
    assert {e.overall_total for e in events} == {2 * smollm.stat().st_size}
    assert events[-1].overall_done == events[-1].overall_total
    assert {e.file_name for e in events} == {smollm.name}


def test_a_models_folder_that_cannot_be_made_stops_before_downloading(
    fake_hub: FakeHub, hub_catalog, smollm, monkeypatch, tmp_path
):
    fake_hub.add(REPO, smollm)
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    monkeypatch.setenv("SPECCHAT_HOME", str(home))
    with pytest.raises(dl.DownloadError, match="cannot make the folder .*home-is-a-file"):
        dl.download_model("smol", endpoint=fake_hub.url)
    assert fake_hub.cdn_gets() == []


def test_cli_errors_are_one_line_without_traceback(fake_hub: FakeHub, hub_catalog, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    assert run_cli("download", "private") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: repository test/private-or-missing-repo was not found")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_downloads_a_pair_and_removes_it_with_its_partial_files(
    fake_hub: FakeHub, hub_catalog, smollm, monkeypatch, capsys
):
    fake_hub.add(REPO, smollm)
    fake_hub.add(DRAFT_REPO, smollm)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(dl.DownloadCancelled):
        dl.download_model("smol", cancel=cancel)
    part = dl.partial_path(hub_catalog.models["smol"].path)
    assert part.exists()
    assert run_cli("remove", "smol") == 0
    assert f"deleted {part}" in capsys.readouterr().out and not part.exists()

    assert run_cli("download", "smol-pair") == 0
    assert "pair smol-pair is ready" in capsys.readouterr().out
    assert cat.installed_default_pair() == cat.resolve_pair("smol-pair")

    assert run_cli("remove", "smol-pair") == 0
    assert capsys.readouterr().out.count("deleted") >= 2
    for model in hub_catalog.models.values():
        assert not model.path.exists() and not dl.partial_path(model.path).exists()
    assert cat.installed_default_pair() is None


HOLD_AND_WAIT = """
import sys
from pathlib import Path
from specchat.models.in_use import LoadedFiles
held = LoadedFiles()  # kept in a name: FileLock lets its lock go when collected
held.hold([Path(sys.argv[1])])
print("held", flush=True)
sys.stdin.read()
"""


def test_a_model_another_process_has_loaded_is_not_removed_until_that_process_is_gone(
    fake_hub: FakeHub, hub_catalog, smollm, monkeypatch, capsys
):
    fake_hub.add(REPO, smollm)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    installed = dl.download_model("smol")
    # The record a running app keeps, from a process of its own, as the app's is to a terminal's removal.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_AND_WAIT, str(installed)],
        env=subprocess_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        assert run_cli("remove", "smol") == 1
        assert capsys.readouterr().err == (
            f"error: smol is loaded by the specchat running as process {holder.pid}; load another pair there, or"
            " quit it, before removing it\n"
        )
        assert installed.is_file()
    finally:
        holder.kill()  # as a crash ends it: its record stays behind, its lock goes with it
        holder.wait()
    records = cat.cache_dir() / "loaded"
    assert sorted(p.suffix for p in records.iterdir()) == [".json", ".lock"]
    assert run_cli("remove", "smol") == 0
    assert f"deleted {installed}" in capsys.readouterr().out and not installed.exists()
    assert list(records.iterdir()) == []  # the dead process's record was swept, not trusted


def test_a_file_that_cannot_be_deleted_is_named_in_one_line(hub_catalog, capsys):
    # A folder where the partial download would be: unlink fails on it even for root, as a read-only folder would.
    part = dl.partial_path(hub_catalog.models["smol"].path)
    part.mkdir(parents=True)
    assert run_cli("remove", "smol") == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot delete {part}: ") and err.count("\n") == 1, err  # the OS's reason


def test_removing_a_model_an_installed_pair_uses_says_the_pair_lacks_it_now(
    fake_hub: FakeHub, hub_catalog, smollm, monkeypatch, capsys
):
    fake_hub.add(REPO, smollm)
    fake_hub.add(DRAFT_REPO, smollm)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    assert run_cli("download", "smol-pair") == 0
    capsys.readouterr()
    assert run_cli("remove", "smol-draft") == 0
    out = capsys.readouterr().out
    assert out.endswith(
        "the pair smol-pair lacks smol-draft now: `specchat models download smol-pair` fetches it again\n"
    ), out
    assert run_cli("remove", "smol-draft") == 0  # nothing left to delete: no pair is said to lack it again
    assert "lacks" not in capsys.readouterr().out
