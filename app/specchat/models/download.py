"""Downloads of catalog models from the Hugging Face hub, with progress, cancellation, resume and sha256 checks.

The transfer goes through huggingface_hub (its metadata HEAD call, auth headers, error types and `http_get` with
its in-process retries), but into specchat's own partial file: huggingface_hub 2.x deletes its temporary file when a
download fails, so a killed process or a lost connection would start from zero again. Here a partial download stays
as `<file>.partial` next to a `<file>.partial.json` that records what it is a part of, and the next attempt asks the
server for the remaining bytes only. Only a file whose sha256 matched is moved to its final name, so a file at a
model's path is always a complete, verified download.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import httpx2
from filelock import FileLock, Timeout
from huggingface_hub import constants as hf_constants
from huggingface_hub import get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import http_get
from huggingface_hub.utils import build_hf_headers
from huggingface_hub.utils.tqdm import silent_tqdm

from specchat.errors import Remedies, SpecchatError
from specchat.models.catalog import (
    Catalog,
    ModelSource,
    Pair,
    UnknownNameError,
    installed_file,
    load_catalog,
    local_models,
    remove_local_model,
)
from specchat.models.in_use import held_elsewhere

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# Progress callbacks at most this often (plus the first and the last), so a UI is not flooded.
_REPORT_INTERVAL_S = 0.2
_HASH_CHUNK = 4 << 20
_TRUE = {"1", "ON", "YES", "TRUE"}


class DownloadError(SpecchatError):
    pass


class DownloadCancelled(DownloadError):
    pass


class ChecksumMismatchError(DownloadError):
    pass


class NotEnoughSpaceError(DownloadError):
    pass


class HubUnreachableError(DownloadError):
    pass


class HubAccessError(DownloadError):
    """The hub answered but will not give the file: gated, private, missing, forbidden."""


class ModelInUseError(SpecchatError):
    """A removal refused: it would delete a file of the loaded model."""


@dataclass(frozen=True)
class DownloadProgress:
    """One progress report. `overall_*` cover every file of a pair download; for one file they equal the file's."""

    file_name: str
    stage: str  # "downloading", then "verifying" (sha256 of the whole file), then "done"
    bytes_done: int
    total: int | None
    speed: float  # bytes per second over this attempt (resumed bytes not counted)
    eta: float | None  # seconds left at that speed
    overall_done: int
    overall_total: int | None

    @property
    def fraction(self) -> float | None:
        return self.overall_done / self.overall_total if self.overall_total else None


ProgressCallback = Callable[[DownloadProgress], None]


def partial_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".partial")


def _state_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".partial.json")


def _lock_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".lock")


def _offline() -> bool:
    # huggingface_hub reads HF_HUB_OFFLINE once at import; the environment is read again here so a value set later
    # (by a test, or a UI setting) still stops the download before any request.
    return hf_constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in _TRUE


def _endpoint(endpoint: str | None) -> str | None:
    # huggingface_hub also reads HF_ENDPOINT only at import; passing it on each call honours a later setting.
    chosen = endpoint or os.environ.get("HF_ENDPOINT")
    return chosen.rstrip("/") if chosen else None


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


class _CountingFile:
    """The partial file as `http_get` sees it: each chunk is written through, counted, reported, checked for cancel."""

    def __init__(self, f: BinaryIO, report: Callable[[int, int], None], cancel: threading.Event | None, name: str):
        self._f, self._report, self._cancel, self._name = f, report, cancel, name
        self.start = self.done = f.tell()

    def write(self, chunk: bytes) -> int:
        if self._cancel is not None and self._cancel.is_set():
            raise DownloadCancelled(f"download of {self._name} cancelled; run it again to resume where it stopped")
        n = self._f.write(chunk)
        # Flushed per chunk so that a killed process leaves on disk every byte it counted: the resume starts there.
        self._f.flush()
        self.done += n
        self._report(self.done, self.done - self.start)
        return n

    def tell(self) -> int:
        return self._f.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._f.seek(offset, whence)

    def truncate(self, size: int | None = None) -> int:
        # http_get truncates when a server ignores the Range header and sends the whole file again.
        out = self._f.truncate(size)
        self.start = self.done = self._f.tell()
        return out


class _Reporter:
    def __init__(self, name: str, total: int | None, progress: ProgressCallback | None):
        self.name, self.total, self.progress = name, total, progress
        self.t0 = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, this_attempt: int, stage: str = "downloading", force: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if not force and now - self.last < _REPORT_INTERVAL_S:
            return
        self.last = now
        speed = this_attempt / max(now - self.t0, 1e-6)
        eta = (self.total - done) / speed if self.total is not None and speed > 0 else None
        self.progress(DownloadProgress(self.name, stage, done, self.total, speed, eta, done, self.total))


def _hub_error(e: Exception, repo: str, filename: str, revision: str, endpoint: str | None) -> DownloadError:
    """One sentence the user can act on, for whatever huggingface_hub raised. Never includes a token."""
    page = f"{endpoint or hf_constants.ENDPOINT}/{repo}"
    if isinstance(e, OfflineModeIsEnabled):
        return HubUnreachableError(_offline_message(filename))
    if isinstance(e, GatedRepoError):
        return HubAccessError(
            f"{repo} is a gated repository: accept its license at {page} and log in (set HF_TOKEN or run"
            " `hf auth login`) with an account that has access, then try again"
        )
    if isinstance(e, RepositoryNotFoundError):
        return HubAccessError(
            f"repository {repo} was not found or is private: check the repo id in models.toml, or set HF_TOKEN"
            " (or run `hf auth login`) if it is private and you have access"
        )
    if isinstance(e, RevisionNotFoundError):
        return HubAccessError(f"{repo} has no revision {revision!r}: fix 'revision' for it in models.toml")
    if isinstance(e, RemoteEntryNotFoundError):
        return HubAccessError(
            f"{repo} has no file {filename!r} at revision {revision!r}: fix 'file' for it in models.toml"
        )
    if isinstance(e, HfHubHTTPError):
        status = _status(e)
        if status == 401:
            return HubAccessError(
                f"the hub refused the Hugging Face token for {repo}: set a valid HF_TOKEN or run `hf auth login`"
            )
        if status == 403:
            return HubAccessError(
                f"access to {repo} is forbidden for this account: accept its terms at {page} or use a token with"
                " read access, then try again"
            )
        return HubUnreachableError(
            f"the hub answered HTTP {status} for {repo}/{filename}: try again later, it may be a temporary problem"
        )
    host = urlsplit(endpoint or hf_constants.ENDPOINT).netloc
    return HubUnreachableError(
        lambda say: (
            f"cannot reach the Hugging Face hub ({host}) to download {filename}: check your internet"
            f" connection and try again, or register a GGUF file you already have {say.add_file(None)}"
        )
    )


def _status(e: Exception) -> int | None:
    """The HTTP status the hub answered with, if it answered."""
    response = e.response if isinstance(e, HfHubHTTPError) else None
    return response.status_code if response is not None else None


def _offline_message(filename: str) -> Callable[[Remedies], str]:
    return lambda say: (
        f"HF_HUB_OFFLINE is set, so {filename} cannot be downloaded: unset HF_HUB_OFFLINE to download it,"
        f" or register a GGUF file you already have {say.add_file(None)}"
    )


_HUB_ERRORS = (HfHubHTTPError, OfflineModeIsEnabled, httpx2.HTTPError)


def _read_state(dest: Path) -> dict | None:
    try:
        return json.loads(_state_path(dest).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _sha256_of(path: Path, cancel: threading.Event | None, name: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled(f"download of {name} cancelled; run it again to resume where it stopped")
            h.update(chunk)
    return h.hexdigest()


def download_file(
    repo: str,
    filename: str,
    dest: Path,
    *,
    revision: str = "main",
    sha256: str | None = None,
    size: int | None = None,
    token: str | bool | None = None,
    endpoint: str | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Fetch `repo`/`filename` at `revision` to `dest`, resuming a partial download, and verify it.

    The expected sha256 is `sha256` (the catalog's) or else the hub's own LFS sha256. `token`: None uses HF_TOKEN or
    the stored login, False sends none. `cancel` is checked between chunks (and while hashing): setting it stops the
    download with DownloadCancelled and keeps the part for a later resume; a connection that has stalled completely
    is only noticed at huggingface_hub's read timeout (HF_HUB_DOWNLOAD_TIMEOUT). Raises a DownloadError subclass with
    a message for the user.
    """
    if dest.is_file():
        return dest
    if _offline():
        raise HubUnreachableError(_offline_message(filename))
    endpoint = _endpoint(endpoint)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file where the models folder should be, a read-only disk
        raise DownloadError(f"cannot make the folder {dest.parent} ({e.strerror or e}); check it") from None
    try:
        with FileLock(_lock_path(dest), timeout=0):
            return _download_locked(repo, filename, dest, revision, sha256, size, token, endpoint, progress, cancel)
    except Timeout:
        raise DownloadError(
            f"another specchat process is already downloading {filename}; wait for it to finish"
        ) from None


def _download_locked(
    repo: str,
    filename: str,
    dest: Path,
    revision: str,
    sha256: str | None,
    size: int | None,
    token: str | bool | None,
    endpoint: str | None,
    progress: ProgressCallback | None,
    cancel: threading.Event | None,
) -> Path:
    if dest.is_file():  # another process finished it while this one waited for the lock
        return dest
    url = hf_hub_url(repo, filename, revision=revision, endpoint=endpoint)
    try:
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
    except _HUB_ERRORS as e:
        raise _hub_error(e, repo, filename, revision, endpoint) from None

    hub_sha = meta.etag.lower() if meta.etag and _SHA256.match(meta.etag.lower()) else None
    if sha256 and hub_sha and sha256 != hub_sha:
        raise ChecksumMismatchError(
            f"the hub's {filename} (sha256 {hub_sha[:12]}…) is not the file the catalog expects ({sha256[:12]}…):"
            " the upload changed; update its sha256 and revision in models.toml"
        )
    expected = sha256 or hub_sha
    if expected is None:
        raise DownloadError(
            f"the hub reported no sha256 for {filename} and the catalog has none, so it cannot be verified:"
            " add its sha256 to models.toml"
        )
    total = meta.size or size

    part, state_file = partial_path(dest), _state_path(dest)
    state = {"repo": repo, "file": filename, "revision": revision, "sha256": expected, "size": total}
    have = part.stat().st_size if part.is_file() else 0
    if have and (_read_state(dest) != state or (total is not None and have > total)):
        have = 0  # a part of some other file (changed upload, other revision): start again
    if total is not None:
        free = shutil.disk_usage(dest.parent).free
        if total - have > free:
            raise NotEnoughSpaceError(
                f"not enough free disk space for {filename}: it needs {_gb(total - have)} more and {dest.parent} has"
                f" {_gb(free)} free; free some space or set SPECCHAT_HOME to a folder on a larger disk"
            )
    state_file.write_text(json.dumps(state), encoding="utf-8")

    headers = build_hf_headers(token=token)
    if urlsplit(meta.location).netloc != urlsplit(url).netloc:
        # A redirect to a CDN carries a signed URL: the token must not leave the hub.
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}

    report = _Reporter(filename, total, progress)
    with open(part, "r+b" if have else "wb") as f:
        f.truncate(have)
        f.seek(have)
        out = _CountingFile(f, report, cancel, filename)
        report(have, 0, force=True)
        try:
            http_get(
                meta.location,
                out,  # type: ignore[arg-type]  # a file-like wrapper: write/seek/tell/truncate
                resume_size=have,
                headers=headers,
                expected_size=total,
                displayed_filename=filename,
                tqdm_class=silent_tqdm,  # type: ignore[arg-type]  # progress goes to our callback instead
            )
        except _HUB_ERRORS as e:
            # 416 to a resume: the server has no byte past the part's end, whatever size it reported, so asking again
            # would get the same answer for ever. The part is all it has: its sha256 says whether it is the file.
            if not (have and _status(e) == 416):
                raise _hub_error(e, repo, filename, revision, endpoint) from None
        except OSError as e:
            # http_get's size check; the part is kept, and the next attempt resumes or restarts it.
            raise HubUnreachableError(
                f"the download of {filename} ended early ({out.done} of {total} bytes): run it again to resume"
            ) from e
        done = out.done
        report(done, done - out.start, force=True)

    report(done, 0, stage="verifying", force=True)
    got = _sha256_of(part, cancel, filename)
    if got != expected:
        part.unlink(missing_ok=True)
        state_file.unlink(missing_ok=True)
        raise ChecksumMismatchError(
            f"{filename} failed its sha256 check (got {got[:12]}…, expected {expected[:12]}…) and was deleted;"
            " run the download again to fetch it afresh"
        )
    os.replace(part, dest)
    state_file.unlink(missing_ok=True)
    report(done, 0, stage="done", force=True)
    return dest


def _catalog_model(name: str, catalog: Catalog) -> ModelSource:
    if name in catalog.models:
        return catalog.models[name]
    if name in catalog.pairs:
        raise UnknownNameError(f"{name!r} is a pair: download it with `specchat models download {name}`")
    if name in local_models():
        raise UnknownNameError(f"{name!r} is a local model: its file is already on this machine")
    raise UnknownNameError(f"unknown model {name!r}: run `specchat models list` to see what can be downloaded")


def download_model(
    name: str,
    *,
    catalog: Catalog | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    token: str | bool | None = None,
    endpoint: str | None = None,
) -> Path:
    """Download one catalog model into the data folder (if it is not there yet) and return its path."""
    model = _catalog_model(name, catalog or load_catalog())
    return download_file(
        model.repo,
        model.file,
        model.path,
        revision=model.revision,
        sha256=model.sha256,
        size=model.size,
        token=token,
        endpoint=endpoint,
        progress=progress,
        cancel=cancel,
    )


def download_pair(
    name: str,
    *,
    catalog: Catalog | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    token: str | bool | None = None,
    endpoint: str | None = None,
) -> tuple[Path, Path]:
    """Download both models of a catalog pair; returns (target, draft). Local models in a pair are used as they are.

    Progress reports carry the bytes of both files in `overall_*` (sizes from the catalog), so one bar can show it.
    """
    catalog = catalog or load_catalog()
    pair = catalog.pairs.get(name)
    if pair is None:
        raise UnknownNameError(f"unknown pair {name!r}: run `specchat models list` to see the pairs")
    local = local_models()
    for model_name in (pair.target, pair.draft):
        installed_file(model_name, catalog, local)  # a local model's file that has gone stops the download here
    todo = [catalog.models[m] for m in dict.fromkeys((pair.target, pair.draft)) if m in catalog.models]
    todo = [m for m in todo if not m.installed]
    sizes = [m.size for m in todo]
    overall_total = None if None in sizes else sum(s for s in sizes if s is not None)
    offset = 0
    for model in todo:
        forward = _shifted(progress, offset, overall_total)
        download_model(model.name, catalog=catalog, progress=forward, cancel=cancel, token=token, endpoint=endpoint)
        offset += model.size or 0
    paths = [catalog.models[m].path if m in catalog.models else local[m] for m in (pair.target, pair.draft)]
    return paths[0], paths[1]


def _shifted(progress: ProgressCallback | None, base: int, overall_total: int | None) -> ProgressCallback | None:
    """A callback reporting one file's progress as part of a pair's: its bytes come after `base` bytes."""
    if progress is None:
        return None
    return lambda p: progress(replace(p, overall_done=base + p.bytes_done, overall_total=overall_total))


@dataclass(frozen=True)
class Removal:
    deleted: list[Path]
    kept: dict[str, str]  # model name -> the installed pair that still uses it
    unregistered: list[tuple[str, Path]]  # local models forgotten (their files left in place)
    broken: list[str] = field(default_factory=list)  # installed pairs a model's removal left without a file


def _delete_model_files(model: ModelSource) -> list[Path]:
    deleted = []
    for path in (model.path, partial_path(model.path), _state_path(model.path), _lock_path(model.path)):
        if path.exists():
            try:
                path.unlink()
            except OSError as e:  # a read-only models folder; on Windows, a file another program has open
                raise DownloadError(f"cannot delete {path}: {e.strerror or e}") from None
            deleted.append(path)
    return deleted


def _installed(pair: Pair, catalog: Catalog) -> bool:
    """Every file of the pair is here (a local member counts as here: the pair does not own its file)."""
    return all(m not in catalog.models or catalog.models[m].installed for m in (pair.target, pair.draft))


def remove(name: str, catalog: Catalog | None = None, loaded: Collection[Path] = ()) -> Removal:
    """Remove a pair's or a model's downloaded files (partial downloads too), or forget a local model.

    Removing a pair keeps a file that another installed pair still uses (the Qwen pairs share their draft).
    loaded: the files of the model a front end has loaded; a removal that would delete one of them is refused, whole,
    as the engine would go on with the file gone and a reload of it fail.
    """
    catalog = catalog or load_catalog()
    installed_pairs = [p for p in catalog.pairs.values() if _installed(p, catalog)]
    if name in catalog.pairs:
        pair = catalog.pairs[name]
        in_use: dict[str, str] = {}
        for other in installed_pairs:
            if other.name != name:
                in_use.update({m: other.name for m in (other.target, other.draft)})
        doomed, kept, broken = [], {}, []
        for model_name in dict.fromkeys((pair.target, pair.draft)):
            if model_name not in catalog.models:
                continue  # a local model in a user pair: the pair does not own its file
            if model_name in in_use and catalog.models[model_name].installed:
                kept[model_name] = in_use[model_name]
            else:
                doomed.append(catalog.models[model_name])
    elif name in catalog.models:
        doomed, kept = [catalog.models[name]], {}
        broken = [pair.name for pair in installed_pairs if name in (pair.target, pair.draft)]
    else:
        path = remove_local_model(name, catalog)
        if path is None:
            raise UnknownNameError(f"unknown pair or model {name!r}: run `specchat models list` to see the names")
        return Removal([], {}, [(name, path)])
    # Resolved, as the loaded paths may have come from the command line, through a link or relative.
    loaded_files = {path.resolve() for path in loaded}
    if any(model.path.resolve() in loaded_files for model in doomed):
        raise ModelInUseError(f"{name} is loaded; load another pair before removing it")
    elsewhere = held_elsewhere()
    for model in doomed:
        if (pid := elsewhere.get(model.path.resolve())) is not None:
            raise ModelInUseError(
                f"{name} is loaded by the specchat running as process {pid}; load another pair there, or quit it,"
                " before removing it"
            )
    deleted = [path for model in doomed for path in _delete_model_files(model)]
    return Removal(deleted, kept, [], broken if deleted else [])
