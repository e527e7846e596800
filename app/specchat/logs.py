"""specchat's log: one logger, "specchat", to a file in the user's log folder and to standard error.

The commands that serve (the app, `specchat serve`) set it up once per process. An error nobody planned for is logged
there with its traceback, while the user sees one line that says where the details are.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from specchat.models.catalog import log_dir

LOGGER = logging.getLogger("specchat")
LOG_FILE_NAME = "specchat.log"
# Nobody trims the log: it keeps this much and one older file.
MAX_LOG_BYTES = 5_000_000
# The longest error text put into the user's one line; the log has all of it.
MAX_SHOWN_CHARS = 300


def configure() -> Path | None:
    """Log to specchat.log in the log folder and to standard error. Returns the file's path, or None where it cannot
    be written (the log then goes to standard error alone). Once per process: a second call changes nothing."""
    if LOGGER.handlers:
        return log_file()
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False  # uvicorn's or Gradio's setup of the root logger must not print each line twice
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    LOGGER.addHandler(console)
    path = log_dir() / LOG_FILE_NAME
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file = logging.handlers.RotatingFileHandler(path, maxBytes=MAX_LOG_BYTES, backupCount=1, encoding="utf-8")
    except OSError as e:
        LOGGER.warning("cannot write the log file %s (%s): logging to standard error only", path, e)
        return None
    file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    LOGGER.addHandler(file)
    return path


def log_file() -> Path | None:
    """The file the log goes to, once configure() has set one."""
    files = [h for h in LOGGER.handlers if isinstance(h, logging.FileHandler)]
    return Path(files[0].baseFilename) if files else None


def unexpected(error: BaseException, doing: str) -> str:
    """Log an error nobody planned for, with its traceback; returns the one line that tells the user.

    doing: what failed, as the start of a sentence ("Answering", "The comparison").
    """
    LOGGER.error("%s failed", doing, exc_info=error)
    text = " ".join(f"{type(error).__name__}: {error}".split())
    if len(text) > MAX_SHOWN_CHARS:
        text = text[: MAX_SHOWN_CHARS - 1] + "…"
    where = log_file()
    details = f"the details are in {where}" if where is not None else "the details are in the server's output"
    return f"{doing} failed unexpectedly ({text}); {details}."
