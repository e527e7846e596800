"""A request's JSON -> what the engine is to run, or an ApiError that names what is wrong: pure, no server.

OpenAI's parameters where the engine has them, llama.cpp's extras (top_k, min_p, speculative.n_max), and
specchat's own `speculative` object. What the engine cannot do is refused with a 400 that says so, never ignored:
a client that asked for tools, logprobs or several choices would otherwise take a plain answer for what it asked.
Fields that change nothing in the answer (user, metadata, store...), and unknown ones, are ignored, as llama-server
ignores them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specchat.engine import FIXED_K_MODES, MODES, GenerationSettings, SamplingParams
from specchat.engine.calibration import K_LONG
from specchat.engine.text import check_text
from specchat.errors import InvalidInputError

# The longest fixed draft a request may ask for: auto mode's own longest (past it, each failed draft costs a verify
# batch of dozens of tokens).
MAX_K = K_LONG
DEFAULT_K = 4
# OpenAI's defaults: sampling at temperature 1 with a new seed each time, unless the request says otherwise.
DEFAULT_TEMPERATURE = 1.0
# Chat roles a chat template knows; OpenAI's "developer" is its newer name for the system role.
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# Parameters of features the engine lacks, with the values that ask for nothing (sent by some clients as defaults).
UNSUPPORTED = {
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "logit_bias": (None, {}),
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "response_format": (None, {"type": "text"}),
    "audio": (None,),
    "modalities": (None, ["text"]),
    "prediction": (None,),
    "echo": (None, False),
    "suffix": (None, ""),
    "best_of": (None, 1),
}


class ApiError(Exception):
    """An error as OpenAI's API reports it: an HTTP status and {"error": {message, type, param, code}}."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.message, self.param, self.code, self.status, self.type = message, param, code, status, type
        self.headers = headers

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Ask:
    """A validated request: the messages (chat) or the prompt (completion), and how to answer it."""

    settings: GenerationSettings
    messages: tuple[dict, ...] | None = None  # chat: {"role", "content"} with text content only
    prompt: str | None = None  # completion
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    token_kinds: bool = False  # return_token_kinds: each streamed chunk says where its token came from

    @property
    def chat(self) -> bool:
        return self.messages is not None

    @property
    def prompt_param(self) -> str:
        """The parameter that holds the prompt: what a prompt too long for the context is blamed on."""
        return "messages" if self.chat else "prompt"


def chat_request(body: object, default_max_tokens: int) -> Ask:
    """POST /v1/chat/completions. default_max_tokens: the answer's limit when the request sets none."""
    body = _object(body)
    _refuse_unsupported(body)
    return Ask(settings=settings_of(body, default_max_tokens), messages=messages_of(body), **_streaming(body))


def completion_request(body: object, default_max_tokens: int) -> Ask:
    """POST /v1/completions."""
    body = _object(body)
    _refuse_unsupported(body)
    return Ask(settings=settings_of(body, default_max_tokens), prompt=prompt_of(body), **_streaming(body))


def _object(body: object) -> dict:
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    return body


def _refuse_unsupported(body: dict) -> None:
    for name, neutral in UNSUPPORTED.items():
        value = body.get(name)
        if not any(value == n and type(value) is type(n) for n in neutral):
            raise ApiError(f"{name} is not supported: specchat's engine cannot do it", name, "unsupported_parameter")
    n = body.get("n")
    if n is not None and n != 1:
        raise ApiError("n must be 1: the engine makes one answer per request", "n", "unsupported_parameter")


def _streaming(body: dict) -> dict:
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ApiError("stream_options is only allowed when stream is true", "stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise ApiError("stream_options must be an object", "stream_options")
        include_usage = _bool(options, "include_usage", "stream_options.include_usage")
    token_kinds = _bool(body, "return_token_kinds")
    if token_kinds and not stream:
        raise ApiError(
            "return_token_kinds needs stream: true (each streamed chunk says its token's kind)", "return_token_kinds"
        )
    return {"stream": stream, "include_usage": include_usage, "token_kinds": token_kinds}


def settings_of(body: dict, default_max_tokens: int) -> GenerationSettings:
    """The sampling, length, stop and speculation parameters of a request."""
    temperature = _number(body, "temperature", DEFAULT_TEMPERATURE, "a finite number >= 0", lambda x: x >= 0)
    top_p = _number(body, "top_p", 1.0, "a number in [0, 1]", lambda x: 0 <= x <= 1)
    min_p = _number(body, "min_p", 0.0, "a number in [0, 1]", lambda x: 0 <= x <= 1)
    top_k = _integer(body, "top_k", 0, "an integer >= 0 (0: off)", lambda x: x >= 0)
    seed = _integer(body, "seed", None, "an integer >= 0, or -1 for a random seed", lambda x: x >= -1)
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _integer(body, name, default_max_tokens, "an integer >= 1", lambda x: x >= 1)
    mode, k = speculation_of(body)
    return GenerationSettings(
        mode=mode,
        k=k,
        sampling=SamplingParams(temperature, top_k, top_p, min_p),
        seed=None if seed == -1 else seed,
        max_tokens=max_tokens,
        stop=stop_of(body),
    )


def speculation_of(body: dict) -> tuple[str, int]:
    """(mode, k) from `speculative` {"mode", "k", "n_max"} and llama.cpp's flat "speculative.n_max"; default auto.

    n_max is llama.cpp's draft length: 0 decodes plainly, more drafts that many tokens (speculative mode unless the
    mode says lookup). k is the draft length of speculative and lookup modes only: auto picks its own.
    """
    spec = body.get("speculative")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise ApiError('speculative must be an object such as {"mode": "auto"}', "speculative")
    unknown = sorted(set(spec) - {"mode", "k", "n_max"})
    if unknown:
        raise ApiError(f"speculative.{unknown[0]} is not supported; speculative takes mode, k and n_max", "speculative")
    flat = {key.removeprefix("speculative."): body[key] for key in body if key.startswith("speculative.")}
    if set(flat) - {"n_max"}:
        key = "speculative." + sorted(set(flat) - {"n_max"})[0]
        raise ApiError(f"{key} is not supported; of llama.cpp's speculative.* parameters specchat takes n_max", key)
    spec = {**spec, **flat}
    mode = spec.get("mode")
    if mode is not None and mode not in MODES:
        raise ApiError(f"speculative.mode must be one of {', '.join(MODES)}, not {mode!r}", "speculative.mode")
    k = _integer(spec, "k", None, f"an integer in [1, {MAX_K}]", lambda x: 1 <= x <= MAX_K, "speculative.k")
    n_max = _integer(spec, "n_max", None, f"an integer in [0, {MAX_K}]", lambda x: 0 <= x <= MAX_K, "speculative.n_max")
    if k is not None and n_max is not None and n_max != k:
        raise ApiError("speculative.k and speculative.n_max are the same draft length: give one", "speculative.k")
    if n_max == 0:
        if mode not in (None, "plain"):
            raise ApiError(f"speculative.n_max 0 means plain decoding, not {mode} mode", "speculative.n_max")
        return "plain", DEFAULT_K
    k = k if k is not None else n_max
    if k is None:
        return mode or "auto", DEFAULT_K
    mode = mode or "speculative"
    if mode not in FIXED_K_MODES:
        does = "picks its own" if mode == "auto" else "drafts nothing"
        raise ApiError(f"a draft length is for speculative and lookup modes; {mode} mode {does}", "speculative.k")
    return mode, k


def stop_of(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return tuple(s for s in stop if s)
    raise ApiError("stop must be a string or a list of strings", "stop")


def messages_of(body: dict) -> tuple[dict, ...]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty list of {role, content} objects", "messages")
    return tuple(_message(m, f"messages[{i}]") for i, m in enumerate(messages))


def _message(message: object, where: str) -> dict:
    if not isinstance(message, dict):
        raise ApiError(f"{where} must be an object with role and content", where)
    role = message.get("role")
    if role in ("tool", "function") or message.get("tool_calls") or message.get("function_call"):
        raise ApiError(f"{where}: tool and function calls are not supported", f"{where}.role", "unsupported_parameter")
    if not isinstance(role, str) or role not in ROLES:
        raise ApiError(f"{where}.role must be one of {', '.join(ROLES)}, not {role!r}", f"{where}.role")
    content = message.get("content")
    if content is None and role == "assistant":  # OpenAI's shape of an assistant turn that said nothing
        content = ""
    text = _text_content(content, f"{where}.content", role == "assistant")
    _unicode(text, f"{where}.content")
    return {"role": ROLES[role], "content": text}


# Parts that carry what a text model cannot read.
_MEDIA_PARTS = {"image_url", "input_image", "image", "input_audio", "audio", "file", "input_file", "video_url"}


def _text_content(content: object, where: str, assistant: bool) -> str:
    """A message's text: a string, or a list of text parts (joined by newlines), an assistant's refusal parts too;
    images and audio are refused."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(f"{where} must be a string or a list of text parts", where)
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        field = "refusal" if assistant and kind == "refusal" else "text"
        if kind in _MEDIA_PARTS:
            raise ApiError(
                f"{where}[{i}]: {kind!r} content is not supported: the models are text only",
                f"{where}[{i}]",
                "unsupported_content",
            )
        if kind not in ("text", field):
            what = f"a part of type {kind!r}" if isinstance(kind, str) else "a part with no type"
            raise ApiError(f'{where}[{i}]: {what}; text goes in {{"type": "text", "text": ...}} parts', f"{where}[{i}]")
        if not isinstance(part.get(field), str):
            raise ApiError(f"{where}[{i}].{field} must be a string", f"{where}[{i}].{field}")
        texts.append(part[field])
    return "\n".join(texts)


def _unicode(text: str, param: str) -> None:
    try:
        check_text(text, param)
    except InvalidInputError as e:
        raise ApiError(str(e), param) from None


def prompt_of(body: dict) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str) for p in prompt):
        raise ApiError(
            "one prompt per request: the engine makes one answer at a time", "prompt", "unsupported_parameter"
        )
    if isinstance(prompt, list) and prompt and all(isinstance(p, int | list) for p in prompt):
        raise ApiError(
            "a prompt of token ids is not supported: send the prompt as text", "prompt", "unsupported_parameter"
        )
    if not isinstance(prompt, str) or not prompt:
        raise ApiError("prompt must be a non-empty string", "prompt")
    _unicode(prompt, "prompt")
    return prompt


def _bool(body: dict, name: str, param: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(f"{param or name} must be true or false", param or name)
    return value


def _number(body: dict, name: str, default: float, wanted: str, ok, param: str | None = None) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        number = math.nan
    else:
        try:
            number = float(value)
        except OverflowError:  # a whole number past float's range
            number = math.inf
    if not math.isfinite(number) or not ok(number):
        raise ApiError(f"{param or name} must be {wanted}, not {value!r}", param or name)
    return number


def _integer(body: dict, name: str, default: int | None, wanted: str, ok, param: str | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not ok(value):
        raise ApiError(f"{param or name} must be {wanted}, not {value!r}", param or name)
    return value
