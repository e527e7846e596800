"""How `specchat ui` serves: a message sent while the model loads, and a page served beyond this machine (with a login,
or without one and without the Models tab's file actions)."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from test_chat_app import RECORDER, send, settle, user_messages

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
