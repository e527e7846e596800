"""Errors a user can act on: each carries one clear sentence, shown without a traceback."""


class SpecchatError(Exception):
    """Base class: the message is meant for the user as is."""


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
