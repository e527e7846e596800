"""How `specchat ui` serves: a message sent while the model loads, a broken user catalog, and a page served beyond this
machine (with a login, or without one and without the Models tab's file actions)."""

from __future__ import annotations

import ipaddress
import json
import socket
from pathlib import Path

import pytest
from test_chat_app import RECORDER, open_chat, send, settle, user_messages

from helpers import serving
from ui.conftest import START_SETTINGS

pytestmark = pytest.mark.browser
# The Models tab's actions on the server's files: Gradio names their events after the handlers.
FILE_ACTIONS = {"download", "cancel", "remove", "add_local"}


def test_a_message_sent_while_the_model_loads_waits_and_is_answered(loading_server, new_page):
    page = new_page(loading_server.url)
    page.wait_for_selector("#sc-input textarea")
    page.evaluate(RECORDER)
    banner = page.locator("#sc-model .sc-model")
    assert banner.get_attribute("data-state") == "loading", banner.inner_text()
    mark = send(page, "Say hello.")
    page.wait_for_function("mark => window.__seen.slice(mark).some(([state]) => state === 'waiting')", arg=mark)
    assert page.locator("#sc-status").inner_text() == "Waiting for the model to load…"
    assert user_messages(page) == ["Say hello."] and page.locator("#sc-input textarea").input_value() == ""
    assert banner.get_attribute("data-state") == "loading"
    assert settle(page, mark, timeout=300_000)[-1][0] == "done"
    page.wait_for_selector('#sc-model .sc-model[data-state="ready"]')
    assert banner.inner_text().startswith("Ready: ")


def test_a_broken_user_catalog_leaves_the_app_serving_the_models_it_was_given(tmp_path, tiny_model, new_page):
    config = tmp_path / "config"
    config.mkdir()
    (config / "ui_settings.json").write_text(json.dumps({**START_SETTINGS, "max_tokens": 8}))
    (config / "models.toml").write_text("[pairs.mine\ntarget = 'x'\n")  # an unclosed table header
    args = ["--target", str(tiny_model), "--draft", str(tiny_model), "--draft-as-is", "--threads", "1"]
    server = next(starting := serving(tmp_path, ["ui", "--no-browser"], args, {"HF_HUB_OFFLINE": "1"}))
    try:
        page = open_chat(new_page, server.url)
        assert settle(page, send(page, "Say hello."))[-1][0] == "done"
        page.get_by_role("tab", name="Models").click()
        note = page.locator("#sc-catalog-error")
        note.wait_for()
        assert str(config / "models.toml") in note.inner_text() and "is not valid TOML" in note.inner_text()
        from specchat.models import catalog

        shipped = catalog.load_catalog(Path(catalog.shipped_catalog()[0]))
        rows = page.locator("#sc-pairs tr[data-pair]").evaluate_all("els => els.map(e => e.dataset.pair)")
        assert rows == list(shipped.pairs)
    finally:
        starting.close()


def own_address() -> str:
    """This machine's address on its network (not loopback); skips where it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            # Connecting a UDP socket sends nothing: it picks the address the route to a documentation-only address
            # (RFC 5737) would leave from.
            probe.connect(("198.51.100.1", 9))
            address = probe.getsockname()[0]
        except OSError:
            address = "127.0.0.1"
    if ipaddress.ip_address(address).is_loopback:
        pytest.skip("this machine has no route off loopback: no address to serve beyond it on")
    return address


def event_names(page) -> set[str]:
    """The events the page's server will run, as its Gradio config lists them."""
    config = page.evaluate("() => fetch('config').then(r => r.json())")
    return {d.get("api_name") for d in config["dependencies"]}


def test_beyond_this_machine_without_a_login_the_models_tab_keeps_the_servers_files(start_app, new_page):
    address = own_address()
    server = start_app(address)
    assert f"warning: serving the app on {address} without --auth" in server.log.read_text()
    page = new_page(server.url)
    page.get_by_role("tab", name="Models").click()
    page.wait_for_selector("#sc-pairs tr[data-pair]")
    assert "--auth USER:PASSWORD" in page.locator("#sc-no-file-actions").inner_text()
    for button in ("#sc-download", "#sc-cancel", "#sc-remove", "#sc-add", "#sc-remove-model-button"):
        assert page.locator(button).count() == 0, button
    assert page.locator("#sc-load-pair").is_visible() and page.locator("#sc-load").is_visible()
    names = event_names(page)
    assert not FILE_ACTIONS & names and "load_pair" in names, names


def test_beyond_this_machine_with_a_login_the_page_asks_for_it_then_has_everything(start_app, new_page):
    server = start_app(own_address(), "--auth", "ada:lovelace")
    assert "without --auth" not in server.log.read_text()
    page = new_page(server.url)

    def log_in(password: str) -> None:
        page.get_by_label("username").fill("ada")
        page.get_by_label("password").fill(password)
        page.get_by_role("button", name="Login").click()

    log_in("not her password")
    page.get_by_text("Incorrect Credentials").wait_for()
    assert page.locator("#sc-pairs").count() == 0
    log_in("lovelace")
    page.wait_for_selector("#sc-pairs tr[data-pair]", timeout=60_000)  # an app with no model opens on the Models tab
    assert page.locator("#sc-download").is_visible() and page.locator("#sc-no-file-actions").count() == 0
    assert FILE_ACTIONS <= event_names(page)
