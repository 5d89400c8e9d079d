"""A real HTTP server on 127.0.0.1 for tests: streams OpenAI-style SSE with scripted delays and faults.

Each request's JSON body may carry `"x_fault"` to pick its behaviour:
  ok (default)  `max_tokens` content chunks, a usage chunk, [DONE]
  http500 / http404 / http429   an error status with a JSON error body
  malformed     one good chunk, then an event that is not JSON
  reset         two chunks, then the connection is dropped mid-stream
  stall         one chunk, then silence for `stall_s` seconds
  no_done       chunks and usage, then the stream ends without [DONE]
  slow_end      the whole stream, then `stall_s` seconds before its chunked terminator
  json          a non-streamed JSON completion
  close_before_headers / reset_before_headers   the connection is closed (FIN) / reset (RST)
                before any byte of the response
`concurrency` bounds the responses in progress (the rest queue), which makes a server that saturates.
The server-wide `headers_delay_s` holds every response before its headers (a stalled server), and
`chunk_delay_s` spaces the chunks. With `echo` set, the answer's text is the last user message's
(streamed a word at a time): a model that repeats what it was told. With `api_key` set, every endpoint but /health answers 401
unless sent `Authorization: Bearer <api_key>`; `models_status` makes GET /v1/models answer that
error status instead of the list. Every arrival is recorded with its wall-clock time.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Arrival:
    t_unix_ns: int
    body: dict
    client_port: int = 0  # the client end's port: one per connection
    headers: dict = field(default_factory=dict)  # the request's headers
    raw: bytes = b""  # the request's body as it came


@dataclass
class ScriptedServer:
    headers_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    stall_s: float = 30.0
    cached_tokens: int = 7
    concurrency: int = 0  # > 0: at most this many responses in progress; the rest queue (a saturable server)
    api_key: str | None = None  # set: requests without `Authorization: Bearer <api_key>` get 401
    models_status: int = 200  # not 200: GET /v1/models answers this status
    echo: bool = False  # answer with the last user message's text
    models_requests: list[dict] = field(default_factory=list)  # the headers of each GET /v1/models
    arrivals: list[Arrival] = field(default_factory=list)
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _slots: asyncio.Semaphore | None = None
    _runner: web.AppRunner | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- handlers -------------------------------------------------------------------------------
    def _unauthorized(self, request: web.Request) -> web.Response | None:
        if self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}":
            return None
        return web.json_response({"error": {"message": "invalid api key", "code": 401}}, status=401)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        t = time.time_ns()
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        raw = await request.read()
        body = json.loads(raw)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.arrivals.append(Arrival(t, body, peer[1] if peer else 0, dict(request.headers), raw))
        if self._slots is None:
            return await self._respond(request, body)
        async with self._slots:
            return await self._respond(request, body)

    async def _respond(self, request: web.Request, body: dict) -> web.StreamResponse:
        fault = body.get("x_fault", "ok")
        if fault in ("close_before_headers", "reset_before_headers"):
            if fault == "reset_before_headers":  # linger 0: close sends RST
                request.transport.get_extra_info("socket").setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
            request.transport.close()
            raise asyncio.CancelledError  # no response: the connection is gone
        if self.headers_delay_s:
            await asyncio.sleep(self.headers_delay_s)
        if fault.startswith("http"):
            code = int(fault[4:])
            return web.json_response({"error": {"message": f"scripted {code}", "code": code}}, status=code)
        n = int(body.get("max_tokens") or 4)
        pieces = ["tok"] * n
        if self.echo:
            said = (
                next(
                    (
                        m.get("content")
                        for m in reversed(body.get("messages") or [])
                        if isinstance(m, dict) and m.get("role") == "user"
                    ),
                    None,
                )
                or body.get("prompt")
                or ""
            )
            pieces = [w + " " for w in str(said).split(" ")]
            n = len(pieces)
        usage = {"prompt_tokens": 11, "completion_tokens": n, "prompt_tokens_details": {"cached_tokens": self.cached_tokens}}
        if fault == "json" or not body.get("stream"):
            content = "".join(pieces) if self.echo else "x" * n
            return web.json_response(
                {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}], "usage": usage}
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def event(obj) -> None:
            data = obj if isinstance(obj, str) else json.dumps(obj)
            await resp.write(f"data: {data}\n\n".encode())

        for i, piece in enumerate(pieces):
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            await event({"choices": [{"index": 0, "delta": {"content": piece}}]})
            if fault == "malformed":
                await event("{not json")
                return resp
            if fault == "reset" and i == 1:
                request.transport.abort()
                return resp
            if fault == "stall":
                await asyncio.sleep(self.stall_s)
        await event({"choices": [], "usage": usage})
        if fault != "no_done":
            await event("[DONE]")
        if fault == "slow_end":
            await asyncio.sleep(self.stall_s)
        await resp.write_eof()
        return resp

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, request: web.Request) -> web.Response:
        self.models_requests.append(dict(request.headers))
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        if self.models_status != 200:
            return web.json_response({"error": {"message": "scripted"}}, status=self.models_status)
        return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "ScriptedServer":
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            if self.concurrency > 0:
                self._slots = asyncio.Semaphore(self.concurrency)
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self._completions)
            app.router.add_post("/v1/completions", self._completions)
            app.router.add_get("/health", self._health)
            app.router.add_get("/v1/models", self._models)
            self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=4096)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True, name="scripted-server")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("scripted server did not start")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shutdown() -> None:
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._loop = None
