"""A target given by URL: normalizing the base URL, checking that it serves, waiting until it answers.

Engines that the suite starts itself (the embedded engine, llama.cpp, vLLM) build on this.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from replay.errors import ConfigError, TargetError

__all__ = ["base_url", "check_target", "poll_ready", "ssl_context", "reset_prefix_cache", "RESET_PATHS"]

# where engines take a request to drop their prefix cache: vLLM (with VLLM_SERVER_DEV_MODE=1) and the
# embedded engine, SGLang
RESET_PATHS = ("/reset_prefix_cache", "/flush_cache")

# answers to GET /v1/models that mean "this server does not list its models", not "wrong target"
_NO_MODEL_LIST = (404, 405)


def base_url(url: str) -> str:
    """'http://h:8000/v1/' -> 'http://h:8000' (the runner appends /v1/... itself)."""
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def ssl_context(ca_cert: str | None = None, insecure: bool = False) -> ssl.SSLContext:
    """How an https server's certificate is checked, as the runner checks it (replay_core's tls.rs):
    against the system's root certificates, or the certificates of the PEM file `ca_cert` alone, or
    not at all (`insecure`: the connection is still encrypted). ConfigError when `ca_cert` holds
    no certificate."""
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cafile=ca_cert)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"--ca-cert: '{ca_cert}' holds no usable PEM certificate ({e.strerror or e})") from None


def _unreachable(url: str, e: BaseException, timeout_s: float) -> TargetError:
    reason = getattr(e, "reason", e)
    if isinstance(reason, ssl.SSLCertVerificationError):
        why = reason.verify_message or reason.reason or "not trusted"
        return TargetError(
            f"{url}: TLS certificate not accepted ({why}): --ca-cert FILE trusts a private CA, --insecure skips the check"
        )
    if isinstance(reason, ssl.SSLError):
        return TargetError(f"{url}: TLS handshake failed ({reason.reason or reason})")
    if isinstance(reason, ConnectionRefusedError):
        return TargetError(f"{url}: connection refused (is the server running, and on this port?)")
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return TargetError(f"{url}: no answer to GET /v1/models within {timeout_s:g}s")
    return TargetError(f"{url}: cannot connect ({reason})")


def check_target(
    url: str, *, headers: Sequence[tuple[str, str]] = (), timeout_s: float = 10.0, context: ssl.SSLContext | None = None
) -> list[str] | None:
    """Check that `url` answers as an OpenAI-compatible server, and list the models it serves.

    Sends GET /v1/models with `headers` (:meth:`RunConfig.request_headers`: the API key and
    --header); an https server's certificate is checked under `context` (:func:`ssl_context`,
    default the system's roots). Returns the model ids it
    lists ([] when the answer lists none), or None when it answers 404 or 405: some servers do not
    list their models, so the replay goes ahead and a wrong path shows up as failed requests.
    Raises TargetError, one line naming the URL, when the connection is refused, the host is
    unknown, the certificate is not trusted, nothing answers within `timeout_s`, or the server
    answers any other error status (401 / 403: the API key is missing or wrong).
    """
    request = urllib.request.Request(base_url(url) + "/v1/models", headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as resp:  # noqa: S310 (http(s), validated)
            body = resp.read()
    except urllib.error.HTTPError as e:
        if e.code in _NO_MODEL_LIST:
            return None
        hint = ": check --api-key (or $OPENAI_API_KEY) and --header" if e.code in (401, 403) else ""
        raise TargetError(f"{url}: GET /v1/models answered HTTP {e.code} ({e.reason}){hint}") from None
    except (urllib.error.URLError, OSError) as e:
        raise _unreachable(url, e, timeout_s) from None
    try:
        data = json.loads(body)
    except ValueError:
        return []
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        return []
    return [m["id"] for m in data["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]


def reset_prefix_cache(
    url: str, *, headers: Sequence[tuple[str, str]] = (), timeout_s: float = 10.0, context: ssl.SSLContext | None = None
) -> str:
    """Ask the server at `url` to drop its prefix cache (POST each of :data:`RESET_PATHS` until one
    answers 2xx). Returns what happened, in words: "reset (POST /reset_prefix_cache)", or "not
    reset: ..." naming what each path answered. Never raises: a server without the endpoint is
    replayed with its cache as it is, and the caller records that."""
    tried = []
    for path in RESET_PATHS:
        request = urllib.request.Request(base_url(url) + path, data=b"", headers=dict(headers), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=context):  # noqa: S310 (http(s), validated)
                return f"reset (POST {path})"
        except urllib.error.HTTPError as e:
            tried.append(f"{path} answered HTTP {e.code}")
        except (urllib.error.URLError, OSError) as e:
            tried.append(f"{path}: {getattr(e, 'reason', e)}")
    return "not reset: " + "; ".join(tried)


def poll_ready(url: str, timeout_s: float, path: str = "/health", alive: Callable[[], None] | None = None) -> str | None:
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
