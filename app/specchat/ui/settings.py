"""The app's settings, remembered between runs as JSON in specchat's config folder.

The file is the user's to edit: a value of the wrong type or out of range falls back to its default instead of
keeping the app from starting.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from specchat.engine import MODES, SamplingParams
from specchat.models.catalog import config_dir

SETTINGS_FILE_NAME = "ui_settings.json"
DEFAULT_MODE = "auto" if "auto" in MODES else "speculative"

# (min, max) of each numeric setting; the UI's sliders use the same bounds.
LIMITS: dict[str, tuple[float, float]] = {
    "k": (1, 16),
    "temperature": (0.0, 2.0),
    "top_k": (0, 1000),
    "top_p": (0.01, 1.0),
    "min_p": (0.0, 1.0),
    "seed": (-1, 2**31 - 1),
    "max_tokens": (1, 8192),
    "threads": (0, 256),
    "gpu_layers": (-1, 1000),
}

_write_lock = threading.Lock()


def clamp(name: str, value: object) -> object:
    """A number typed into a setting's field past its bounds, brought to the nearest bound; anything else as is."""
    if name not in LIMITS or isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    lo, hi = LIMITS[name]
    return min(max(value, lo), hi)


@dataclass(frozen=True)
class Settings:
    mode: str = DEFAULT_MODE
    k: int = 4  # draft length
    temperature: float = 0.0  # 0 decodes greedily
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = -1  # -1: a new random seed for every answer
    max_tokens: int = 512
    threads: int = 0  # 0: every core
    gpu_layers: int = 0  # -1: all layers on the GPU
    system_prompt: str = "You are a helpful assistant."
    overlay: bool = True  # the token overlay, or clean Markdown

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.min_p)

    @classmethod
    def from_dict(cls, data: dict) -> Settings:
        """Keeps every known, well-typed, in-range value of data; anything else takes its default."""
        default = cls()
        values = {}
        for f in fields(cls):
            value, fallback = data.get(f.name), getattr(default, f.name)
            if isinstance(fallback, bool):
                ok = isinstance(value, bool)
            elif isinstance(fallback, (int, float)):
                # JSON and Gradio give whole numbers as floats at times: accept 4.0 for an int setting, not 4.5.
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
                if ok and isinstance(fallback, int):
                    ok = float(value).is_integer()
                    value = int(value) if ok else value
                lo, hi = LIMITS[f.name]
                ok = ok and lo <= value <= hi
            else:
                ok = isinstance(value, str) and (f.name != "mode" or value in MODES)
            if ok:
                values[f.name] = value
        return replace(default, **values)


def settings_path() -> Path:
    return config_dir() / SETTINGS_FILE_NAME


def load_settings(path: Path | None = None) -> Settings:
    path = path or settings_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Settings()
    return Settings.from_dict(data if isinstance(data, dict) else {})


def save_settings(settings: Settings, path: Path | None = None) -> None:
    path = path or settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Several tabs may save at once: write a temporary file and replace, so a reader never sees half a file.
    with _write_lock:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(settings), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
