"""Redacting a trace on a Ray cluster, for captures larger than one machine.

Owns :func:`redact_file_ray`. Two passes, as :func:`redact.pipeline.redact_file` makes. In the
first, Ray Data reads the input Parquet and ``map_batches`` hands row batches to a pool of actors
(each a :class:`redact.pipeline.Redactor` with its own analysis worker process, text cache and
timeout), which analyse each text and send back, per batch, the analyses of the texts new to them
(by digest) and the values found; this process keeps one set of values
(:class:`redact.mentions.Mentions`). In the second, a new pool of actors, given those analyses
(``ray.put``: nothing is analysed twice) and values, redacts the row batches (a value found
anywhere in the trace is replaced at every mention of it; a text whose analysis raised or hung
quarantines its rows), and this process writes the rows as they come back, in input order, into
one Trace file, atomically.

The output is the local path's: a surrogate depends only on the key, the type and the value, so
every actor makes the same one; each row carries a :class:`redact.report.RowAccount` (its
quarantine reason, token delta, block hashes, the digests, entity types and token exceptions of
its texts) from which this process keeps the report with the same :class:`redact.report.Accounts`
the local path uses, in trace order. Only the time spent differs, and the Parquet row groups
(one per batch that comes back).

- The key is sent to the actors in their constructor arguments (Ray's object store, in memory);
  it is never written, and the output names only its fingerprint. The values found travel the
  same way, as the raw rows themselves do: Ray's object store holds them in memory (and spills
  to its own folder, ``/tmp/ray``, under memory pressure, as it would spill the rows).
- A quarantined row leaves its actor without text (null body and response).
- Ray is started on this machine (``ray.init()``: a cluster of its CPUs, or the one
  ``RAY_ADDRESS`` names) unless the caller started it, and stopped again if it was started here.
- ``ray[data]`` is the optional extra ``ray`` (``pip install 'faithful-replay[ray]'``).
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from redact.key import RedactionKey
from redact.mentions import Mentions
from redact.pipeline import (
    DEFAULT_TIMEOUT_S,
    ROW_BATCH,
    Redactor,
    _check_input,
    finish_output,
    frame_names,
    frame_texts,
    learn_names,
)
from redact.report import Accounts, RedactionReport
from redact.structure import span_values
from replay.errors import ConfigError, ReplayError

__all__ = ["ACCOUNT_COLUMN", "redact_file_ray"]

# the column that carries each row's account from an actor to this process (never written)
ACCOUNT_COLUMN = "_redaction_account"
# the column that carries a first-pass batch's analyses and values to this process
ANALYSIS_COLUMN = "_redaction_analysis"


class _AnalyseBatches:
    """One Ray actor of the first pass: analyses the texts of the row batches it is given and
    hands back, per batch, what it found in the texts it had not seen (by digest) and the values
    found (``map_batches``' callable class)."""

    def __init__(self, secret: bytes, meta_md: dict[str, str], source: str, timeout_s: float, extra_recognizers: Sequence[Any]):
        from replay.trace import TraceMeta

        self.meta = TraceMeta.from_metadata(meta_md, source)
        self.source = source
        self.redactor = Redactor(
            RedactionKey(secret), self.meta.tokenizer, processes=1, timeout_s=timeout_s, extra_recognizers=extra_recognizers
        )
        self.sent: set[bytes] = set()

    def __call__(self, batch):
        import pyarrow as pa

        from redact.mentions import Mentions
        from replay.trace import batch_frame, validate

        rows = validate(batch_frame(batch), self.meta, f"{self.source} (a row batch)", whole=False)
        found, values = {}, Mentions()
        learn_names(values, frame_names(rows))
        for text, e in self.redactor.redact_texts(frame_texts(rows), build=False).items():
            if e.digest not in self.sent:
                self.sent.add(e.digest)
                found[e.digest] = e.failed if e.failed is not None else list(e.found)
                for entity, value in span_values(text, e.found):
                    values.learn(entity, value)
        return pa.table({ANALYSIS_COLUMN: [pickle.dumps((found, values.items()))]})

    def __del__(self):
        self.redactor.close()


class _RedactBatches:
    """One Ray actor of the second pass: redacts the row batches it is given (``map_batches``'
    callable class), with the first pass's analyses and values."""

    def __init__(
        self,
        secret: bytes,
        meta_md: dict[str, str],
        source: str,
        timeout_s: float,
        extra_recognizers: Sequence[Any],
        found: Any,
        values: list[tuple[str, str]],
    ):
        from replay.trace import TraceMeta

        self.meta = TraceMeta.from_metadata(meta_md, source)
        self.source = source
        self.redactor = Redactor(
            RedactionKey(secret), self.meta.tokenizer, processes=1, timeout_s=timeout_s, extra_recognizers=extra_recognizers
        )
        import ray

        # Ray Data hands the constructor the reference as it is
        self.redactor.seed(ray.get(found) if isinstance(found, ray.ObjectRef) else found)
        for entity, value in values:
            self.redactor.mentions.add(entity, value)

    def __call__(self, batch):
        from replay.trace import batch_frame, validate

        rows = validate(batch_frame(batch), self.meta, f"{self.source} (a row batch)", whole=False)
        out, accounts = self.redactor.redact_rows(rows, self.meta.block_size_tokens)
        return out.with_columns(pl.Series(ACCOUNT_COLUMN, [pickle.dumps(a) for a in accounts], dtype=pl.Binary)).to_arrow()

    def __del__(self):
        self.redactor.close()


def _ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise ConfigError("--ray: Ray Data is not installed (pip install 'faithful-replay[ray]', which pins ray[data])") from None
    return ray


def _cause(e: BaseException) -> BaseException:
    """Our own error that an actor raised (a bad input row...), out of Ray's wrapping, with its
    one line; any other error as Ray gives it. Ray Data's wrapper reaches this process without
    the original exception, only its remote traceback: the error is found by its line there."""
    import re

    import replay.errors

    m = re.search(r"^replay\.errors\.(\w+): (.+)$", str(e), re.MULTILINE)
    cls = getattr(replay.errors, m.group(1), None) if m else None
    if m is not None and isinstance(cls, type) and issubclass(cls, ReplayError):
        return cls(m.group(2))
    return e


def redact_file_ray(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    key: RedactionKey,
    *,
    actors: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    extra_recognizers: Sequence[Any] = (),
    batch_rows: int = ROW_BATCH,
    progress: Callable[[int, int], None] | None = None,
) -> RedactionReport:
    """Redact the trace file ``src`` into ``dst`` on Ray (see the module docstring): the same
    output and report as :func:`redact.pipeline.redact_file`. ``actors``: the redacting actors
    (default: the cluster's CPUs), each with one analysis worker process.
    ``progress(rows_done, rows_total)`` is called as batches come back."""
    from replay.trace import TraceWriter, batch_frame, read_meta

    src, dst = Path(src), Path(dst)
    meta, total = read_meta(src)
    _check_input(meta, src.name)
    if src.is_dir():
        raise ConfigError(
            f"--ray: {src.name} is a capture folder, whose segments overlap in "
            "arrival; redact it without --ray (it is read whole)"
        )
    if actors is not None and actors < 1:
        raise ConfigError(f"--actors: must be >= 1, got {actors}")
    ray = _ray()
    started_here = not ray.is_initialized()
    if started_here:
        import logging

        ray.init(logging_level=logging.WARNING, log_to_driver=False, include_dashboard=False)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True  # rows come back in input order
        ctx.enable_progress_bars = False
        cpus = float(ray.cluster_resources().get("CPU", 1))
        if actors is None:
            actors = max(1, int(cpus))
        # Ray Data's file listing task takes a whole CPU slot: the actors leave one free (else
        # it waits for ever); their analysis processes, which Ray does not see, do the work
        actor_cpus = min(1.0, max(cpus - 1, 0.0) / actors)
        started = time.perf_counter()
        accounts = Accounts()
        # as many read blocks as batches, so that every actor gets some of a single file
        blocks = max(1, -(-total // batch_rows))
        args = (key.secret, meta.to_metadata(), src.name, timeout_s, tuple(extra_recognizers))

        def over_actors(actor, *more):
            return ray.data.read_parquet(str(src), num_cpus=0, override_num_blocks=blocks).map_batches(
                actor,
                batch_size=batch_rows,
                batch_format="pyarrow",
                compute=ray.data.ActorPoolStrategy(size=actors),
                num_cpus=actor_cpus,
                fn_constructor_args=(*args, *more),
            )

        # first pass: every text analysed once on the actors, every value found learned here
        found: dict[bytes, Any] = {}
        values = Mentions(limit=1 << 62)
        try:
            for batch in over_actors(_AnalyseBatches).iter_batches(batch_size=None, batch_format="pyarrow"):
                for payload in batch.column(ANALYSIS_COLUMN).to_pylist():
                    part, learned = pickle.loads(payload)
                    for d, f in part.items():
                        found.setdefault(d, f)
                    for entity, value in learned:
                        values.add(entity, value)
        except ray.exceptions.RayError as e:
            raise _cause(e) from None
        # second pass: the rows redacted with those analyses and values, written in order
        ds = over_actors(_RedactBatches, ray.put(found), values.items())
        del found
        with TraceWriter(dst, meta) as writer:
            done = 0
            try:
                for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
                    df = batch_frame(batch)
                    rows = [pickle.loads(b) for b in df.get_column(ACCOUNT_COLUMN).to_list()]
                    out = accounts.add(df.drop(ACCOUNT_COLUMN), rows)
                    if out.height:
                        writer.write(out)
                    done += df.height
                    if progress is not None:
                        progress(done, total)
            except ray.exceptions.RayError as e:
                raise _cause(e) from None
            report = finish_output(writer, accounts, started, src, meta, key)
        return report
    finally:
        if started_here:
            ray.shutdown()
