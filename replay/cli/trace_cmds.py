"""`replay generate`, `import`, `export`, `sample`, `slice`, `redact` and `inspect`: making, converting,
cutting and looking at Trace files."""

from __future__ import annotations

import argparse
import json
import sys
from typing import cast
from pathlib import Path

from replay.cli.report import raw_text_warning
from replay.blocks import BLOCK_SIZE

__all__ = ["register"]

# capture.importers.TOKEN_FORMATS
SYNTHETIC_FORMATS = ("azure", "burstgpt", "vidur", "mooncake", "bailian", "servegen", "copilot", "weka", "tracelab")
HASH_FORMATS = ("mooncake", "bailian")  # the formats with hash ids (--hash-block)
LOG_FORMATS = (  # capture.importers.LOG_FORMATS (kept light here)
    "openai",
    "litellm",
    "langfuse",
    "claude-code",
    "codex",
    "aiperf-dag",
    "aiperf-multi-turn",
    "baseten",
    "sagemaker",
    "sharegpt",
)
SPAN_FORMATS = ("otel",)  # OpenTelemetry GenAI spans, OTLP/JSON (capture.importers.otel)
IMPORT_FORMATS = SYNTHETIC_FORMATS + LOG_FORMATS + SPAN_FORMATS
AUTO = "auto"  # the format found from the input's head (capture.importers.sniff)
EXPORT_FORMATS = ("mooncake", "vllm", "guidellm", "aiperf", "dag", "inference-perf", "openai")  # capture.exporters.EXPORT_FORMATS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="write a seeded synthetic workload shaped like production traffic",
        description="--profile chat (default): sessions of several turns with think times, shared system "
        "prompts, gamma-bursty arrivals and heavy-tailed prompt and output lengths. --profile agent: "
        "coding-agent sessions (schema 3): 10-20k tokens of tools and system prompt, steps with 1-8 "
        "parallel tool calls and lognormal tool times, subagents that fan out and join back, contexts "
        "growing to --max-context (docs/agentic.md). Exact token counts under a real tokenizer.",
    )
    p.add_argument("-o", "--out", type=Path, required=True, help="Trace Parquet file to write")
    p.add_argument("--profile", choices=["chat", "agent"], default="chat", help="what traffic to make (default chat)")
    p.add_argument("--requests", type=int, default=1000, help="chat: number of requests (default 1000)")
    p.add_argument("--sessions", type=int, default=8, help="agent: root agent sessions (default 8)")
    p.add_argument("--max-context", type=int, default=180_000, help="agent: longest prompt + output in tokens (default 180000)")
    p.add_argument("--steps", type=float, default=31.0, help="agent: mean LLM calls per root session (default 31)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="chat: mean request rate in req/s (default 2); agent: root sessions started per second (default 0.05)",
    )
    p.add_argument("--burst-cv", type=float, default=2.0, help="CV of interarrival gaps (1 = Poisson; default 2)")
    p.add_argument("--system-prompts", type=int, default=4, help="distinct shared system prompts (default 4)")
    p.add_argument("--turns", type=float, default=3.0, help="mean turns per session (default 3)")
    p.add_argument("--tokenizer", default="gpt2", help="gpt2, qwen2 or a tokenizer.json path (default gpt2)")
    p.add_argument("--block-size", type=int, default=BLOCK_SIZE, help=f"tokens per hashed block (default {BLOCK_SIZE})")
    p.add_argument("--model", default="default", help="model name written in the bodies")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "import",
        help="convert a public trace (Azure, BurstGPT, vidur CSV; Mooncake / AIPerf "
        "JSONL), a request log (OpenAI, LiteLLM, Langfuse JSONL) or OpenTelemetry GenAI spans "
        "(OTLP/JSON) to a Trace",
        description="Token-only traces are read in one streaming pass and stored without text: "
        "the replay synthesizes each prompt, with the trace's token counts (and, for "
        "Mooncake, its prefix sharing) under a real tokenizer; an AIPerf mooncake_trace row "
        "with text_input or messages keeps its text. "
        "Request logs keep their real requests, read in two streaming passes "
        "(where each request is and when it arrived; then the requests in "
        "arrival order, a chunk at a time): tokens, block hashes and sessions "
        "come from the raw text, which is redacted with the key from "
        "$REPLAY_REDACT_KEY or --key-file before anything is written "
        "(--no-redact writes the raw text). "
        "otel: OTLP/JSON lines or length-prefixed OTLP protobuf (the collector's file exporter, "
        "format json or proto; sniffed); one request per chat / "
        "text_completion span, sessions and subagents from invoke_agent spans, dependencies and "
        "waits from execute_tool spans, tokens from the usage attributes; spans with message "
        "content keep it (redacted as logs are; the key is asked for only then), the others "
        "become token-only rows (docs/otel.md). "
        "sharegpt: one JSON array read a record at a time, real text as a log's, arrivals from --rate; "
        "servegen: a folder of per-client distributions, sampled into a seeded token-only workload "
        "(docs/formats.md). Every format's fields, mapping and source: docs/formats.md.",
    )
    p.add_argument(
        "format",
        choices=(AUTO, *IMPORT_FORMATS),
        help="the input format; auto: found from the file's CSV header or first JSON object (said on stderr)",
    )
    p.add_argument(
        "path",
        type=Path,
        help="the input file (claude-code, codex, sagemaker, weka: a file or a folder of them; servegen: a client folder; "
        "copilot: a shard or the folder of date=*/shard-*.jsonl.gz)",
    )
    p.add_argument("-o", "--out", type=Path, required=True, help="Trace Parquet file to write")
    p.add_argument("--limit", type=int, help="import only the first N rows")
    p.add_argument("--tokenizer", default="gpt2", help="gpt2, qwen2 or a tokenizer.json path (default gpt2)")
    p.add_argument(
        "--block-size",
        type=int,
        help=f"tokens per hashed block (default {BLOCK_SIZE}; mooncake, copilot, tracelab: 512; bailian: 16; weka: the traces')",
    )
    p.add_argument(
        "--hash-block",
        type=int,
        help="mooncake, bailian: tokens per hash id in the file (default: mooncake 512, Mooncake's own, a "
        "file from `replay export mooncake --block-size N` has N; bailian 16)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed for synthesized text (public traces) or the arrivals --rate draws (default 0)"
    )
    p.add_argument("--model", help="public traces: the model name of every request (default: the trace's, else none)")
    p.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip malformed lines (counted in the import report) instead of stopping at the first",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--rate",
        type=float,
        help="openai: an OpenAI Batch input file has no times; space its requests as a Poisson process of R req/s; "
        "aiperf-dag, aiperf-multi-turn: start the root sessions (those without a timestamp) at R/s; "
        "sharegpt (required): R requests/s, or with --sharegpt-mode multi R conversations/s",
    )
    p.add_argument(
        "--sharegpt-mode",
        choices=("single", "multi"),
        help="sharegpt: single (default; vLLM bench's reading: prompt = the first message, reference "
        "output = the second, vLLM's length filters) or multi (chunks rejoined by id, each "
        "conversation a session of chat turns: history + next user message, output = the reply)",
    )
    p.add_argument(
        "--think-time",
        type=float,
        help="sharegpt multi: seconds between a conversation's turns (after the previous answer in a "
        "dag replay; default 10, ShareGPT records none)",
    )
    p.add_argument(
        "--duration",
        type=float,
        help="servegen: seconds of workload to sample from the clients' windows (default: all of them)",
    )
    p.add_argument(
        "--logs",
        type=Path,
        help="otel: the OTLP log records (gen_ai.*.message / gen_ai.choice events) that carry the spans' content",
    )
    p.add_argument("--key-file", type=Path, help="logs: file holding the redaction key (default: $REPLAY_REDACT_KEY)")
    p.add_argument(
        "--no-redact",
        action="store_true",
        help="logs: write the raw text, unredacted (the trace is marked redaction_policy=none)",
    )
    p.set_defaults(func=cmd_import)

    p = sub.add_parser(
        "redact",
        help="redact PII in a Trace with keyed, shape-keeping surrogates",
        description="Every prompt string and recorded answer is analysed with Presidio (offline spaCy "
        "model, secret recognizers) and each entity is replaced by a keyed surrogate of "
        "the same type, format and token count, the same everywhere in the trace. Each "
        "distinct text is analysed once; a request whose text cannot be analysed is "
        "quarantined (left out and counted), never written raw. The report goes in the "
        "output's metadata and on the terminal.",
    )
    p.add_argument("trace", type=Path, help="the Trace Parquet file to redact")
    p.add_argument("-o", "--out", type=Path, required=True, help="the redacted Trace to write")
    p.add_argument("--key-file", type=Path, help="file holding the redaction key (default: $REPLAY_REDACT_KEY)")
    p.add_argument("--processes", type=int, help="analyser worker processes (default: the CPUs, at most 8)")
    p.add_argument(
        "--timeout", type=float, default=60.0, help="seconds one text's analysis may take before it is quarantined (default 60)"
    )
    p.add_argument(
        "--ray",
        action="store_true",
        help="redact on a Ray cluster (Ray Data: read Parquet, map_batches over actors, "
        "the rows written here in order; same output as without): the one "
        "RAY_ADDRESS names, else one started on this machine (pip install "
        "'faithful-replay[ray]')",
    )
    p.add_argument(
        "--actors", type=int, help="with --ray: redacting actors, each with one analysis process (default: the cluster's CPUs)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_redact)

    p = sub.add_parser(
        "export",
        help="write a Trace in another tool's format (Mooncake, vLLM timed_trace, GuideLLM, AIPerf, inference-perf, OpenAI log)",
        description="mooncake: Mooncake JSON Lines (timestamp ms) with hash_ids at --block-size (default 512; ids "
        "numbered in order of first appearance, the partial last block gets one too). A reader must use the "
        "same block size (vLLM's timed_trace reader assumes 16: 512-token ids become prompts 32x too short; "
        "use vllm). vllm: vLLM's timed_trace (timestamp in s, ids of 16 tokens: its reader's defaults; "
        "pass it --timed-trace-chunk-hash-size N for another --block-size). guidellm: GuideLLM's "
        "trace_synthetic / mooncake kinds (timestamp in s, ids of 512 tokens: hash_id_block_size; duration: "
        "the recorded latency in s). aiperf: "
        "AIPerf's mooncake_trace with messages (the text is written out, synthesized where the trace stores "
        "none). dag: AIPerf's dag_jsonl, a session a line, subagents as spawns joined where the parent waits "
        "for them, waits as delays (what it cannot say is counted and printed). inference-perf: a folder of "
        "its OTel replay JSON files, one per root session with its subagents (-o names the folder). openai: "
        "a request log as `replay import openai` reads it.",
    )
    p.add_argument("format", choices=EXPORT_FORMATS, help="the output format")
    p.add_argument("trace", type=Path, help="the Trace Parquet file")
    p.add_argument("-o", "--out", type=Path, required=True, help="the file to write (a folder for inference-perf)")
    p.add_argument("--block-size", type=int, help="mooncake, vllm, guidellm: tokens per hash id (default 512; vllm 16)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "sample",
        help="keep a seeded share of a Trace's sessions, whole sessions at a time",
        description="Each session is kept or not by a seeded hash of its id, so all its turns "
        "(and the prefix sharing between them) stay together; a request without a "
        "session is a session of its own. Streams the file a row batch at a time.",
    )
    p.add_argument("trace", type=Path, help="the Trace Parquet file")
    p.add_argument("-o", "--out", type=Path, required=True, help="the Trace to write")
    p.add_argument("--sessions", type=float, required=True, help="share of sessions to keep, in (0, 1]")
    p.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser(
        "slice",
        help="cut a time window out of a Trace",
        description="Keeps the requests arriving in [--from, --to) seconds from the trace's "
        "start; time 0 of the new trace is --from. Streams the file.",
    )
    p.add_argument("trace", type=Path, help="the Trace Parquet file")
    p.add_argument("-o", "--out", type=Path, required=True, help="the Trace to write")
    p.add_argument("--from", dest="start", type=float, default=0.0, help="window start, s (default 0)")
    p.add_argument("--to", dest="end", type=float, help="window end, s (default: the end of the trace)")
    p.set_defaults(func=cmd_slice)

    p = sub.add_parser("inspect", help="summarize a Trace: rate, burstiness, lengths, sessions, prefix reuse, dependency graph")
    p.add_argument("trace", type=Path, help="a Trace: a Parquet file or a `replay capture` folder")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_inspect)


def _wrote(trace, path: Path) -> None:
    print(f"wrote {path} ({trace.df.height} requests)")


def cmd_generate(args: argparse.Namespace) -> int:
    from replay.generate import GenerateConfig, generate

    if args.profile == "agent":
        from replay.agentic import AgentConfig, generate_agentic

        agent = AgentConfig(
            sessions=args.sessions,
            seed=args.seed,
            session_rate=args.rate if args.rate is not None else AgentConfig.session_rate,
            steps_mean=args.steps,
            max_context_tokens=args.max_context,
            tokenizer=args.tokenizer,
            block_size=args.block_size,
            model=args.model,
        )
        trace = generate_agentic(agent)
        _wrote(trace, trace.write(args.out))
        return 0
    config = GenerateConfig(
        n_requests=args.requests,
        seed=args.seed,
        rate=args.rate if args.rate is not None else GenerateConfig.rate,
        burst_cv=args.burst_cv,
        n_system_prompts=args.system_prompts,
        turns_mean=args.turns,
        tokenizer=args.tokenizer,
        block_size=args.block_size,
        model=args.model,
    )
    trace = generate(config)
    _wrote(trace, trace.write(args.out))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from replay.errors import ConfigError

    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit: must be >= 1, got {args.limit}")
    if args.format == AUTO:
        from capture.importers.sniff import sniff

        args.format = sniff(args.path)
        print(f"{args.path.name}: importing as {args.format} (found by `auto`)", file=sys.stderr)
    if args.hash_block is not None and args.format not in HASH_FORMATS:
        raise ConfigError(f"--hash-block: only for {', '.join(HASH_FORMATS)} (the other formats have no hash ids)")
    if args.logs is not None and args.format not in SPAN_FORMATS:
        raise ConfigError(f"--logs: only for otel (spans whose content is in log records), not {args.format}")
    for flag, value, fmt in (
        ("--sharegpt-mode", args.sharegpt_mode, "sharegpt"),
        ("--think-time", args.think_time, "sharegpt"),
        ("--duration", args.duration, "servegen"),
    ):
        if value is not None and args.format != fmt:
            raise ConfigError(f"{flag}: only for {fmt}")
    if args.format in SPAN_FORMATS:
        return _import_spans(args)
    if args.format in SYNTHETIC_FORMATS:
        for flag, given in (
            ("--rate", args.rate is not None),
            ("--key-file", args.key_file is not None),
            ("--no-redact", args.no_redact),
        ):
            if given:
                raise ConfigError(
                    f"{flag}: only for request logs ({', '.join(LOG_FORMATS)}); {args.format} traces get synthesized text"
                )
        return _import_synthetic(args)
    if args.model is not None:
        raise ConfigError(
            f"--model: only for public traces ({', '.join(SYNTHETIC_FORMATS)}); a log keeps the model each request named"
        )
    if args.no_redact and args.key_file is not None:
        raise ConfigError("--key-file: not with --no-redact")
    key = None
    if not args.no_redact:
        from redact.key import load_key

        key = load_key(args.key_file)  # before reading the input: no key, no work
    from capture.importers import import_log

    sharegpt: dict = {}  # the sharegpt options given
    if args.sharegpt_mode is not None:
        sharegpt["sharegpt_mode"] = args.sharegpt_mode
    if args.think_time is not None:
        sharegpt["think_s"] = args.think_time
    return _import(
        args,
        lambda progress: import_log(
            args.format,
            args.path,
            args.out,
            tokenizer=args.tokenizer,
            block_size=BLOCK_SIZE if args.block_size is None else args.block_size,
            skip_bad=args.skip_bad,
            rate=args.rate,
            seed=args.seed,
            limit=args.limit,
            key=key,
            progress=progress,
            **sharegpt,
        ),
    )


def cmd_redact(args: argparse.Namespace) -> int:
    from redact import load_key, redact_file

    from replay.errors import ConfigError

    if args.processes is not None and args.processes < 1:
        raise ConfigError(f"--processes: must be >= 1, got {args.processes}")
    if args.timeout <= 0:
        raise ConfigError(f"--timeout: must be > 0, got {args.timeout}")
    if args.ray and args.processes is not None:
        raise ConfigError("--processes: not with --ray (use --actors)")
    if not args.ray and args.actors is not None:
        raise ConfigError("--actors: only with --ray")
    key = load_key(args.key_file)
    if args.ray:
        from redact.ray_data import redact_file_ray

        def run(progress):
            return redact_file_ray(args.trace, args.out, key, actors=args.actors, timeout_s=args.timeout, progress=progress)
    else:

        def run(progress):
            return redact_file(args.trace, args.out, key, processes=args.processes, timeout_s=args.timeout, progress=progress)

    if args.quiet:
        report = run(None)
    else:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("redacting", total=None)
            report = run(lambda done, total: bar.update(task, completed=done, total=total))
    print(report.summary())
    print(f"wrote {args.out} ({report.written} requests)")
    return 0


def _import_spans(args: argparse.Namespace) -> int:
    from replay.errors import ConfigError

    if args.rate is not None:
        raise ConfigError("--rate: only for OpenAI Batch input files (spans have their own times)")
    if args.model is not None:
        raise ConfigError("--model: only for public traces; a span keeps the model it named")
    if args.no_redact and args.key_file is not None:
        raise ConfigError("--key-file: not with --no-redact")
    from capture.importers.otel import import_otel
    from redact.key import load_key

    # the key is read only when a span carries message content, before anything is written
    key = None if args.no_redact else (lambda: load_key(args.key_file))
    return _import(
        args,
        lambda progress: import_otel(
            args.path,
            args.out,
            tokenizer=args.tokenizer,
            block_size=BLOCK_SIZE if args.block_size is None else args.block_size,
            skip_bad=args.skip_bad,
            seed=args.seed,
            limit=args.limit,
            key=key,
            progress=progress,
            logs=args.logs,
        ),
    )


def _import_synthetic(args: argparse.Namespace) -> int:
    from capture.importers import import_token_trace

    kwargs = dict(tokenizer=args.tokenizer, seed=args.seed, limit=args.limit, model=args.model, skip_bad=args.skip_bad)
    if args.block_size is not None:
        kwargs["block_size"] = args.block_size
    if args.hash_block is not None:
        kwargs["hash_block"] = args.hash_block
    if args.duration is not None:
        kwargs["duration"] = args.duration
    return _import(args, lambda progress: import_token_trace(args.format, args.path, args.out, progress=progress, **kwargs))


def _import(args: argparse.Namespace, work) -> int:
    """Run ``work(progress)`` (an import into ``args.out``, returning its ImportResult) under a
    progress bar of rows (unless --quiet) and say what it did."""
    if args.quiet:
        result = work(None)
    else:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task(f"importing {args.path.name}", total=None)
            result = work(lambda rows: bar.update(task, completed=rows))
    report = json.loads(result.meta.import_report)
    if report.get("skipped_lines"):
        print(
            f"skipped {report['skipped_lines']} malformed lines (first: "
            f"{report['first_skipped'][0]['line']}: {report['first_skipped'][0]['reason']})"
        )
    if report.get("not_replayed"):
        print(report["not_replayed"])
    if result.redaction is not None:
        print(result.redaction.summary())
    print(f"wrote {result.path} ({result.rows} requests)")
    if result.meta.raw_text:
        print(raw_text_warning(result.path), file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from capture.exporters import export_trace

    from replay.trace import read_trace

    trace = read_trace(args.trace, bodies=False)
    kwargs = {} if args.block_size is None else {"block_size": args.block_size}
    if args.quiet:
        result = export_trace(args.format, trace, args.out, **kwargs)
    else:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task(f"exporting {args.trace.name}", total=len(trace))
            result = export_trace(args.format, trace, args.out, progress=lambda done: bar.update(task, completed=done), **kwargs)
    if result.quarantined:
        print(
            "kept out by the second lock (a PII shape that is not a surrogate of this trace), records per "
            "type: "
            + ", ".join(f"{k} {v}" for k, v in sorted(result.quarantined.items()))
            + ("" if trace.meta.lock_exempt else " (the trace lists no surrogates: its lock_exempt is empty)")
        )
    if result.unmapped:
        print(
            f"{args.format} cannot express: " + "; ".join(f"{k}: {v}" for k, v in sorted(result.unmapped.items())),
            file=sys.stderr,
        )
    unit = {"dag": "sessions", "inference-perf": "files"}.get(args.format, "requests")
    print(f"wrote {args.out} ({result.written} {unit})")
    if not result.locked:
        print("the second lock is bypassed: the trace is raw (redaction_policy=none)", file=sys.stderr)
    if args.format not in ("mooncake", "vllm", "guidellm") and trace.meta.raw_text:
        print(raw_text_warning(args.out), file=sys.stderr)
    return 0


def _rows_progress(label: str, work) -> int:
    """Run ``work(progress)`` under a progress bar of rows read; return what it returns."""
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=None)
        return work(lambda done, total: bar.update(task, completed=done, total=total))


def cmd_sample(args: argparse.Namespace) -> int:
    from replay.subsets import sample_sessions

    n = _rows_progress(
        "sampling", lambda progress: sample_sessions(args.trace, args.out, args.sessions, seed=args.seed, progress=progress)
    )
    print(f"wrote {args.out} ({n} requests)")
    return 0


def cmd_slice(args: argparse.Namespace) -> int:
    from replay.subsets import slice_window

    n = _rows_progress("slicing", lambda progress: slice_window(args.trace, args.out, args.start, args.end, progress=progress))
    print(f"wrote {args.out} ({n} requests)")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from replay.traffic import trace_summary
    from replay.trace import read_trace

    trace = read_trace(args.trace, bodies=False)
    if trace.meta.raw_text:
        print(raw_text_warning(args.trace), file=sys.stderr)
    summary = trace_summary(trace)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    from replay.traffic import RateSeries

    table = Table(title=str(args.trace), show_header=False)
    table.add_column("field")
    table.add_column("value", justify="right")
    series = cast(RateSeries, summary.pop("rate_series"))  # trace_summary's rate_series is rate_series()'s
    graph = cast("dict | None", summary.pop("dag"))
    for key, value in summary.items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    console = Console()
    console.print(table)
    if graph is not None:
        shape = Table(title="dependency graph (depends_on)", show_header=False)
        shape.add_column("field")
        shape.add_column("value", justify="right")
        for key, value in graph.items():
            if isinstance(value, dict):
                value = "  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in value.items())
            shape.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
        console.print(shape)
    from replay.traffic import sparkline

    rps = series["rps"]
    console.print(f"rate over time ({series['bin_s']:g} s bins, peak {max(rps, default=0):.3g} req/s):")
    print(sparkline(rps))
    if summary.get("bucketed_timestamps"):
        print(
            "warning: timestamps look bucketed (many requests share one time); replaying them verbatim makes synchronized bursts"
        )
    return 0
