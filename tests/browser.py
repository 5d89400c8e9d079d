"""Headless Chromium for tests: started on 127.0.0.1 with its own profile, driven over the Chrome
DevTools Protocol (a websocket), killed when the test ends.

``load_page(path)`` opens a local file and returns what a person's browser would have shown and
complained about: the console errors, the uncaught exceptions, failed loads, and the page's
images (loaded or not).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["find_chromium", "PageLoad", "load_page"]

START_TIMEOUT_S = 30.0
LOAD_TIMEOUT_S = 30.0


def find_chromium() -> str | None:
    """Debian's ``chromium`` (or another Chromium / Chrome on PATH), None when absent."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageLoad:
    title: str = ""
    images: list[dict] = field(default_factory=list)  # {kind, alt, complete, width}
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)  # failed resource loads, blocked content...
    resources: list[str] = field(default_factory=list)  # URLs the page fetched (Resource Timing)
    text: str = ""  # document.body.innerText


def _port(user_data: Path, proc: subprocess.Popen) -> int:
    """The DevTools port Chromium chose (--remote-debugging-port=0), from DevToolsActivePort."""
    marker = user_data / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} before it was ready")
        if marker.is_file():
            lines = marker.read_text().splitlines()
            if lines and lines[0].strip().isdigit():
                return int(lines[0])
        time.sleep(0.05)
    raise TimeoutError(f"chromium wrote no {marker} within {START_TIMEOUT_S:g} s")


_PAGE_STATE = """JSON.stringify({
  title: document.title,
  images: Array.from(document.images).map(i => ({kind: i.dataset.kind || null, alt: i.alt,
                                                  complete: i.complete, width: i.naturalWidth})),
  resources: performance.getEntriesByType('resource').map(e => e.name),
  text: document.body ? document.body.innerText : ''
})"""


async def _drive(port: int, url: str) -> PageLoad:
    import aiohttp

    out = PageLoad()
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
            targets = await r.json()
        page = next(t for t in targets if t.get("type") == "page")
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            ids = iter(range(1, 1_000_000))
            replies: dict[int, asyncio.Future] = {}
            loaded = asyncio.Event()

            async def call(method: str, **params) -> dict:
                i = next(ids)
                replies[i] = asyncio.get_running_loop().create_future()
                await ws.send_json({"id": i, "method": method, "params": params})
                return await asyncio.wait_for(replies[i], LOAD_TIMEOUT_S)

            async def read() -> None:
                async for msg in ws:
                    data = json.loads(msg.data)
                    if "id" in data and data["id"] in replies:
                        if "error" in data:
                            replies[data["id"]].set_exception(RuntimeError(f"CDP error: {data['error']}"))
                        else:
                            replies[data["id"]].set_result(data.get("result", {}))
                        continue
                    method, params = data.get("method"), data.get("params", {})
                    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                        out.console_errors.append(
                            " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", []))
                        )
                    elif method == "Runtime.exceptionThrown":
                        details = params.get("exceptionDetails", {})
                        out.exceptions.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
                    elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                        entry = params["entry"]
                        out.log_errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
                    elif method == "Page.loadEventFired":
                        loaded.set()

            reader = asyncio.create_task(read())
            try:
                for domain in ("Runtime", "Log", "Page"):
                    await call(f"{domain}.enable")
                nav = await call("Page.navigate", url=url)
                if nav.get("errorText"):
                    raise RuntimeError(f"chromium could not open {url}: {nav['errorText']}")
                await asyncio.wait_for(loaded.wait(), LOAD_TIMEOUT_S)
                await asyncio.sleep(0.2)  # late console messages and exceptions
                state = await call("Runtime.evaluate", expression=_PAGE_STATE, returnByValue=True)
                values = json.loads(state["result"]["value"])
                out.title, out.images, out.resources, out.text = (
                    values["title"],
                    values["images"],
                    values["resources"],
                    values["text"],
                )
            finally:
                reader.cancel()
    return out


def load_page(chromium: str, path: Path) -> PageLoad:
    """Open ``path`` in a fresh headless Chromium (its own profile in a temporary folder) and
    report how it loaded. The browser is killed before this returns, whatever happened."""
    with tempfile.TemporaryDirectory(prefix="chromium-") as user_data:
        args = [
            chromium,
            "--headless",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={user_data}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
            "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox (CI runs as root)
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            port = _port(Path(user_data), proc)
            return asyncio.run(asyncio.wait_for(_drive(port, Path(path).resolve().as_uri()), 2 * LOAD_TIMEOUT_S))
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the browser and its renderer / GPU / zygote children
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if proc.stderr is not None:
                proc.stderr.close()
