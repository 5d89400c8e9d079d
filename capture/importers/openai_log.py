"""Importer of OpenAI request logs and OpenAI Batch input files (JSON Lines) into a Trace file.

Owns :func:`import_openai` and :func:`parse_openai_line`. Two kinds of line, one kind per file:

- A request log line: ``body`` (the request object exactly as sent; its ``messages`` make it a
  chat request, its ``prompt`` a completions one; one with ``input`` needs ``url``:
  ``/v1/responses`` or ``/v1/embeddings``, which may name any of the four) and its time,
  ``timestamp`` (epoch seconds, or an ISO 8601 string) or else ``created`` (epoch seconds).
  Optional: ``request_id`` (else the response's ``id``), ``session_id``, ``response`` (the
  ``chat.completion`` / ``text_completion`` object the server returned, or just its text; the
  answer is ``choices[0].message.content`` or ``choices[0].text``, or a Responses API object's
  message ``output_text``; the usage its ``usage``, in either API's names,
  cached tokens ``usage.prompt_tokens_details.cached_tokens``), a top-level ``usage`` (where
  there is no response object), ``ttft_ms``, ``latency_ms`` and ``status`` (HTTP; a line with a
  response object and no status counts as 200).
- An OpenAI Batch input line: ``custom_id`` (the request id), ``method`` (``POST``), ``url``
  (``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses`` or ``/v1/embeddings``: the
  api) and ``body``. Such a file has no
  times: ``rate`` (req/s) spaces its requests, in file order, as a Poisson process seeded by
  ``seed``, the first at 0 (drawn once the first pass has counted them); importing one without
  ``rate`` is an error.

The rest (two streaming passes, tokens, hashes, sessions, the report) is
:mod:`capture.importers.logs`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from capture.importers.logs import scan_log, write_log_trace
from capture.importers.records import (
    LineError,
    LogRecord,
    answer_calls,
    answer_text,
    api_of_body,
    http_status,
    ms_to_us,
    openai_usage,
    opt_str,
    parse_time_us,
)
from replay.errors import ConfigError
from replay.trace import BLOCK_SIZE

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = ["BATCH_URLS", "import_openai", "parse_openai_line"]

SOURCE_FORMAT = "openai-jsonl"
BATCH_SOURCE_FORMAT = "openai-batch"
BATCH_URLS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/responses": "responses",
    "/v1/embeddings": "embeddings",
}


def _model(body: dict, response: Any) -> str | None:
    model = body.get("model")
    if isinstance(model, str) and model:
        return model
    if isinstance(response, dict) and isinstance(response.get("model"), str):
        return response["model"] or None
    return None


def _batch_line(obj: dict) -> LogRecord:
    custom_id = opt_str(obj.get("custom_id"), "custom_id")
    if custom_id is None:
        raise LineError("is missing", "custom_id")
    method = obj.get("method", "POST")
    if not isinstance(method, str) or method.upper() != "POST":
        raise LineError(f"{method!r} is not POST", "method")
    url = obj.get("url")
    api = BATCH_URLS.get(url.rstrip("/")) if isinstance(url, str) else None
    if api is None:
        raise LineError(f"{url!r} is not one of {', '.join(BATCH_URLS)}", "url")
    body = obj.get("body")
    try:
        api_of_body(body, api=api)
    except LineError as e:
        raise LineError(f"does not match url {url!r} ({e.args[0]})", "body") from None
    assert isinstance(body, dict)  # api_of_body refused anything else
    return LogRecord(arrival_us=None, api=api, model=_model(body, None), body=body, request_id=custom_id)


def parse_openai_line(obj: dict) -> LogRecord:
    """One line (a request log line or an OpenAI Batch input line) as a record; a Batch line's
    ``arrival_us`` is None."""
    if "custom_id" in obj:
        return _batch_line(obj)
    body = obj.get("body")
    if body is None:
        raise LineError("is missing", "body")
    url = obj.get("url")
    if url is not None and (not isinstance(url, str) or url.rstrip("/") not in BATCH_URLS):
        raise LineError(f"{url!r} is not one of {', '.join(BATCH_URLS)}", "url")
    api = api_of_body(body, api=BATCH_URLS[url.rstrip("/")] if url else None)
    if obj.get("timestamp") is not None:
        arrival_us = parse_time_us(obj["timestamp"], "timestamp")
    elif obj.get("created") is not None:
        arrival_us = parse_time_us(obj["created"], "created")
    else:
        raise LineError("is missing (or 'created')", "timestamp")
    response = obj.get("response")
    if response is not None and not isinstance(response, (dict, str)):
        raise LineError("is not a response object or a string", "response")
    usage = None
    if isinstance(response, dict) and response.get("usage") is not None:
        usage = openai_usage(response["usage"], "response.usage")
    elif obj.get("usage") is not None:
        usage = openai_usage(obj["usage"], "usage")
    status = http_status(obj.get("status"), "status")
    if status is None and isinstance(response, dict) and isinstance(response.get("choices"), list):
        status = 200
    request_id = opt_str(obj.get("request_id"), "request_id")
    if request_id is None and isinstance(response, dict):
        request_id = opt_str(response.get("id"), "response.id")
    return LogRecord(
        arrival_us=arrival_us,
        api=api,
        model=_model(body, response),
        body=body,
        request_id=request_id,
        session_id=opt_str(obj.get("session_id"), "session_id"),
        response=answer_text(response),
        calls=answer_calls(response),
        usage=usage,
        ttft_us=ms_to_us(obj.get("ttft_ms"), "ttft_ms"),
        e2e_us=ms_to_us(obj.get("latency_ms"), "latency_ms"),
        status=status,
    )


def import_openai(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    skip_bad: bool = False,
    rate: float | None = None,
    seed: int = 0,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import an OpenAI request log or an OpenAI Batch input file (see the module docstring)
    into the Trace file ``out`` (raw text unless ``key`` is given:
    :func:`capture.importers.logs.write_log_trace`)."""
    path = Path(path)
    source = path.name
    if rate is not None and not (np.isfinite(rate) and rate > 0):
        raise ConfigError(f"--rate: must be a number > 0, got {rate}")
    kind: list[bool] = []  # [is_batch] once the first request line is read

    def parse(obj: dict) -> LogRecord:
        record = parse_openai_line(obj)
        batch = record.arrival_us is None
        if not kind:
            kind.append(batch)
            if batch and rate is None:
                raise ConfigError(
                    f"{source}: an OpenAI Batch input file has no times: pass --rate R to space its requests as a Poisson process"
                )
            if not batch and rate is not None:
                raise ConfigError(f"--rate: only for OpenAI Batch input files ({source} is a request log with its own times)")
        elif batch != kind[0]:
            if batch:
                raise LineError("an OpenAI Batch line in a request log", "custom_id")
            raise LineError("a request log line in an OpenAI Batch input file", "custom_id")
        return record

    index = scan_log(path, parse, skip_bad=skip_bad, limit=limit)
    batch = kind[0]
    if batch:
        assert rate is not None  # parse() refused a Batch file without --rate
        rng = np.random.default_rng(seed)
        gaps_s = rng.exponential(1.0 / rate, size=len(index) - 1)
        index = index.timed(np.rint(np.concatenate([[0.0], np.cumsum(gaps_s)]) * 1e6))
        index.report["rate"] = rate
        index.report["seed"] = seed
    return write_log_trace(
        index,
        parse,
        out,
        source_format=BATCH_SOURCE_FORMAT if batch else SOURCE_FORMAT,
        tokenizer=tokenizer,
        block_size=block_size,
        key=key,
        progress=progress,
    )
