"""`replay capture`: the recording proxy in front of an OpenAI-compatible server, or (``--otlp``)
the OTLP/HTTP receiver of an application's OpenTelemetry spans, until Ctrl-C."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dataclasses import fields

from capture.recorder import REDACT_PROCESSES, CaptureConfig

# the flags' defaults are the library's (capture.recorder.CaptureConfig)
_D = {f.name: f.default for f in fields(CaptureConfig)}
_D["redact_processes"] = REDACT_PROCESSES  # the field's default_factory
# the defaults of the proxy's own flags as the parser sets them (checked with --otlp)
_PARSER_DEFAULTS = {
    "listen": ("127.0.0.1", 8080),
    "sample": _D["sample"],
    "session_header": _D["session_header"],
    "key_file": None,
    "redact_processes": _D["redact_processes"],
    "redact_ray": _D["redact_ray"],
    "queue": _D["queue_size"],
    "backlog_mb": _D["backlog_mb"],
    "segment_rows": _D["segment_rows"],
    "segment_seconds": _D["segment_seconds"],
    "timeout": _D["read_timeout_s"],
    "tls_cert": None,
    "tls_key": None,
    "ca_cert": None,
    "insecure": False,
}

__all__ = ["register"]


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "capture",
        help="record live traffic: a proxy in front of an OpenAI-compatible server",
        description="A reverse proxy that passes requests and streamed responses through byte for "
        "byte and records each chat / completions request (arrival, body, session, "
        "status, time to first byte and token, each chunk's time, usage with cached "
        "tokens, finish reason, outcome) into a capture folder that reads as one Trace. "
        "Token counts and block hashes come from the raw text; bodies and answers are "
        "redacted with the key from $REPLAY_REDACT_KEY or --key-file before anything is "
        "written, headers and query strings are never stored. Recording runs beside "
        "the traffic: if it falls behind, records are dropped and counted (in /metrics "
        "and the trace's metadata), never the requests. Stop with Ctrl-C (or SIGTERM). "
        "With --otlp instead of --upstream: an OTLP/HTTP receiver (POST /v1/traces, protobuf or "
        "JSON, gzip) that spools each request's spans to DIR/spool.jsonl, fsynced before it "
        "answers, their text redacted with the key from $REPLAY_REDACT_KEY or --key-file (without "
        "a key: dropped; --no-redact: kept raw), and on stop imports the spool into "
        "DIR/trace.parquet as `replay import otel` does (docs/otel.md).",
        epilog="examples: replay capture --upstream http://127.0.0.1:8000 --listen 127.0.0.1:8080 --out capture/; "
        "replay capture --otlp 127.0.0.1:4318 --out spans/",
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--upstream", help="the server's base URL, e.g. http://127.0.0.1:8000")
    target.add_argument(
        "--otlp",
        type=_host_port,
        metavar="HOST:PORT",
        help="receive OpenTelemetry spans over OTLP/HTTP here (4318 is OTLP/HTTP's port; 0 = any free) "
        "instead of proxying; point the application's OTLP exporter at http://HOST:PORT",
    )
    target.add_argument(
        "--otlp-grpc",
        type=_host_port,
        metavar="HOST:PORT",
        help="the same over OTLP/gRPC (4317 is its port; needs grpcio: pip install 'faithful-replay[otlp-grpc]')",
    )
    p.add_argument(
        "--listen",
        type=_host_port,
        default=("127.0.0.1", 8080),
        metavar="HOST:PORT",
        help="address to listen on (default 127.0.0.1:8080: loopback; port 0 = any free)",
    )
    p.add_argument(
        "--out", type=Path, required=True, help="capture folder (created; a restart into it recovers and continues it)"
    )
    p.add_argument(
        "--sample",
        type=float,
        default=_D["sample"],
        help=f"share of sessions to record, 0 < P <= 1, whole sessions (default {_D['sample']:g})",
    )
    p.add_argument(
        "--session-header",
        default=_D["session_header"],
        help=f"request header naming the session (default {_D['session_header']}); without it the "
        "session is derived from the conversation, as `replay import openai` does",
    )
    p.add_argument(
        "--tokenizer", default=_D["tokenizer"], help=f"gpt2, qwen2 or a tokenizer.json path (default {_D['tokenizer']})"
    )
    p.add_argument(
        "--block-size", type=int, default=_D["block_size"], help=f"tokens per hashed block (default {_D['block_size']})"
    )
    p.add_argument("--key-file", type=Path, help="file holding the redaction key (default: $REPLAY_REDACT_KEY)")
    p.add_argument(
        "--no-redact", action="store_true", help="store raw text (local experiments only; recorded as redaction_policy=none)"
    )
    p.add_argument(
        "--redact-processes",
        type=int,
        default=_D["redact_processes"],
        help=f"redaction worker processes (default: the cores less one, at least 1: {_D['redact_processes']} here); "
        "with --redact-ray, analyser actors on the cluster",
    )
    p.add_argument(
        "--redact-ray",
        nargs="?",
        const="local",
        default=_D["redact_ray"],
        metavar="ADDRESS",
        help="analyse on a Ray cluster (the `ray` extra): alone, one started on this machine (object spilling off, "
        "so raw text never reaches disk); with ADDRESS (auto, ray://host:10001), that cluster, whose nodes have "
        "faithful-replay installed. The same fail-closed rules: a text its actors cannot analyse drops its record",
    )
    p.add_argument(
        "--queue",
        type=int,
        default=_D["queue_size"],
        help=f"requests waiting to be recorded before records are dropped (default {_D['queue_size']})",
    )
    p.add_argument(
        "--backlog-mb",
        type=int,
        default=_D["backlog_mb"],
        help="megabytes of requests (bodies and answers) waiting to be recorded before records are dropped; "
        f"a session one of whose requests was dropped is dropped from then on (default {_D['backlog_mb']})",
    )
    p.add_argument(
        "--segment-rows",
        type=int,
        default=_D["segment_rows"],
        help=f"roll the spool into a Parquet segment after this many rows (default {_D['segment_rows']})",
    )
    p.add_argument(
        "--segment-seconds",
        type=float,
        default=_D["segment_seconds"],
        help=f"... or after this many seconds (default {_D['segment_seconds']:g})",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=_D["read_timeout_s"],
        help="seconds without a byte from the upstream before the request times out (504 before its headers; "
        f"default {_D['read_timeout_s']:g})",
    )
    tls = p.add_argument_group("TLS")
    tls.add_argument(
        "--tls-cert", type=Path, metavar="FILE", help="serve https with this certificate chain (PEM); with --tls-key"
    )
    tls.add_argument("--tls-key", type=Path, metavar="FILE", help="the private key of --tls-cert (PEM)")
    check = tls.add_mutually_exclusive_group()
    check.add_argument(
        "--ca-cert",
        type=Path,
        metavar="FILE",
        help="an https upstream's certificate must chain to a certificate in this PEM file (a private "
        "CA, a self-signed server) instead of the system's roots",
    )
    check.add_argument(
        "--insecure", action="store_true", help="accept an https upstream's certificate unchecked (still encrypted)"
    )
    p.set_defaults(func=cmd_capture)


# the proxy's own flags, refused with --otlp when set (dest, flag)
_PROXY_ONLY = (
    ("listen", "--listen"),
    ("sample", "--sample"),
    ("session_header", "--session-header"),
    ("redact_ray", "--redact-ray"),
    ("queue", "--queue"),
    ("backlog_mb", "--backlog-mb"),
    ("segment_rows", "--segment-rows"),
    ("segment_seconds", "--segment-seconds"),
    ("timeout", "--timeout"),
    ("tls_cert", "--tls-cert"),
    ("tls_key", "--tls-key"),
    ("ca_cert", "--ca-cert"),
    ("insecure", "--insecure"),
)


def cmd_capture(args: argparse.Namespace) -> int:
    from replay.errors import ConfigError

    if args.otlp is not None or args.otlp_grpc is not None:
        return _otlp(args)
    if not 0 < args.sample <= 1:
        raise ConfigError(f"--sample: must be in (0, 1], got {args.sample}")
    for flag, value in (
        ("--block-size", args.block_size),
        ("--redact-processes", args.redact_processes),
        ("--queue", args.queue),
        ("--backlog-mb", args.backlog_mb),
        ("--segment-rows", args.segment_rows),
    ):
        if value < 1:
            raise ConfigError(f"{flag}: must be >= 1, got {value}")
    for flag, value in (("--segment-seconds", args.segment_seconds), ("--timeout", args.timeout)):
        if value <= 0:
            raise ConfigError(f"{flag}: must be > 0, got {value}")
    if not args.upstream.startswith(("http://", "https://")):
        raise ConfigError(f"--upstream: {args.upstream!r} is not an http(s) URL")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key: TLS needs both the certificate and its key")
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key), ("--ca-cert", args.ca_cert)):
        if path is not None and not path.is_file():
            raise ConfigError(f"{flag} {path}: no such file")
    if (args.ca_cert is not None or args.insecure) and not args.upstream.startswith("https://"):
        raise ConfigError(f"{'--ca-cert' if args.ca_cert is not None else '--insecure'}: only for an https:// --upstream")
    if args.no_redact and args.key_file is not None:
        raise ConfigError("--key-file: not with --no-redact")
    if args.no_redact and args.redact_ray is not None:
        raise ConfigError("--redact-ray: not with --no-redact")
    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(f"--out {args.out}: exists and is not a folder")
    key = None
    if not args.no_redact:
        from redact.key import load_key

        key = load_key(args.key_file)  # no key, no capture
    from capture.proxy import run_capture
    from capture.recorder import record_capacity

    host, port = args.listen
    cfg = CaptureConfig(
        upstream=args.upstream,
        out=args.out,
        host=host,
        port=port,
        sample=args.sample,
        session_header=args.session_header,
        tokenizer=args.tokenizer,
        block_size=args.block_size,
        key=key,
        redact_processes=args.redact_processes,
        redact_ray=args.redact_ray,
        queue_size=args.queue,
        backlog_mb=args.backlog_mb,
        segment_rows=args.segment_rows,
        segment_seconds=args.segment_seconds,
        read_timeout_s=args.timeout,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        ca_cert=args.ca_cert,
        insecure=args.insecure,
    )

    def ready(proxy) -> None:
        if proxy.recovered_rows:
            print(f"recovered {proxy.recovered_rows} records from the spool", flush=True)
        print(
            f"listening on {proxy.url} -> {args.upstream}; recording into {args.out}"
            + ("" if key else " (RAW TEXT: --no-redact, the analyzer and the second lock are bypassed)"),
            flush=True,
        )

    counts = run_capture(cfg, on_ready=ready)
    dropped = sum(v for k, v in counts.items() if k.startswith("dropped_"))
    capacity = record_capacity(counts)
    print(
        f"recorded {counts.get('recorded', 0)} requests into {args.out} "
        f"({dropped} dropped, {counts.get('not_sampled', 0)} not sampled)"
        + (
            ""
            if capacity is None
            else f"; the recorder keeps up with about {capacity:,.0f} requests/s "
            + (
                f"(redaction on, {args.redact_processes} "
                + (f"actors on Ray at {args.redact_ray})" if args.redact_ray else "worker processes)")
                if key
                else "(redaction off)"
            )
        ),
        file=sys.stderr,
    )
    return 0


def _otlp(args: argparse.Namespace) -> int:
    from capture.otlp import SPOOL_FILE, OtlpConfig, run_otlp
    from replay.errors import ConfigError

    for dest, flag in _PROXY_ONLY:
        if getattr(args, dest) != _PARSER_DEFAULTS[dest]:
            raise ConfigError(f"{flag}: only with --upstream (the proxy), not --otlp")
    if args.block_size < 1:
        raise ConfigError(f"--block-size: must be >= 1, got {args.block_size}")
    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(f"--out {args.out}: exists and is not a folder")
    if args.no_redact and args.key_file is not None:
        raise ConfigError("--key-file: not with --no-redact")
    from redact.key import KEY_ENV, load_key

    # a key (the file, else the environment) redacts span text before it is spooled; without
    # one the text is dropped
    has_key = not args.no_redact and (args.key_file is not None or bool(os.environ.get(KEY_ENV, "").strip()))
    key = load_key(args.key_file) if has_key else None
    grpc = args.otlp_grpc is not None
    host, port = args.otlp_grpc if grpc else args.otlp
    cfg = OtlpConfig(
        out=args.out,
        host=host,
        port=port,
        keep_content=args.no_redact,
        tokenizer=args.tokenizer,
        block_size=args.block_size,
        key=key,
        redact_processes=args.redact_processes,
        grpc=grpc,
    )
    text = (
        " (RAW TEXT: --no-redact keeps the spans' message content)"
        if args.no_redact
        else " (their text redacted)"
        if key is not None
        else f" (without their text: set ${KEY_ENV} or --key-file to keep it, redacted)"
    )

    def ready(receiver) -> None:
        where = f"OTLP/gRPC spans on {receiver.url}" if grpc else f"OTLP/HTTP spans on {receiver.url}/v1/traces"
        print(f"receiving {where}; spooling into {args.out / SPOOL_FILE}{text}", flush=True)

    counts, result = run_otlp(cfg, on_ready=ready)
    summary = (
        f"received {counts.get('requests', 0)} export requests, {counts.get('spans_spooled', 0)} spans spooled "
        f"({counts.get('spans_rejected', 0)} rejected as malformed)"
    )
    if result is None:
        print(f"{summary}; no spans, no trace written", file=sys.stderr)
    else:
        print(f"{summary}; wrote {result.path} ({result.rows} requests)", file=sys.stderr)
    return 0
