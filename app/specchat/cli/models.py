"""`specchat models ...`: list, download, remove, add and check models and pairs.

`register(subparsers)` adds the `models` command to the top-level parser; every leaf sets `func`, which takes the
parsed arguments and returns the exit status (errors are printed as `error: <message>`, status 1).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from specchat.errors import SpecchatError
from specchat.models import catalog as cat
from specchat.models import download as dl
from specchat.models.compat import check_pair
from specchat.models.gguf import model_info

if TYPE_CHECKING:
    from specchat.engine.calibration import Calibration


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add `models` and its subcommands to an argparse subparsers object; returns the `models` parser."""
    # --catalog is accepted before or after the subcommand; SUPPRESS keeps a subcommand's absent flag from
    # overwriting one given to `models` itself.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--catalog", metavar="FILE", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    models = subparsers.add_parser(
        "models",
        help="list, download, add, remove and check models and draft/target pairs",
        description="Manage the GGUF models specchat runs: catalog pairs from the Hugging Face hub and local files.",
    )
    models.add_argument(
        "--catalog", metavar="FILE", help="use this catalog instead of the shipped one (also: SPECCHAT_CATALOG)"
    )
    sub = models.add_subparsers(dest="models_command", metavar="COMMAND", required=True)

    p = sub.add_parser("list", parents=[common], help="pairs and models, installed or not, with sizes")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_handler(_list))

    p = sub.add_parser("download", parents=[common], help="download a pair (both models) or one model")
    p.add_argument("name", help="a pair or model name from `specchat models list`")
    p.set_defaults(func=_handler(_download))

    p = sub.add_parser("remove", parents=[common], help="delete a downloaded pair or model, or forget a local model")
    p.add_argument("name")
    p.set_defaults(func=_handler(_remove))

    p = sub.add_parser("add", parents=[common], help="register a local GGUF file (it is not copied)")
    p.add_argument("path", help="the .gguf file")
    p.add_argument("--name", help="the name to use it by (default: the file name without .gguf)")
    p.set_defaults(func=_handler(_add))

    p = sub.add_parser("check", parents=[common], help="can DRAFT draft for TARGET? (reads headers only)")
    p.add_argument("target", help="a file path or a model name")
    p.add_argument("draft", help="a file path or a model name")
    p.set_defaults(func=_handler(_check))
    return models


def _handler(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except SpecchatError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1

    return run


def _catalog(args: argparse.Namespace, check_members: bool = True) -> cat.Catalog:
    return cat.load_catalog(getattr(args, "catalog", None), check_members=check_members)


# ------------------------------------------------------------------------------------------------ list


def _human(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _model_status(model: cat.ModelSource) -> str:
    if model.installed:
        return "installed"
    part = dl.partial_path(model.path)
    if part.is_file() and model.size:
        return f"partly downloaded ({100 * part.stat().st_size / model.size:.0f}%)"
    return "not installed"


def _model_json(model: cat.ModelSource) -> dict[str, Any]:
    return {
        "name": model.name,
        "kind": "catalog",
        "description": model.description,
        "repo": model.repo,
        "file": model.file,
        "revision": model.revision,
        "size": model.size,
        "sha256": model.sha256,
        "quantization": model.quantization,
        "license": model.license,
        "gated": model.gated,
        "installed": model.installed,
        "status": _model_status(model),
        "path": str(model.path),
    }


def _local_json(name: str, path: Path) -> dict[str, Any]:
    present = path.is_file()
    return {
        "name": name,
        "kind": "local",
        "path": str(path),
        "size": path.stat().st_size if present else None,
        "installed": present,
        "status": "installed" if present else "file missing",
    }


def _member_json(name: str, catalog: cat.Catalog, local: dict[str, Path]) -> dict[str, Any]:
    return _model_json(catalog.models[name]) if name in catalog.models else _local_json(name, local[name])


def _speculation_json(cal: Calibration | None) -> dict[str, Any]:
    """What speculation is expected to buy with a pair here, from its calibration (None: not measured yet)."""
    from specchat.engine import DEFAULT_POLICY, costmodel

    text = costmodel.expected_text(cal)
    if cal is None:
        return {"measured": False, "text": text}
    k, gain = costmodel.expected_speedup(cal)
    return {
        "measured": True,
        "text": text,
        "expected_speedup": round(gain, 3),
        "draft_length": k,
        "assumed_acceptance": DEFAULT_POLICY.model_agreement,
        "plain_tokens_per_s": round(1 / cal.t1, 2),
        "draft_cost": cal.c,
    }


def listing(catalog: cat.Catalog) -> dict[str, Any]:
    """Everything `models list --json` prints: pairs (each with both models and what speculation is expected to buy
    with it here), catalog models, local models."""
    from specchat.launch import pair_calibration  # of the models commands, only this one needs the engine

    local = cat.local_models()
    pairs = []
    for pair in catalog.pairs.values():
        target, draft = _member_json(pair.target, catalog, local), _member_json(pair.draft, catalog, local)
        sizes = [target["size"], draft["size"]] if pair.target != pair.draft else [target["size"]]
        pairs.append(
            {
                "name": pair.name,
                "description": pair.description,
                "default": pair.name == catalog.default,
                "installed": target["installed"] and draft["installed"],
                "size": None if None in sizes else sum(sizes),
                "context_length": pair.context_length,
                "draft_length": pair.draft_length,
                "license": pair.license,
                "target": target,
                "draft": draft,
                "speculation": _speculation_json(pair_calibration(pair.name, catalog)),
            }
        )
    return {
        "default_pair": catalog.default,
        "catalog": list(catalog.sources),
        "data_dir": str(cat.data_dir()),
        "pairs": pairs,
        "models": [_model_json(m) for m in catalog.models.values()],
        "local_models": [_local_json(name, path) for name, path in local.items()],
    }


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)


def _list(args: argparse.Namespace) -> int:
    data = listing(_catalog(args))
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        print()
        return 0
    rows = [["", "PAIR", "TARGET + DRAFT", "SIZE", "STATUS", "SPECULATION HERE"]]
    for p in data["pairs"]:
        states = {p["target"]["status"], p["draft"]["status"]}
        status = "installed" if p["installed"] else ("not installed" if states == {"not installed"} else "partly")
        mark = "*" if p["default"] else ""
        members = f"{p['target']['name']} + {p['draft']['name']}"
        rows.append([mark, p["name"], members, _human(p["size"]), status, p["speculation"]["text"]])
    print("Pairs (* = default):")
    _table(rows, sys.stdout)
    rows = [["MODEL", "REPO / FILE", "QUANT", "SIZE", "STATUS"]]
    for m in data["models"]:
        status = m["status"] + (", gated: needs a login" if m["gated"] else "")
        rows.append([m["name"], f"{m['repo']} / {m['file']}", m["quantization"] or "", _human(m["size"]), status])
    print("\nModels:")
    _table(rows, sys.stdout)
    if data["local_models"]:
        rows = [["LOCAL MODEL", "PATH", "SIZE", "STATUS"]]
        rows += [[m["name"], m["path"], _human(m["size"]), m["status"]] for m in data["local_models"]]
        print("\nLocal models:")
        _table(rows, sys.stdout)
    print(f"\nModels are kept in {cat.models_dir()}. Download one with `specchat models download NAME`.")
    return 0


# ------------------------------------------------------------------------------------------------ download


class ProgressPrinter:
    """Download progress on a terminal line (redrawn in place), or a line per 10% when the output is a log."""

    def __init__(self, out: TextIO):
        self.out = out
        self.tty = out.isatty()
        self.last_decile: dict[str, int] = {}

    def __call__(self, p: dl.DownloadProgress) -> None:
        if p.stage == "verifying":
            self._line(f"{p.file_name}: checking sha256…", end=True)
            return
        if p.stage != "downloading":
            return
        pct = f"{100 * p.bytes_done / p.total:5.1f}%" if p.total else "     ?"
        eta = time.strftime("%H:%M:%S", time.gmtime(p.eta)) if p.eta is not None else "--:--:--"
        text = f"{p.file_name}: {pct} {_human(p.bytes_done)} of {_human(p.total)}, {_human(int(p.speed))}/s, {eta} left"
        if self.tty:
            self._line(text, end=False)
        elif p.total:
            decile = 10 * p.bytes_done // p.total
            if decile > self.last_decile.get(p.file_name, -1):
                self.last_decile[p.file_name] = decile
                self._line(text, end=True)

    def _line(self, text: str, end: bool) -> None:
        if self.tty:
            self.out.write("\r\x1b[K" + text + ("\n" if end else ""))
        else:
            self.out.write(text + "\n")
        self.out.flush()


def _download(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    printer = ProgressPrinter(sys.stderr)
    if args.name in catalog.pairs:
        target, draft = dl.download_pair(args.name, catalog=catalog, progress=printer)
        result = check_pair(target, draft)
        if not result.ok:
            # A user catalog can pair any two models; say so now rather than when generation starts.
            print(
                f"error: pair {args.name} was downloaded but its models cannot draft for each other: {result}",
                file=sys.stderr,
            )
            return 1
        print(f"pair {args.name} is ready:\n  target {target}\n  draft  {draft}")
    else:
        path = dl.download_model(args.name, catalog=catalog, progress=printer)
        print(f"model {args.name} is ready: {path}")
    return 0


# ------------------------------------------------------------------------------------------------ remove, add, check


def _remove(args: argparse.Namespace) -> int:
    removal = dl.remove(args.name, _catalog(args))
    for path in removal.deleted:
        print(f"deleted {path}")
    for model, pair in removal.kept.items():
        print(f"kept {model}: the installed pair {pair} still uses it")
    for pair in removal.broken:
        print(f"the pair {pair} lacks {args.name} now: `specchat models download {pair}` fetches it again")
    for name, path in removal.unregistered:
        print(f"forgot local model {name} (the file {path} was left where it is)")
    if not (removal.deleted or removal.kept or removal.unregistered):
        print(f"{args.name} has no downloaded files; nothing to remove")
    return 0


def _add(args: argparse.Namespace) -> int:
    # A pair may name this model already: adding it is how the catalog becomes whole again.
    name, path = cat.add_local_model(args.path, args.name, _catalog(args, check_members=False))
    info = model_info(path)
    print(f"added {name}: {path} ({info.architecture}, {info.n_vocab} tokens)")
    return 0


def _check(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    target, draft = cat.resolve_model(args.target, catalog), cat.resolve_model(args.draft, catalog)
    result = check_pair(target, draft)
    if result.ok:
        print(f"compatible: {args.draft} can draft for {args.target}")
        return 0
    print(f"incompatible: {args.draft} cannot draft for {args.target}:")
    for reason in result.reasons:
        print(f"  - {reason}")
    return 1
