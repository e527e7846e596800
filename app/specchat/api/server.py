"""The OpenAI-compatible API over a process's engine host: /health, /v1/models, /v1/chat/completions, /v1/completions.

Requests take turns on the host's line with the chat tab's. Each answer is made on a thread of its own
(generation.py); a client that goes away stops its answer at the next token and frees the engine.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import Receive, Scope, Send

from specchat.api.generation import ClientGone, Generation, Start, log
from specchat.api.params import ApiError, Ask, chat_request, completion_request
from specchat.api.shapes import Reply, token_kind
from specchat.engine import Engine, Reading, TokenEvent
from specchat.errors import PromptTooLongError, SpecchatError
from specchat.host import EngineHost
from specchat.logs import LOGGER
from specchat.models import catalog

# What a client that cannot be answered now hears, by the host's state.
_UNAVAILABLE = {
    "empty": "no model is loaded: start specchat with --target, --draft or --pair, or load one in the app's Models tab",
    "loading": "the model is still loading; try again when GET /health says ok",
}
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# On a 503 while the model loads: when to ask again, in seconds (RFC 9110), so that clients wait rather than fail.
_RETRY_WHILE_LOADING = {"Retry-After": "1"}


def create_app(host: EngineHost, api_key: str | None = None) -> FastAPI:
    """The API as its own FastAPI app; `specchat ui` mounts the chat app into it. api_key: demanded as
    `Authorization: Bearer KEY` by every route but /health."""
    app = FastAPI(title="specchat", docs_url=None, redoc_url=None, openapi_url=None)  # no docs from a CDN
    api = Api(host)
    app.add_exception_handler(ApiError, _error_response)
    app.add_exception_handler(HTTPException, _route_error)
    # HEAD too, as HTTP servers answer it wherever they answer GET: health checks and monitors ask with it.
    app.add_api_route("/health", api.health, methods=["GET", "HEAD"])
    router = APIRouter(dependencies=[Depends(_bearer(api_key))] if api_key else [])
    router.add_api_route("/v1/models", api.models, methods=["GET", "HEAD"])
    router.add_api_route("/v1/models/{model_id:path}", api.model, methods=["GET", "HEAD"])
    router.add_api_route("/v1/chat/completions", api.chat_completions, methods=["POST"])
    router.add_api_route("/v1/completions", api.completions, methods=["POST"])
    app.include_router(router)
    # Every other /v1 path is the API's too: under `specchat ui` Gradio's app, mounted at the root, would answer it
    # in its own shape. Last, so that the routes above match first.
    app.add_route("/v1/{path:path}", _unserved(router.routes), methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    return app


def _unserved(routes: list[BaseRoute]) -> Callable[[Request], Awaitable[Response]]:
    """A 405 where one of these routes serves the path by another method (as the router answers when no route takes
    the request whole), else a 404; both in OpenAI's error shape, through _route_error."""

    async def unserved(request: Request) -> Response:
        partly = [r for r in routes if r.matches(request.scope)[0] is Match.PARTIAL]
        if partly:
            allowed = sorted({m for r in partly for m in getattr(r, "methods", ())})
            raise HTTPException(405, headers={"Allow": ", ".join(allowed)})
        raise HTTPException(404)

    return unserved


async def _error_response(_request: Request, error: Exception) -> Response:
    assert isinstance(error, ApiError)
    # ASCII JSON: a message may quote the request, lone surrogates included, which UTF-8 cannot encode.
    body = json.dumps(error.body())
    return Response(body, status_code=error.status, headers=error.headers, media_type="application/json")


async def _route_error(request: Request, error: Exception) -> Response:
    """A path or method the API does not serve, in OpenAI's error shape as every other error (a 404 or a 405)."""
    assert isinstance(error, HTTPException)
    what = f"{error.detail}: {request.method} {request.url.path}"
    return await _error_response(request, ApiError(what, status=error.status_code, headers=error.headers))


def _bearer(key: str):
    expected = key.encode()

    async def check(request: Request) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
            raise ApiError(
                "a valid API key is needed: send it as Authorization: Bearer KEY", code="invalid_api_key", status=401
            )

    return check


class Api:
    def __init__(self, host: EngineHost):
        self.host = host
        self._names: tuple[tuple[Path, Path | None], tuple[str, str | None, str | None]] | None = None

    # Routes

    async def health(self) -> JSONResponse:
        """200 once a model is ready, else 503 (loading, none loaded, or its load failed), as llama-server does."""
        status = self.host.status()
        body = {
            "status": "ok" if status.state == "ready" else status.state,
            "message": status.message,
            "requests_in_line": self.host.in_line(),
        }
        headers = _RETRY_WHILE_LOADING if status.state == "loading" else None
        return JSONResponse(body, status_code=200 if status.state == "ready" else 503, headers=headers)

    async def models(self) -> dict:
        """The pair served (or loading), named as `specchat models list` names it."""
        model = self.model_object()
        return {"object": "list", "data": [model] if model else []}

    async def model(self, model_id: str) -> dict:
        """/v1/models/{id}: the pair served, by its id (the openai client's `models.retrieve`)."""
        model = self.model_object()
        if model is None or model["id"] != model_id:
            raise ApiError(f"the model {model_id!r} does not exist", "model", "model_not_found", status=404)
        return model

    def model_object(self) -> dict | None:
        """The pair served (or loading) as OpenAI describes a model; None where none is."""
        status = self.host.status()
        names = self.names()
        if names is None or status.state not in ("ready", "loading"):
            return None
        target, draft, pair = names
        engine = self.host.engine
        return {
            "id": pair or target,
            "object": "model",
            "created": int(status.target.stat().st_mtime),
            "owned_by": "specchat",
            "target": target,
            "draft": draft,
            "status": status.state,
            "context_length": engine.target.n_ctx if engine is not None else None,
        }

    async def chat_completions(self, request: Request) -> Response:
        engine = self.engine()
        ask = chat_request(await _body(request), engine.target.n_ctx)
        return await self.answer(request, engine, ask)

    async def completions(self, request: Request) -> Response:
        engine = self.engine()
        ask = completion_request(await _body(request), engine.target.n_ctx)
        return await self.answer(request, engine, ask)

    # Parts

    def engine(self) -> Engine:
        engine = self.host.engine
        if engine is None:
            status = self.host.status()
            message = _UNAVAILABLE.get(status.state, status.message)
            headers = _RETRY_WHILE_LOADING if status.state == "loading" else None
            raise ApiError(message, code=f"model_{status.state}", status=503, type="server_error", headers=headers)
        return engine

    def names(self) -> tuple[str, str | None, str | None] | None:
        """(target, draft, pair) names of the pair loaded or loading: from the catalog, read once per pair."""
        status = self.host.status()
        if status.target is None:
            return None
        files = (status.target, status.draft)
        if self._names is None or self._names[0] != files:
            try:
                names = catalog.names_of(*files)
            except SpecchatError:  # a broken catalog file must not break serving: name the files
                names = (status.target.stem, status.draft.stem if status.draft else None, None)
            self._names = (files, names)
        return self._names[1]

    def model_id(self) -> str:
        names = self.names()
        return (names[2] or names[0]) if names else "specchat"

    async def answer(self, request: Request, engine: Engine, ask: Ask) -> Response:
        reply = Reply(chat=ask.chat, model=self.model_id(), include_usage=ask.include_usage)
        gen = Generation(self.host, engine, _start(ask), "chat" if ask.chat else "completion")
        try:
            # Waiting in line happens here, before a status is sent: a prompt too long is still a 400.
            first = await gen.next(request.is_disconnected)
            if not ask.stream:
                text = []
                event = first
                while event is not None:
                    text.append(event.text)
                    event = await gen.next(request.is_disconnected)
        except ClientGone:
            return Response(status_code=499)  # nginx's code for a client that left: nobody reads it
        except Exception as e:
            gen.stop()
            raise _api_error(e, ask.prompt_param) from None
        if not ask.stream:
            gen.log_end()
            return JSONResponse(reply.whole("".join(text), gen.prompt_tokens, gen.stats))
        return _ClosingStream(
            self._stream(gen, reply, first, ask), media_type="text/event-stream", headers=_SSE_HEADERS
        )

    async def _stream(self, gen: Generation, reply: Reply, event: TokenEvent, ask: Ask) -> AsyncGenerator[str]:
        """The answer as server-sent events. When the client goes away, Starlette stops iterating (on its disconnect
        message, or a failed send) and _ClosingStream closes this generator: the finally stops the generation."""
        finished = False
        try:
            if reply.chat:
                yield _sse(reply.chunk("", first=True))  # OpenAI's first chunk: the role, no text yet
            while event is not None:
                if event.text or ask.token_kinds:
                    chunk = reply.chunk(event.text)
                    yield _sse({**chunk, "token": token_kind(event)} if ask.token_kinds else chunk)
                try:
                    event = await gen.next()
                except Exception as e:  # mid-stream, the status is sent: the error comes as an event
                    error, finished = _api_error(e, ask.prompt_param), True
                    log(f"{gen.label}: failed after {gen.stats.tokens if gen.stats else 0} tokens: {error.message}")
                    yield _sse(error.body())
                    return
            yield _sse(reply.finishing_chunk(gen.stats))
            if ask.include_usage:
                yield _sse(reply.usage_chunk(gen.prompt_tokens, gen.stats))
            finished = True
            gen.log_end()
            yield "data: [DONE]\n\n"
        finally:
            if not finished:  # the client went away
                gen.stop()


class _ClosingStream(StreamingResponse):
    """Closes its body generator however the response ends. Starlette leaves it suspended when the client goes away
    while a chunk is being sent; its cleanup (stopping the generation) would then wait for the garbage collector."""

    body_iterator: AsyncGenerator[str]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()


def _start(ask: Ask) -> Start:
    def start(engine: Engine, reading: Reading):
        prompt = engine.chat_prompt(ask.messages) if ask.chat else engine.text_prompt(ask.prompt)
        return prompt, engine.generate_tokens(prompt, ask.settings, reading)

    return start


async def _body(request: Request) -> object:
    try:
        return json.loads(await request.body())
    except (ValueError, RecursionError) as e:  # RecursionError: arrays or objects nested thousands deep
        raise ApiError(f"the request body is not valid JSON: {e}") from None


def _api_error(e: Exception, prompt: str) -> ApiError:
    """What the engine refused (a prompt over the context, speculative mode without a draft...) is the request's
    fault: 400. Anything else is the server's. prompt: the parameter that held the prompt."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, PromptTooLongError):
        return ApiError(str(e), prompt, "context_length_exceeded")
    if isinstance(e, SpecchatError):
        return ApiError(str(e))
    LOGGER.error("api: the engine failed", exc_info=e)
    return ApiError(f"the engine failed: {type(e).__name__}: {e}", status=500, type="server_error")


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
