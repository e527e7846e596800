"""Which model files the running specchat processes have loaded, recorded in the cache folder.

The app and the API server each keep a record here while they hold a model, so that a removal in another process
(`specchat models remove` in a terminal while the app runs) refuses to delete what they hold, as the app's own Models
tab does. Each record sits beside a lock its process holds for as long as the record is true: a process that died
leaves a lock anyone can take, so its record is known stale and swept, never trusted.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

from filelock import FileLock, Timeout

from specchat.models.catalog import cache_dir


def _folder() -> Path:
    return cache_dir() / "loaded"


class LoadedFiles:
    """One front end's record of the files its engine holds (or a load under way will hold)."""

    def __init__(self) -> None:
        self._lock: FileLock | None = None
        self._record: Path | None = None

    def hold(self, paths: Iterable[Path]) -> None:
        """Record paths as this process's loaded files, replacing what was recorded before."""
        files = [str(path.resolve()) for path in paths]
        if not files:
            self.release()
            return
        if self._lock is None:
            folder = _folder()
            folder.mkdir(parents=True, exist_ok=True)
            # One record per front end: a process may hold several (tests do).
            stem = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            self._lock = FileLock(folder / f"{stem}.lock")
            self._lock.acquire(timeout=0)
            self._record = folder / f"{stem}.json"
        assert self._record is not None
        written = self._record.with_suffix(".tmp")
        written.write_text(json.dumps({"pid": os.getpid(), "files": files}), encoding="utf-8")
        written.replace(self._record)  # a reader sees the old record or the new one, never half of one

    def release(self) -> None:
        if self._lock is None:
            return
        assert self._record is not None
        self._record.unlink(missing_ok=True)
        self._lock.release()
        Path(self._lock.lock_file).unlink(missing_ok=True)
        self._lock = self._record = None


def held_elsewhere() -> dict[Path, int]:
    """The files other live specchat processes hold: {resolved path: process id}. This process's own front ends say
    what they hold to the removal themselves, with their own wording of the refusal."""
    held: dict[Path, int] = {}
    folder = _folder()
    if not folder.is_dir():
        return held
    for record in folder.glob("*.json"):
        lock = FileLock(record.with_suffix(".lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:  # its process is alive and holds what the record says
            try:
                entry = json.loads(record.read_text(encoding="utf-8"))
            except (OSError, ValueError):  # released between the look and the read, or not ours
                continue
            if entry.get("pid") != os.getpid():
                held.update({Path(file): entry["pid"] for file in entry.get("files", [])})
            continue
        try:  # a record its process left behind as it died
            record.unlink(missing_ok=True)
        finally:
            lock.release()
            Path(lock.lock_file).unlink(missing_ok=True)
    return held
