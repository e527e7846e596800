"""The models view: the catalog with installed state and sizes, downloads, local GGUF files, choosing a pair."""

from __future__ import annotations

import html
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import gradio as gr

from specchat.engine import BackendConfig, costmodel
from specchat.errors import COMMAND_LINE, Remedies, SpecchatError
from specchat.host import EngineHost
from specchat.launch import pair_calibration
from specchat.logs import unexpected
from specchat.models import catalog, download
from specchat.models.compat import check_pair
from specchat.ui import SPINNER_HIDDEN
from specchat.ui.settings import clamp

NO_DRAFT = ""  # the draft dropdown's "none" value: lookup and plain modes need no draft model
NO_FILE_ACTIONS = (
    "This page is served beyond this machine without a login, so it cannot add, remove or download model files: "
    "start specchat with --auth USER:PASSWORD to have them here, or use `specchat models` on the server."
)
# The remedies that are this view's own fields, as the errors that name them word them (SpecchatError.worded).
PAGE = Remedies(
    add_file=lambda name: "in 'Add a local GGUF file' below" + (f", named {name}" if name else ""),
    remove_model=lambda name: f"remove {name} with 'Remove model' below",
    other_name="choose another name",
)
# How often a running download's progress bar is redrawn.
PROGRESS_INTERVAL_S = 0.3


def size_text(n: int | None) -> str:
    if n is None:
        return "size unknown"
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _model_size(name: str, cat: catalog.Catalog, local: dict[str, Path]) -> int | None:
    if name in cat.models:
        return cat.models[name].size
    path = local.get(name)
    return path.stat().st_size if path is not None and path.is_file() else None


def _installed(name: str, cat: catalog.Catalog, local: dict[str, Path]) -> bool:
    if name in cat.models:
        return cat.models[name].installed
    return name in local and local[name].is_file()


def installed_models(cat: catalog.Catalog) -> list[str]:
    local = catalog.local_models()
    return [n for n in cat.models if cat.models[n].installed] + [n for n in local if local[n].is_file()]


def all_models(cat: catalog.Catalog) -> list[str]:
    return [*cat.models, *catalog.local_models()]


_PAIR_STATES = {
    "installed": "installed",
    "partial": "partly downloaded",
    "missing": "not downloaded",
    "downloading": "downloading…",
}


def pairs_html(cat: catalog.Catalog, downloading: str | None = None) -> str:
    local = catalog.local_models()
    rows = []
    for pair in cat.pairs.values():
        members = (pair.target, pair.draft)
        have = sum(_installed(m, cat, local) for m in members)
        state = "installed" if have == 2 else "partial" if have else "missing"
        if pair.name == downloading:
            state = "downloading"
        label = _PAIR_STATES[state]
        sizes = [_model_size(m, cat, local) for m in dict.fromkeys(members)]
        total = None if None in sizes else sum(s for s in sizes if s is not None)
        default = ' <span class="sc-badge">default</span>' if pair.name == cat.default else ""
        rows.append(
            f'<tr data-pair="{html.escape(pair.name)}" data-state="{state}">'
            f"<td><b>{html.escape(pair.name)}</b>{default}"
            f"<div class='sc-sub'>{html.escape(pair.description)}</div></td>"
            f"<td>{html.escape(pair.target)}</td><td>{html.escape(pair.draft)}</td>"
            f"<td>{size_text(total)}</td><td class='sc-state-{state}'>{label}</td>"
            f"<td class='sc-speculation'>{html.escape(costmodel.expected_text(pair_calibration(pair.name, cat)))}</td>"
            "</tr>"
        )
    return (
        '<table class="sc-table" id="sc-pairs"><thead><tr><th>Pair</th><th>Target</th><th>Draft</th><th>Size</th>'
        f"<th>State</th><th>Speculation here</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def models_html(cat: catalog.Catalog) -> str:
    local = catalog.local_models()
    rows = []
    for name, model in cat.models.items():
        state = "installed" if model.installed else "missing"
        rows.append(
            f'<tr data-model="{html.escape(name)}" data-state="{state}"><td>{html.escape(name)}</td>'
            f"<td>{html.escape(model.repo)}</td><td>{html.escape(model.quantization or '')}</td>"
            f"<td>{size_text(model.size)}</td><td class='sc-state-{state}'>"
            f"{'installed' if model.installed else 'not downloaded'}</td></tr>"
        )
    for name, path in local.items():
        state = "installed" if path.is_file() else "missing"
        rows.append(
            f'<tr data-model="{html.escape(name)}" data-state="{state}"><td>{html.escape(name)}</td>'
            f"<td>local file {html.escape(str(path))}</td><td></td><td>{size_text(_model_size(name, cat, local))}</td>"
            f"<td class='sc-state-{state}'>{'local' if path.is_file() else 'file missing'}</td></tr>"
        )
    return (
        '<table class="sc-table" id="sc-models"><thead><tr><th>Model</th><th>Source</th><th>Quantization</th>'
        f"<th>Size</th><th>State</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def progress_html(state: str, text: str, fraction: float | None = None) -> str:
    bar = ""
    if state in ("downloading", "verifying"):
        inner = f'<span style="width:{fraction:.1%}"></span>' if fraction is not None else "<span></span>"
        kind = "" if fraction is not None else " sc-indeterminate"
        bar = f'<div class="sc-progress{kind}">{inner}</div>'
    return f'<div class="sc-download" data-state="{state}">{bar}<div>{html.escape(text)}</div></div>'


def _progress_text(p: download.DownloadProgress) -> str:
    if p.stage == "verifying":
        return f"Checking the sha256 of {p.file_name}…"
    done, total = p.overall_done, p.overall_total
    text = f"{p.file_name}: {size_text(done)} of {size_text(total)}" if total else f"{p.file_name}: {size_text(done)}"
    if p.speed > 0:
        text += f" · {p.speed / 1e6:.1f} MB/s"
    if p.eta is not None:
        text += f" · {p.eta / 60:.0f} min left" if p.eta >= 90 else f" · {p.eta:.0f} s left"
    return text


def model_banner(host: EngineHost) -> str:
    """The loaded pair's state for the header: ready, loading (with the time so far), or why it failed."""
    s = host.status()
    detail = f" ({s.seconds:.0f} s)" if s.state == "loading" else ""
    bar = '<div class="sc-progress sc-indeterminate"><span></span></div>' if s.state == "loading" else ""
    return f'<div class="sc-model" data-state="{s.state}">{html.escape(s.message + detail)}{bar}</div>'


def _only(progress: str) -> tuple:
    """A progress update that leaves the tables and choices as they are."""
    return (progress, *[gr.skip()] * 5)


def compatibility_html(target: str | None, draft: str | None, remedies: Remedies) -> str:
    """Why a target/draft choice will or will not work, in words (incompatible choices stay selectable)."""
    if not target:
        return '<div class="sc-compat" data-ok="none">Choose a target model.</div>'
    if not draft:
        return (
            '<div class="sc-compat" data-ok="true">No draft model: speculative mode is unavailable; '
            "prompt lookup and plain decoding work.</div>"
        )
    try:
        cat = catalog.load_catalog_or_shipped()[0]
        t, d = catalog.resolve_model(target, cat), catalog.resolve_model(draft, cat)
        result = check_pair(t, d)
    except SpecchatError as e:
        return f'<div class="sc-compat" data-ok="false">{html.escape(e.worded(remedies))}</div>'
    if not result.ok:
        return (
            f'<div class="sc-compat" data-ok="false">{html.escape(draft)} cannot draft for {html.escape(target)}: '
            f"{html.escape(str(result))}. Speculative decoding needs the same tokenizer; pick another draft, "
            "or load without one.</div>"
        )
    same = " (the same file: every draft is accepted, useful for testing only)" if t == d else ""
    return f'<div class="sc-compat" data-ok="true">Compatible: the two share a tokenizer{html.escape(same)}.</div>'


def cancelling(job: DownloadJob) -> str:
    return progress_html("cancelling", f"Cancelling the download of {job.pair}…")


@dataclass
class DownloadJob:
    pair: str
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: download.DownloadProgress | None = None
    error: str | None = None
    paths: tuple[Path, Path] | None = None


class ModelsView:
    """Shared by every tab: at most one download runs at a time, and its Cancel button works from any tab."""

    def __init__(self, host: EngineHost, n_ctx: int, file_actions: bool = True):
        """file_actions: whether to offer adding, removing and downloading model files (the server's files)."""
        self.host = host
        self.n_ctx = n_ctx  # for models chosen one by one; a catalog pair brings its own context length
        self.file_actions = file_actions
        # Without the file fields, adding or removing a model file is for whoever runs the server, on its command line.
        self.remedies = PAGE if file_actions else COMMAND_LINE
        self.job: DownloadJob | None = None
        self._job_guard = threading.Lock()

    def _config(self, threads: float | None, gpu_layers: float | None, n_ctx: int) -> BackendConfig:
        threads, gpu_layers = clamp("threads", threads or 0), clamp("gpu_layers", gpu_layers or 0)
        return BackendConfig(n_ctx=n_ctx, n_threads=int(threads) or None, n_gpu_layers=int(gpu_layers))

    def _catalog(self) -> catalog.Catalog:
        """The catalog in effect, or the shipped one alone while the user's catalog file is broken (build says so)."""
        return catalog.load_catalog_or_shipped()[0]

    def _downloading(self) -> str | None:
        # The running download is part of the pairs table: a page opened, or a load event landing, mid-download
        # shows it.
        job = self.job
        return job.pair if job is not None else None

    def _refresh(self) -> tuple:
        """New values for (pairs table, models table, target choices, draft choices, removable models)."""
        cat = self._catalog()
        names = installed_models(cat)
        return (
            pairs_html(cat, self._downloading()),
            models_html(cat),
            gr.update(choices=names),
            gr.update(choices=[("none (lookup or plain only)", NO_DRAFT), *names]),
            gr.update(choices=all_models(cat), value=None),
        )

    # Pairs

    def pairs_now(self) -> str:
        """The pairs table as it stands: installed files, a download under way, what speculation buys here."""
        return pairs_html(self._catalog(), self._downloading())

    def download(self, pair: str, threads: float, gpu_layers: float) -> Iterator[tuple]:
        """Yields (progress, pairs table, models table, target choices, draft choices)."""
        with self._job_guard:
            if self.job is not None:
                yield _only(progress_html("error", f"{self.job.pair} is downloading already; wait or cancel it."))
                return
            job = self.job = DownloadJob(pair)
        try:
            worker = threading.Thread(target=self._download, args=(job,), daemon=True, name="specchat-download")
            worker.start()
            starting = progress_html("downloading", f"Starting the download of {pair}…", None)
            yield starting, *self._refresh()
            while worker.is_alive():
                worker.join(PROGRESS_INTERVAL_S)
                p = job.progress
                if job.cancel.is_set():
                    yield _only(cancelling(job))
                elif p is not None:
                    # A file done is not the pair done: "done" is kept for the end, which tests and users wait for.
                    stage = "downloading" if p.stage == "done" else p.stage
                    yield _only(progress_html(stage, _progress_text(p), p.fraction))
        finally:
            job.cancel.set()  # a tab closed mid-download stops it rather than leaving it running unseen
            with self._job_guard:
                self.job = None
        try:
            if job.error is not None:
                yield progress_html("error", job.error), *self._refresh()
                return
            message = f"Downloaded {pair}."
            if self.host.engine is None and self.host.status().state != "loading":
                cat = self._catalog()
                self.host.load(*job.paths, self._config(threads, gpu_layers, cat.pairs[pair].context_length))
                message += " Loading it now."
            yield progress_html("done", message), *self._refresh()
        except SpecchatError as e:
            yield _only(progress_html("error", e.worded(self.remedies)))
        except Exception as e:
            yield _only(progress_html("error", unexpected(e, f"Downloading {pair}")))

    def _download(self, job: DownloadJob) -> None:
        def report(p: download.DownloadProgress) -> None:
            job.progress = p

        try:
            job.paths = download.download_pair(job.pair, progress=report, cancel=job.cancel)
        except SpecchatError as e:
            # After Cancel, whatever ended the transfer (the cancel itself, or the connection it broke) means the same.
            cancelled = job.cancel.is_set()
            stopped = f"Cancelled. Download {job.pair} again to resume where it stopped."
            job.error = stopped if cancelled else e.worded(self.remedies)
        except Exception as e:  # a worker that died silently would leave the pair "downloaded" with no files
            job.error = unexpected(e, f"Downloading {job.pair}")

    def cancel(self) -> str:
        job = self.job
        if job is None:
            return progress_html("idle", "No download is running.")
        job.cancel.set()
        return cancelling(job)

    def remove(self, name: str | None) -> tuple:
        """Delete a pair's or a catalog model's files (refused for the loaded model's), or forget a local model (its
        file stays)."""
        if not name:
            return progress_html("error", "Choose what to remove first."), *self._refresh()
        try:
            with self.host.files_held() as loaded:
                removal = download.remove(name, loaded=loaded)
        except SpecchatError as e:
            return progress_html("error", e.worded(self.remedies)), *self._refresh()
        except Exception as e:
            return _only(progress_html("error", unexpected(e, f"Removing {name}")))
        if removal.unregistered:
            parts = [
                f"Forgot the local model {n} (its file {path} stays where it is)." for n, path in removal.unregistered
            ]
        else:
            models = [p.name for p in removal.deleted if p.suffix == ".gguf"]
            parts = [f"Removed {name}: deleted {', '.join(models)}." if models else f"{name} had no downloaded files."]
            parts += [f"Kept {model}: the installed pair {other} uses it." for model, other in removal.kept.items()]
            parts += [f"The pair {pair} lacks {name} now: download it again to use it." for pair in removal.broken]
        return progress_html("done", " ".join(parts)), *self._refresh()

    def load_pair(self, pair: str, threads: float, gpu_layers: float) -> str:
        try:
            cat = self._catalog()
            target, draft = catalog.resolve_pair(pair, cat)
            self.host.load(target, draft, self._config(threads, gpu_layers, cat.pairs[pair].context_length))
        except SpecchatError as e:
            gr.Warning(e.worded(self.remedies))
        except Exception as e:
            gr.Warning(unexpected(e, f"Loading {pair}"))
        return self.banner()

    # Single models

    def load_models(self, target: str | None, draft: str | None, threads: float, gpu_layers: float) -> str:
        try:
            if not target:
                raise SpecchatError("choose a target model first")
            cat = self._catalog()
            target_path = catalog.resolve_model(target, cat)
            draft_path = catalog.resolve_model(draft, cat) if draft else None
            self.host.load(target_path, draft_path, self._config(threads, gpu_layers, self.n_ctx))
        except SpecchatError as e:
            gr.Warning(e.worded(self.remedies))
        except Exception as e:
            gr.Warning(unexpected(e, f"Loading {target}"))
        return self.banner()

    def add_local(self, path: str, name: str) -> tuple:
        try:
            added, file = catalog.add_local_model(path.strip(), name.strip() or None)
        except SpecchatError as e:
            return progress_html("error", e.worded(self.remedies)), *self._refresh()
        except Exception as e:
            return _only(progress_html("error", unexpected(e, "Adding a local model")))
        return progress_html("done", f"Added {added} ({file})."), *self._refresh()

    def banner(self) -> str:
        return model_banner(self.host)

    def build(
        self,
        threads: gr.components.Component,
        gpu_layers: gr.components.Component,
        banner: gr.HTML,
        offered_pair: str | None = None,
    ) -> None:
        """Without file actions, their buttons are not made and their events not registered: no client can call them."""
        cat, unusable = catalog.load_catalog_or_shipped()
        names = installed_models(cat)
        gr.Markdown("### Pairs\nA target model and a smaller draft model with the same tokenizer.")
        if unusable is not None:
            note = f"Only specchat's own catalog is listed: {unusable.worded(self.remedies)}"
            gr.HTML(f'<div class="sc-note" id="sc-catalog-error">{html.escape(note)}</div>')
        # Made anew as each page loads (the app's load event): what speculation buys with a pair here is known once
        # the pair has loaded.
        pairs = self.pairs_view = gr.HTML(elem_id="sc-pairs-view")
        with gr.Row(equal_height=False, elem_classes="sc-controls"):
            offered = offered_pair if offered_pair in cat.pairs else cat.default
            pair = gr.Dropdown(list(cat.pairs), value=offered, label="Pair", scale=3, elem_id="sc-pair")
            if self.file_actions:
                download_btn = gr.Button("Download", variant="primary", elem_id="sc-download", scale=0, min_width=130)
                cancel_btn = gr.Button("Cancel", elem_id="sc-cancel", scale=0, min_width=130)
            load_pair_btn = gr.Button("Load pair", elem_id="sc-load-pair", scale=0, min_width=130)
            if self.file_actions:
                remove_btn = gr.Button("Remove", variant="stop", elem_id="sc-remove", scale=0, min_width=130)
        progress = gr.HTML(progress_html("idle", ""), elem_id="sc-download-progress")
        if not self.file_actions:
            gr.HTML(f'<div class="sc-note" id="sc-no-file-actions">{html.escape(NO_FILE_ACTIONS)}</div>')

        gr.Markdown("### Choose target and draft\nAny installed or local model; the check below explains a mismatch.")
        with gr.Row(equal_height=False, elem_classes="sc-controls"):
            target = gr.Dropdown(names, value=None, label="Target", scale=2, elem_id="sc-target")
            draft = gr.Dropdown(
                [("none (lookup or plain only)", NO_DRAFT), *names],
                value=NO_DRAFT,
                label="Draft",
                scale=2,
                elem_id="sc-draft",
            )
            load_btn = gr.Button("Load", variant="primary", elem_id="sc-load", scale=0, min_width=130)
        check = partial(compatibility_html, remedies=self.remedies)
        compat = gr.HTML(check(None, None), elem_id="sc-compat")

        gr.Markdown("### Models")
        models = gr.HTML(models_html(cat), elem_id="sc-models-view")
        load_pair_btn.click(self.load_pair, [pair, threads, gpu_layers], banner, **SPINNER_HIDDEN)
        load_btn.click(self.load_models, [target, draft, threads, gpu_layers], banner, **SPINNER_HIDDEN)
        for choice in (target, draft):
            choice.change(check, [target, draft], compat, **SPINNER_HIDDEN)
        if not self.file_actions:
            return

        with gr.Row(equal_height=False, elem_classes="sc-controls"):
            local_path = gr.Textbox(
                label="Add a local GGUF file", placeholder="/path/to/model.gguf", scale=3, elem_id="sc-local-path"
            )
            local_name = gr.Textbox(label="Name (optional)", scale=1, elem_id="sc-local-name")
            add_btn = gr.Button("Add", elem_id="sc-add", scale=0, min_width=130)
        with gr.Row(equal_height=False, elem_classes="sc-controls"):
            removable = gr.Dropdown(all_models(cat), value=None, label="Model", scale=3, elem_id="sc-remove-model")
            remove_model_btn = gr.Button(
                "Remove model", variant="stop", elem_id="sc-remove-model-button", scale=0, min_width=130
            )
        lists = [pairs, models, target, draft, removable]
        download_btn.click(
            self.download,
            [pair, threads, gpu_layers],
            [progress, *lists],
            concurrency_limit=None,
            **SPINNER_HIDDEN,
        )
        cancel_btn.click(self.cancel, None, progress, queue=False, **SPINNER_HIDDEN)
        remove_btn.click(self.remove, pair, [progress, *lists], **SPINNER_HIDDEN)
        remove_model_btn.click(self.remove, removable, [progress, *lists], **SPINNER_HIDDEN)
        add_btn.click(self.add_local, [local_path, local_name], [progress, *lists], **SPINNER_HIDDEN)
