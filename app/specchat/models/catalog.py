"""The catalog of draft/target pairs (models.toml), the folders specchat keeps its files in, and names -> files.

Three sources of models: the shipped catalog (plus a user catalog in the config folder that adds or overrides
entries by name, or a file named by SPECCHAT_CATALOG / --catalog that replaces both), and local GGUF files the user
registered with `specchat models add` (kept in <data>/local_models.toml; the files are not copied).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs

from specchat.errors import SpecchatError
from specchat.models.gguf import read_metadata

APP_NAME = "specchat"
CATALOG_FILE_NAME = "models.toml"
LOCAL_MODELS_FILE_NAME = "local_models.toml"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

_MODEL_KEYS = {"description", "repo", "file", "revision", "size", "sha256", "quantization", "license", "gated"}
_PAIR_KEYS = {"description", "target", "draft", "context_length", "draft_length", "license"}
_TOP_KEYS = {"default_pair", "pairs", "models"}

DEFAULT_CONTEXT_LENGTH = 4096
DEFAULT_DRAFT_LENGTH = 4


class CatalogError(SpecchatError):
    """A catalog or local-models file that cannot be used as written."""


class UnknownNameError(SpecchatError):
    pass


class NotInstalledError(SpecchatError):
    pass


class NameTakenError(SpecchatError):
    """A name add_local_model cannot register."""


def _home() -> Path | None:
    home = os.environ.get("SPECCHAT_HOME")
    return Path(home).expanduser() if home else None


def data_dir() -> Path:
    """Downloaded models and the local-model registry: SPECCHAT_HOME when set, else the platform's data folder."""
    home = _home()
    return home if home else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def config_dir() -> Path:
    home = _home()
    return home / "config" if home else Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    home = _home()
    return home / "cache" if home else Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def log_dir() -> Path:
    home = _home()
    return home / "logs" if home else Path(platformdirs.user_log_dir(APP_NAME, appauthor=False))


def models_dir() -> Path:
    return data_dir() / "models"


def user_catalog_path() -> Path:
    return config_dir() / CATALOG_FILE_NAME


def local_models_path() -> Path:
    return data_dir() / LOCAL_MODELS_FILE_NAME


@dataclass(frozen=True)
class ModelSource:
    """One GGUF file on the Hugging Face hub, as the catalog describes it."""

    name: str
    repo: str
    file: str
    revision: str
    size: int | None
    sha256: str | None
    quantization: str | None
    license: str | None
    gated: bool
    description: str

    @property
    def path(self) -> Path:
        """Where the file lives once downloaded. Only a file whose checksum passed is ever moved here."""
        return models_dir() / self.repo.replace("/", "--") / self.file

    @property
    def installed(self) -> bool:
        return self.path.is_file()


@dataclass(frozen=True)
class Pair:
    """A target and a draft model (names of catalog or local models) that share a tokenizer."""

    name: str
    description: str
    target: str
    draft: str
    context_length: int
    draft_length: int
    license: str
    source: str  # the catalog file that defines it


@dataclass(frozen=True)
class Catalog:
    pairs: dict[str, Pair]
    models: dict[str, ModelSource]
    default: str
    sources: tuple[str, ...]

    @property
    def default_pair(self) -> Pair:
        return self.pairs[self.default]


# ------------------------------------------------------------------------------------------------ loading


def shipped_catalog() -> tuple[str, str]:
    """(where, text) of the catalog that comes with specchat.

    A wheel carries it as package data (pyproject force-includes it as specchat/models.toml); a source checkout or an
    editable install has it at the repository root.
    """
    packaged = resources.files("specchat") / CATALOG_FILE_NAME
    if packaged.is_file():
        return str(packaged), packaged.read_text(encoding="utf-8")
    in_repo = Path(__file__).resolve().parents[3] / CATALOG_FILE_NAME
    if not in_repo.is_file():
        raise CatalogError(
            "specchat's own models.toml is missing from this installation; reinstall specchat or pass --catalog FILE"
        )
    return str(in_repo), in_repo.read_text(encoding="utf-8")


def _parse_toml(where: str, text: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CatalogError(f"{where} is not valid TOML ({e}); fix or remove the file") from None
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise CatalogError(
            f"{where}: unknown top-level key {sorted(unknown)[0]!r}; use default_pair, [pairs.NAME] or [models.NAME]"
        )
    for table in ("pairs", "models"):
        if not isinstance(data.get(table, {}), dict):
            raise CatalogError(f"{where}: '{table}' must be a table of named entries like [{table}.NAME]")
    return data


def _read_file(path: Path) -> tuple[str, str]:
    try:
        return str(path), path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CatalogError(
            f"catalog file {path} does not exist; check the path given to --catalog or SPECCHAT_CATALOG"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CatalogError(f"cannot read catalog file {path} ({e}); check the file") from None


def load_catalog(path: str | Path | None = None, shipped_only: bool = False, *, check_members: bool = True) -> Catalog:
    """The catalog in effect.

    `path` (or SPECCHAT_CATALOG) replaces the shipped catalog and the user's; otherwise the user catalog in the config
    folder is laid over the shipped one, entry by entry. shipped_only: the shipped catalog alone. check_members=False
    lets a pair name a model that is not registered (yet): for `specchat models add`, which is how one registers it.
    """
    replacement = path or os.environ.get("SPECCHAT_CATALOG")
    if replacement and not shipped_only:
        layers = [_read_file(Path(replacement).expanduser())]
    else:
        layers = [shipped_catalog()]
        user = user_catalog_path()
        if user.is_file() and not shipped_only:
            layers.append(_read_file(user))

    raw_pairs: dict[str, tuple[str, Any]] = {}
    raw_models: dict[str, tuple[str, Any]] = {}
    default: tuple[str, Any] | None = None
    for where, text in layers:
        data = _parse_toml(where, text)
        raw_pairs.update({name: (where, entry) for name, entry in data.get("pairs", {}).items()})
        raw_models.update({name: (where, entry) for name, entry in data.get("models", {}).items()})
        if "default_pair" in data:
            default = (where, data["default_pair"])

    models = {name: _model(name, where, entry) for name, (where, entry) in raw_models.items()}
    known = set(models) | set(local_models()) if check_members else None
    pairs = {name: _pair(name, where, entry, known) for name, (where, entry) in raw_pairs.items()}
    sources = tuple(where for where, _ in layers)
    if default is None:
        raise CatalogError(f'{sources[-1]}: no default_pair is set; add default_pair = "NAME" naming a pair')
    where, name = default
    if not isinstance(name, str) or name not in pairs:
        raise CatalogError(f"{where}: default_pair {name!r} is not one of the catalog's pairs; name an existing pair")
    return Catalog(pairs=pairs, models=models, default=name, sources=sources)


def load_catalog_or_shipped() -> tuple[Catalog, CatalogError | None]:
    """The catalog in effect and None, or, when the user's catalog file cannot be used, the shipped catalog alone and
    why: for the app, which must start and serve the models it was given whatever that file holds."""
    try:
        return load_catalog(), None
    except CatalogError as e:
        try:
            return load_catalog(shipped_only=True), e
        except CatalogError:  # not the user's catalog (local_models.toml, say): the first reason is the one to fix
            raise e from None


def _check_keys(kind: str, name: str, where: str, entry: Any, known: set[str]) -> None:
    if not isinstance(entry, dict):
        raise CatalogError(f'{where}: {kind} {name!r} must be a table ([{kind}s."{name}"])')
    if not _NAME.match(name):
        raise CatalogError(f"{where}: {kind} name {name!r} may hold only letters, digits, '.', '_' and '-'")
    unknown = set(entry) - known
    if unknown:
        raise CatalogError(
            f"{where}: {kind} {name!r} has unknown key {sorted(unknown)[0]!r};"
            f" known keys are {', '.join(sorted(known))}"
        )


def _string(kind: str, name: str, where: str, entry: dict, key: str, default: str | None = None) -> str | None:
    value = entry.get(key, default)
    if value is not None and not isinstance(value, str):
        raise CatalogError(f"{where}: {kind} {name!r}: '{key}' must be a string")
    return value


def _required(kind: str, name: str, where: str, entry: dict, key: str) -> str:
    value = _string(kind, name, where, entry, key)
    if not value:
        raise CatalogError(f"{where}: {kind} {name!r} is missing '{key}'; add it")
    return value


def _positive_int(kind: str, name: str, where: str, entry: dict, key: str, default: int | None) -> int | None:
    value = entry.get(key, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise CatalogError(f"{where}: {kind} {name!r}: '{key}' must be a positive whole number")
    return value


def _model(name: str, where: str, entry: Any) -> ModelSource:
    _check_keys("model", name, where, entry, _MODEL_KEYS)
    repo = _required("model", name, where, entry, "repo")
    if not _REPO.match(repo):
        raise CatalogError(f"{where}: model {name!r}: repo {repo!r} is not a Hugging Face repo id like 'owner/name'")
    file = _required("model", name, where, entry, "file")
    parts = file.split("/")
    if not file.endswith(".gguf") or "\\" in file or any(part in ("", ".", "..") for part in parts):
        raise CatalogError(f"{where}: model {name!r}: file {file!r} must be the repo-relative path of a .gguf file")
    sha256 = _string("model", name, where, entry, "sha256")
    if sha256 is not None:
        sha256 = sha256.lower()
        if not _SHA256.match(sha256):
            raise CatalogError(f"{where}: model {name!r}: sha256 must be 64 hexadecimal digits")
    gated = entry.get("gated", False)
    if not isinstance(gated, bool):
        raise CatalogError(f"{where}: model {name!r}: 'gated' must be true or false")
    return ModelSource(
        name=name,
        repo=repo,
        file=file,
        revision=_string("model", name, where, entry, "revision", "main") or "main",
        size=_positive_int("model", name, where, entry, "size", None),
        sha256=sha256,
        quantization=_string("model", name, where, entry, "quantization"),
        license=_string("model", name, where, entry, "license"),
        gated=gated,
        description=_string("model", name, where, entry, "description", name) or name,
    )


def _unknown_member(where: str, pair: str, role: str, model: str) -> CatalogError:
    return CatalogError(
        lambda say: (
            f"{where}: pair {pair!r} names {role} model {model!r}, which is neither a catalog model nor a"
            f" local model; add it under [models] or register its file {say.add_file(model)}"
        )
    )


def _pair(name: str, where: str, entry: Any, known: set[str] | None) -> Pair:
    """known: the catalog and local model names a pair may use; None: any name."""
    _check_keys("pair", name, where, entry, _PAIR_KEYS)
    target = _required("pair", name, where, entry, "target")
    draft = _required("pair", name, where, entry, "draft")
    for role, model in (("target", target), ("draft", draft)):
        if known is not None and model not in known:
            raise _unknown_member(where, name, role, model)
    return Pair(
        name=name,
        description=_string("pair", name, where, entry, "description", "") or "",
        target=target,
        draft=draft,
        context_length=_positive_int("pair", name, where, entry, "context_length", DEFAULT_CONTEXT_LENGTH),
        draft_length=_positive_int("pair", name, where, entry, "draft_length", DEFAULT_DRAFT_LENGTH),
        license=_string("pair", name, where, entry, "license", "") or "",
        source=where,
    )


# ------------------------------------------------------------------------------------------------ local models


def local_models() -> dict[str, Path]:
    """Local GGUF files registered with `specchat models add`: name -> path (the file may since have gone)."""
    path = local_models_path()
    if not path.is_file():
        return {}
    where, text = _read_file(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CatalogError(f"{where} is not valid TOML ({e}); fix it or delete it and add the models again") from None
    # Every key is known, since a write keeps only the entries' paths: an unknown one would be lost without a word.
    unknown = sorted(set(data) - {"models"})
    if unknown:
        raise CatalogError(
            f"{where} has unknown key {unknown[0]!r}; it holds only [models.NAME] entries, each with a 'path'"
        )
    entries = data.get("models", {})
    if not isinstance(entries, dict):
        raise CatalogError(
            f"{where} is not valid: 'models' must be a table of [models.NAME] entries;"
            " fix it or delete it and add the models again"
        )
    out: dict[str, Path] = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise CatalogError(f"{where}: local model {name!r} needs a 'path' string; fix it or delete the entry")
        if set(entry) != {"path"}:
            raise CatalogError(
                f"{where}: local model {name!r} has unknown key {sorted(set(entry) - {'path'})[0]!r};"
                " its only key is 'path'"
            )
        out[name] = Path(entry["path"])
    return out


def _write_local_models(entries: dict[str, Path]) -> None:
    # json.dumps writes a valid TOML basic string for any name or path (same escapes), so no TOML writer is needed.
    lines = ["# Local GGUF files registered with `specchat models add`; the files stay where they are.", ""]
    for name, path in sorted(entries.items()):
        lines += [f"[models.{json.dumps(name)}]", f"path = {json.dumps(str(path))}", ""]
    target = local_models_path()
    tmp = target.with_name(target.name + ".tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text("\n".join(lines), encoding="utf-8")
        os.replace(tmp, target)
    except OSError as e:  # a file where the folder should be, a read-only or full disk
        raise CatalogError(f"cannot write {target} ({e.strerror or e}); check the folder {target.parent}") from None


def _default_local_name(path: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-._")
    return name or "local-model"


def _check_utf8(path: Path) -> None:
    """local_models.toml holds paths as TOML strings, which must be UTF-8: a file name that is not (Python holds its
    bad bytes as lone surrogates) would make the file unreadable, and every models command with it."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        shown = str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise SpecchatError(f"the path {shown} is not valid UTF-8; rename the file, then add it again") from None


def add_local_model(path: str | Path, name: str | None = None, catalog: Catalog | None = None) -> tuple[str, Path]:
    """Register a GGUF file under a name (default: its file name without .gguf). The file is not copied.

    Without a catalog, pairs naming models not registered yet are no obstacle: this is how they get registered.
    """
    if not str(path).strip():  # Path("") is the working folder: the error would name a folder nobody gave
        raise SpecchatError("give the path of the GGUF file to add")
    if "\x00" in str(path):  # which the OS would refuse with "embedded null byte", a ValueError
        raise SpecchatError("the path holds a NUL character, which no file name can; give the file's path again")
    file = Path(path).expanduser().resolve()
    _check_utf8(file)
    read_metadata(file)  # a GGUF file, whole
    name = name or _default_local_name(file)
    if not _NAME.match(name):
        raise SpecchatError(f"model name {name!r} may hold only letters, digits, '.', '_' and '-'; choose another")
    catalog = catalog or load_catalog(check_members=False)
    if name in catalog.models or name in catalog.pairs:
        raise NameTakenError(lambda say: f"{name!r} is already a catalog name; {say.other_name}")
    entries = local_models()
    if name in entries and entries[name] != file:
        taken = entries[name]
        raise NameTakenError(lambda say: f"{name!r} already names {taken}; remove it first or {say.other_name}")
    entries[name] = file
    _write_local_models(entries)
    return name, file


def _pairs_using(name: str, catalog: Catalog) -> dict[str, str]:
    """The pairs that use local model `name`, each with the file defining it: the catalog's, and the user catalog's
    where another replaces it for this command (--catalog), since the user's is in effect again for the next."""
    if name in catalog.models:
        return {}  # the name is a catalog model's: a pair naming it means that model
    users = {p.name: p.source for p in catalog.pairs.values() if name in (p.target, p.draft)}
    user_file = user_catalog_path()
    if user_file.is_file() and str(user_file) not in catalog.sources:
        where, text = _read_file(user_file)
        for pair, entry in _parse_toml(where, text).get("pairs", {}).items():
            if isinstance(entry, dict) and name in (entry.get("target"), entry.get("draft")):
                users.setdefault(pair, where)
    return users


def remove_local_model(name: str, catalog: Catalog | None = None) -> Path | None:
    """Forget a local model; returns its path (the file itself is left alone), or None if no such name.

    Refused while a pair uses it: without it, that pair would make the catalog, and so every command, unusable.
    """
    entries = local_models()
    if name not in entries:
        return None
    users = _pairs_using(name, catalog or load_catalog())
    if users:
        pairs = ", ".join(map(repr, users))
        files = ", ".join(dict.fromkeys(users.values()))
        raise SpecchatError(
            f"local model {name!r} is used by pair {pairs} in {files}; remove or change the pair there first"
        )
    path = entries.pop(name)
    _write_local_models(entries)
    return path


# ------------------------------------------------------------------------------------------------ names -> files


def _looks_like_path(arg: str) -> bool:
    return os.sep in arg or "/" in arg or arg.endswith(".gguf") or arg.startswith("~")


def installed_file(name: str, catalog: Catalog, local: dict[str, Path]) -> Path | None:
    """The file of a catalog or local model; None for a catalog model not downloaded yet. Raises NotInstalledError
    for a local model whose file has gone."""
    if name in catalog.models:
        model = catalog.models[name]
        return model.path if model.installed else None
    if name in local:
        if local[name].is_file():
            return local[name]
        gone = local[name]
        raise NotInstalledError(
            lambda say: (
                f"local model {name!r} points to {gone}, which no longer exists; {say.remove_model(name)},"
                f" or add the file again {say.add_file(name)}"
            )
        )
    raise UnknownNameError(f"unknown model {name!r}: run `specchat models list` to see the models you can use")


def resolve_model(arg: str, catalog: Catalog | None = None) -> Path:
    """A model argument -> a GGUF file: an existing file path, or the name of an installed catalog or local model.

    The catalogs are read only for what can be a name: a broken user catalog stops no one who gives a file's path.
    """
    as_path = Path(arg).expanduser()
    if as_path.is_file():
        return as_path.resolve()
    if _NAME.match(arg):
        catalog = catalog or load_catalog()
        local = local_models()
        if arg in catalog.models or arg in local:
            path = installed_file(arg, catalog, local)
            if path is None:
                raise NotInstalledError(f"model {arg!r} is not downloaded yet: run `specchat models download {arg}`")
            return path
        if arg in catalog.pairs:
            pair = catalog.pairs[arg]
            raise UnknownNameError(f"{arg!r} is a pair, not one model; use it as a pair or name {pair.target!r}")
    if as_path.is_dir():
        raise UnknownNameError(f"{as_path} is a folder, not a model file: give the path of a .gguf file in it")
    if _looks_like_path(arg):
        raise UnknownNameError(f"no such model file: {as_path}; check the path")
    raise UnknownNameError(f"unknown model {arg!r}: give a GGUF file path or a model name from `specchat models list`")


def resolve_pair(name: str, catalog: Catalog | None = None) -> tuple[Path, Path]:
    """A pair name -> (target file, draft file), both installed."""
    catalog = catalog or load_catalog()
    pair = catalog.pairs.get(name)
    if pair is None:
        raise UnknownNameError(
            f"unknown pair {name!r}: run `specchat models list` to see the pairs, then `specchat models download NAME`"
        )
    local = local_models()
    paths = [installed_file(model, catalog, local) for model in (pair.target, pair.draft)]
    missing = [model for model, path in zip((pair.target, pair.draft), paths, strict=True) if path is None]
    if missing:
        raise NotInstalledError(
            f"pair {name!r} is not fully downloaded (missing {' and '.join(missing)}):"
            f" run `specchat models download {name}`"
        )
    return paths[0], paths[1]


def names_of(target: Path, draft: Path | None, catalog: Catalog | None = None) -> tuple[str, str | None, str | None]:
    """(target, draft, pair) as `specchat models list` names them: a file's catalog or local model name, else its file
    name without .gguf; the catalog pair of exactly these two models, else None."""
    catalog = catalog or load_catalog()
    local = local_models()
    known = {model.path.resolve(): name for name, model in catalog.models.items()}
    known.update({path.resolve(): name for name, path in local.items()})

    def name(path: Path) -> str:
        return known.get(Path(path).resolve(), Path(path).stem)

    target_name, draft_name = name(target), name(draft) if draft is not None else None
    pair = next((p.name for p in catalog.pairs.values() if (p.target, p.draft) == (target_name, draft_name)), None)
    return target_name, draft_name, pair


def installed_default_pair(catalog: Catalog | None = None) -> tuple[Path, Path] | None:
    """(target, draft) of the default pair when both files are present, else None."""
    catalog = catalog or load_catalog()
    try:
        return resolve_pair(catalog.default, catalog)
    except NotInstalledError:
        return None
