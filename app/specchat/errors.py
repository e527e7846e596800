"""Errors a user can act on: each carries one clear sentence, shown without a traceback."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Remedies:
    """How a front end words the remedies that are its own actions: commands on the command line, fields on a page."""

    add_file: Callable[[str | None], str]  # register a GGUF file (under the given model name, if any): "with ..."
    remove_model: Callable[[str], str]  # forget a local model, or delete a downloaded one: "run ..."
    other_name: str  # give another name than the one taken


COMMAND_LINE = Remedies(
    add_file=lambda name: f"with `specchat models add PATH{f' --name {name}' if name else ''}`",
    remove_model=lambda name: f"run `specchat models remove {name}`",
    other_name="choose another with --name",
)


class SpecchatError(Exception):
    """Base class: the message is meant for the user as is.

    A message whose remedy is a front end's own action is given as a function of the front end's Remedies: str()
    words it for the command line, worded() for any front end.
    """

    def __init__(self, message: str | Callable[[Remedies], str] = "") -> None:
        self._words = message if callable(message) else None
        super().__init__(message(COMMAND_LINE) if callable(message) else message)

    def worded(self, remedies: Remedies) -> str:
        return self._words(remedies) if self._words is not None else str(self)


class NotGGUFError(SpecchatError):
    pass


class ModelLoadError(SpecchatError):
    pass


class IncompatibleModelsError(SpecchatError):
    pass


class PromptTooLongError(SpecchatError):
    pass


class InvalidInputError(SpecchatError, ValueError):
    """Text or a setting a generation cannot run with; a ValueError too, as callers checking settings catch that."""
