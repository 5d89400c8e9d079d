"""The peer `proxy_overhead.py` measures the capture proxy against: a bare aiohttp reverse proxy
on uvloop that forwards each request and streams each response back a read at a time, and
records nothing (the same client session settings as capture.proxy, no parsing, no queue).

usage: python benchmarks/bare_proxy.py UPSTREAM_URL   (prints `listening on http://HOST:PORT`)
"""

from __future__ import annotations

import asyncio
import signal
import sys

_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


async def main(upstream: str) -> None:
    import aiohttp
    from aiohttp import web

    session = aiohttp.ClientSession(
        auto_decompress=False,
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
        timeout=aiohttp.ClientTimeout(total=None, sock_read=600),
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
    )

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP]
        async with session.request(
            request.method, upstream + request.path_qs, data=body, headers=headers, allow_redirects=False
        ) as up:
            resp = web.StreamResponse(status=up.status, reason=up.reason)
            for k, v in up.headers.items():
                if k.lower() not in _HOP:
                    resp.headers.add(k, v)
            await resp.prepare(request)
            async for data in up.content.iter_any():
                await resp.write(data)
            await resp.write_eof()
            return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, backlog=1024).start()
    print(f"listening on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    await session.close()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(sys.argv[1].rstrip("/")))
