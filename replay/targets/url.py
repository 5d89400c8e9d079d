"""A target given by URL: normalizing the base URL, asking what it serves, waiting until it answers.

Engines that the suite starts itself (the embedded engine, llama.cpp, vLLM) build on this.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from replay.errors import TargetError

__all__ = ["base_url", "served_models", "poll_ready", "wait_until_ready"]


def base_url(url: str) -> str:
    """'http://h:8000/v1/' -> 'http://h:8000' (the runner appends /v1/... itself)."""
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def _get_json(url: str, timeout_s: float) -> object:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (http only, validated)
        return json.loads(resp.read())


def served_models(url: str, timeout_s: float = 5.0) -> list[str]:
    """Model ids listed by GET /v1/models; [] when the target does not list any."""
    try:
        data = _get_json(base_url(url) + "/v1/models", timeout_s)
    except (urllib.error.URLError, OSError, ValueError):
        return []
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        return []
    return [m["id"] for m in data["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]


def poll_ready(url: str, timeout_s: float, path: str = "/health",
               alive: Callable[[], None] | None = None) -> str | None:
    """Poll GET `path` until it answers 200 (returns None) or `timeout_s` passes (returns the last
    failure, e.g. 'HTTP 503'). `alive()` runs before each try and may raise to give up early."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        if alive is not None:
            alive()
        try:
            with urllib.request.urlopen(base_url(url) + path, timeout=2.0) as resp:  # noqa: S310
                if resp.status == 200:
                    return None
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
        except (urllib.error.URLError, OSError) as e:
            last = str(getattr(e, "reason", e))
        if time.monotonic() >= deadline:
            return last
        time.sleep(0.1)


def wait_until_ready(url: str, timeout_s: float = 30.0, path: str = "/health") -> None:
    """Poll GET `path` until it answers 200, or raise TargetError naming the URL."""
    last = poll_ready(url, timeout_s, path)
    if last is not None:
        raise TargetError(f"{url}: not ready after {timeout_s:.0f}s ({last})")
