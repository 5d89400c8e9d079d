"""A seeded token-only workload sampled from Alibaba ServeGen's per-client distributions.

Owns :func:`import_servegen`. ServeGen (alibaba/ServeGen, ``servegen/clientpool.py`` and
``servegen/construct.py``) publishes no requests: a folder holds, per client ``<c>``,

- ``chunk-<c>-trace.csv``, no header, one row per window (600 s in the release):
  ``window_s,rate_rps,cv,pattern,arg1,arg2``. ``pattern`` is ``Gamma`` (interarrivals
  Gamma(shape=arg1, scale=arg2), so ``cv`` = 1/sqrt(arg1)), ``Weibull`` (Weibull(shape=arg1,
  scale=arg2)) or empty (the client is idle in that window);
- ``chunk-<c>-dataset.json``: ``{"<window_s>": {"<field>": "<a Python dict literal of value ->
  probability>"}}`` over longer windows (6 h), read with :func:`ast.literal_eval`; the window
  used is the latest one at or before the trace window (as ServeGen's ``_get_dataset_window``).
  Fields: ``input_tokens`` and ``output_tokens`` (language, reason; reason adds
  ``reason_ratio``), or ``text_tokens``, ``image|audio|video_tokens``, ``image|audio|video_count``
  and ``output_tokens`` (multimodal).

The workload is sampled window by window, every client of the window at once, so the rows come
out in arrival order (:func:`capture.importers.tokens.write_token_trace` streams them). In a
window of ``W`` seconds with rate ``r`` a client sends ``n = round(r * W)`` requests: as
ServeGen's ``_sample_iats`` does, the count is fixed by the rate, the gaps are drawn from the
window's pattern and rescaled to fill the window (which keeps the pattern's CV; the ``cv``
column is checked, not drawn from); ServeGen draws
``ceil(r * W)`` gaps and keeps the arrivals before the window's end (the last lands on the end),
this draws ``n + 1`` gaps and keeps the first ``n`` arrivals. Each request's lengths are drawn
from its window's distributions (only values of positive probability); a multimodal request's
``input_tokens`` is its text tokens plus, for each modality, ``count`` draws of that modality's
tokens. Rows have null bodies (synthesized prompts), no sessions (ServeGen has none) and
``request_id`` ``servegen-<client>-<k>``. Not mapped (said in the import report):
``reason_ratio`` (the output's reasoning share; ``output_tokens`` already counts it), the
modality of multimodal tokens (the replay sends text), and ServeGen's ``rate_fn`` (its aggregate
rate rescaling: the clients' own rates are used; ``replay run`` scales time).

One seeded generator (``numpy.random.default_rng(seed)``) draws everything, clients in id
order: the same folder and seed make the same trace. ``duration`` (seconds) ends the workload;
the window it cuts is shortened (as ServeGen's span). Bad input (a CSV row, a dataset window)
is one line naming the file, the line or window, and the field; with ``skip_bad`` it is counted
instead (a skipped CSV row or active window without a distribution makes no requests).
"""

from __future__ import annotations

import ast
import bisect
import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from capture.importers.records import BadLines, LineError
from capture.importers.tokens import ImportResult, TokenRecord, write_token_trace
from replay.errors import ConfigError, TraceError
from replay.synth import Synthesis
from replay.trace import BLOCK_SIZE

__all__ = ["SERVEGEN_TRACE_GLOB", "import_servegen"]

SOURCE_FORMAT = "servegen"
SERVEGEN_TRACE_GLOB = "chunk-*-trace.csv"
WINDOW_S = 600  # ServeGen's trace window: the length of a last (or only) window
PATTERNS = ("Gamma", "Weibull")
CSV_FIELDS = ("window_s", "rate_rps", "cv", "pattern", "arg1", "arg2")
MODALITIES = ("image", "audio", "video")
_NAME = re.compile(r"^chunk-(.+)-trace\.csv$")


@dataclass(frozen=True, slots=True)
class _Window:
    start: int  # s
    rate: float  # req/s (0: idle)
    pattern: str  # "" when idle
    shape: float
    scale: float
    line: int


@dataclass(slots=True)
class _Client:
    name: str
    trace_file: Path
    windows: dict[int, _Window]
    raw: dict[int, dict]  # dataset window start -> {field: dict literal string}, as read
    starts: list[int]  # sorted dataset window starts
    parsed: dict[int, dict[str, tuple[np.ndarray, np.ndarray]] | None] = field(default_factory=dict)


def _number(text: str, name: str, *, integer: bool = False) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise LineError(f"{text!r} is not {'an integer' if integer else 'a number'}", name) from None
    if not math.isfinite(value) or value < 0:
        raise LineError(f"{text!r} is not a number >= 0", name)
    return value


def _window(line: int, text: str) -> _Window:
    cells = [c.strip() for c in text.split(",")]
    if len(cells) != len(CSV_FIELDS):
        raise LineError(f"{len(cells)} fields, ServeGen's trace rows have {len(CSV_FIELDS)} ({','.join(CSV_FIELDS)})")
    start = int(_number(cells[0], "window_s", integer=True))
    rate = _number(cells[1], "rate_rps")
    _number(cells[2], "cv")
    pattern = cells[3]
    if pattern and pattern not in PATTERNS:
        raise LineError(f"{pattern!r} is not Gamma, Weibull or empty", "pattern")
    shape = _number(cells[4], "arg1")
    scale = _number(cells[5], "arg2")
    if pattern and rate > 0:
        if shape <= 0:
            raise LineError(f"{cells[4]!r}: a {pattern} shape must be > 0", "arg1")
        if scale <= 0:
            raise LineError(f"{cells[5]!r}: a {pattern} scale must be > 0", "arg2")
    return _Window(start, rate if pattern else 0.0, pattern, shape, scale, line)


def _read_windows(path: Path, bad: BadLines) -> dict[int, _Window]:
    windows: dict[int, _Window] = {}
    last: int | None = None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: cannot read ({e})") from None
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            w = _window(number, raw)
            if last is not None and w.start <= last:
                raise LineError(f"window {w.start} is not after the previous window {last}", "window_s")
        except LineError as e:
            bad.bad(number, e)
            continue
        windows[w.start] = w
        last = w.start
    return windows


def _read_dataset(path: Path) -> dict[int, dict]:
    try:
        with path.open("rb") as f:
            data = json.load(f)
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror or e})") from None
    except ValueError:
        raise TraceError(f"{path}: not valid JSON") from None
    if not isinstance(data, dict):
        raise TraceError(f"{path}: not a JSON object of windows")
    out: dict[int, dict] = {}
    for key, fields in data.items():
        try:
            start = int(key)
        except ValueError:
            raise TraceError(f"{path}: window {key!r} is not an integer number of seconds") from None
        if not isinstance(fields, dict):
            raise TraceError(f"{path}: window {key}: not an object of fields")
        out[start] = fields
    return out


def _pdf(text: object, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(values, cumulative probabilities) of one distribution string; None for an empty one
    (ServeGen skips a window with an empty distribution)."""
    if not isinstance(text, str):
        raise LineError("is not a string holding a dict", name)
    try:
        pdf = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise LineError("is not a Python dict literal", name) from None
    if not isinstance(pdf, dict):
        raise LineError("is not a dict of value -> probability", name)
    if not pdf:
        return None
    items = sorted(pdf.items())
    values = np.array([k for k, _ in items], dtype=np.float64)
    probs = np.array([p for _, p in items], dtype=np.float64)
    if not (np.isfinite(values).all() and np.isfinite(probs).all()) or (probs < 0).any() or probs.sum() <= 0:
        raise LineError("has a value or probability that is not a number >= 0 (or none > 0)", name)
    if name != "reason_ratio" and ((values < 0).any() or (values != np.round(values)).any()):
        raise LineError("has a token count that is not an integer >= 0", name)
    cdf = np.cumsum(probs)
    return values, cdf / cdf[-1]


def _draw(dist: tuple[np.ndarray, np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` values of ``dist`` (only those of positive probability)."""
    values, cdf = dist
    index = np.searchsorted(cdf, rng.random(n), side="right")
    return values[np.minimum(index, len(values) - 1)].astype(np.int64)


def _clients(folder: Path) -> list[_Client]:
    if not folder.is_dir():
        raise TraceError(f"{folder}: not a folder (ServeGen: a folder of {SERVEGEN_TRACE_GLOB} and chunk-*-dataset.json)")
    found = sorted(folder.glob(SERVEGEN_TRACE_GLOB))
    if not found:
        raise TraceError(f"{folder}: no ServeGen client ({SERVEGEN_TRACE_GLOB}) in this folder")

    def order(path: Path) -> tuple[int, int | str]:
        name = _NAME.match(path.name).group(1)  # type: ignore[union-attr]
        return (0, int(name)) if name.isdigit() else (1, name)

    return [
        _Client(_NAME.match(p.name).group(1), p, {}, {}, [])  # type: ignore[union-attr]
        for p in sorted(found, key=order)
    ]


class _Sampler:
    """Draws each client's requests of a window (see the module docstring)."""

    def __init__(self, rng: np.random.Generator, bad: dict[str, BadLines], counts: dict[str, Any]) -> None:
        self.rng = rng
        self.bad = bad
        self.counts = counts

    def dataset(self, client: _Client, start: int, line: int) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
        """The distributions of the latest usable dataset window at or before ``start`` (one
        with an empty distribution is skipped, as ServeGen skips it); only the one in use is
        kept parsed."""
        source = client.trace_file.with_name(f"chunk-{client.name}-dataset.json")
        i = bisect.bisect_right(client.starts, start) - 1
        while i >= 0:
            ds = client.starts[i]
            if ds in client.parsed:
                found = client.parsed[ds]
            else:
                found = self._parse(client.raw[ds], ds, source, client.name)
                if found is not None:
                    client.parsed = {}  # the windows before it are not needed again
                client.parsed[ds] = found
            if found is not None:
                return found
            i -= 1
        self.bad[client.name].bad(
            line, LineError(f"{source.name} has no distribution at or before window {start}", "input_tokens")
        )
        return None

    def _parse(self, fields: dict, start: int, source: Path, name: str) -> dict | None:
        parsed: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        try:
            for key, text in fields.items():
                dist = _pdf(text, key)
                if dist is None:
                    return None
                parsed[key] = dist
            if "output_tokens" not in parsed:
                raise LineError("is missing", "output_tokens")
            if "input_tokens" not in parsed and "text_tokens" not in parsed:
                raise LineError("is missing (nor text_tokens)", "input_tokens")
        except LineError as e:
            if not self.bad[name].skip_bad:
                raise TraceError(f"{source}: window {start}: {e.describe()}") from None
            self.counts["skipped_dataset_windows"] = self.counts.get("skipped_dataset_windows", 0) + 1
            return None
        return parsed

    def arrivals(self, w: _Window, length: float) -> np.ndarray:
        """The window's arrival times (s), ascending."""
        n = round(w.rate * length)
        if n <= 0:
            return np.zeros(0)
        if w.pattern == "Gamma":
            gaps = self.rng.gamma(w.shape, w.scale, n + 1)
        else:
            gaps = self.rng.weibull(w.shape, n + 1) * w.scale
        total = gaps.sum()
        if not total > 0:  # every gap underflowed to 0: spread them evenly
            gaps = np.ones(n + 1)
            total = float(n + 1)
        return w.start + np.cumsum(gaps[:n]) * (length / total)

    def lengths(self, dists: dict[str, tuple[np.ndarray, np.ndarray]], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(input, output) token counts of ``n`` requests."""
        if "input_tokens" in dists:
            inputs = _draw(dists["input_tokens"], n, self.rng)
        else:
            inputs = _draw(dists["text_tokens"], n, self.rng)
            for m in MODALITIES:
                if f"{m}_count" in dists and f"{m}_tokens" in dists:
                    items = _draw(dists[f"{m}_count"], n, self.rng)
                    draws = _draw(dists[f"{m}_tokens"], int(items.sum()), self.rng)
                    owner = np.repeat(np.arange(n), items)
                    inputs = inputs + np.bincount(owner, weights=draws, minlength=n).astype(np.int64)
        outputs = _draw(dists["output_tokens"], n, self.rng)
        return inputs, outputs


def import_servegen(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    duration: float | None = None,
    tokenizer: str = "gpt2",
    seed: int = 0,
    limit: int | None = None,
    block_size: int = BLOCK_SIZE,
    model: str | None = None,
    skip_bad: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Sample the ServeGen client folder ``path`` into the Trace file ``out`` (see the module
    docstring); ``duration`` (s) ends it (default: the trace's last window)."""
    if duration is not None and not (math.isfinite(duration) and duration > 0):
        raise ConfigError(f"--duration: must be a number of seconds > 0, got {duration}")
    folder = Path(path)
    clients = _clients(folder)
    bad = {c.name: BadLines(c.trace_file.name, skip_bad) for c in clients}
    fields_seen: set[str] = set()
    for c in clients:
        c.windows = _read_windows(c.trace_file, bad[c.name])
        dataset = c.trace_file.with_name(f"chunk-{c.name}-dataset.json")
        if not dataset.is_file():
            raise TraceError(f"{dataset}: no such file (client {c.name}'s distributions)")
        c.raw = _read_dataset(dataset)
        c.starts = sorted(c.raw)
        for fields in c.raw.values():
            fields_seen.update(fields)
    starts = sorted({s for c in clients for s in c.windows})
    if not starts:
        raise TraceError(f"{folder}: no windows in the clients' trace files")
    step = min((b - a for a, b in zip(starts, starts[1:])), default=WINDOW_S)
    end = float(starts[-1] + step) if duration is None else float(duration)
    windows = [s for s in starts if s < end]
    not_mapped = ["rate_fn (aggregate rescaling: the clients' own rates are used)"]
    if "reason_ratio" in fields_seen:
        not_mapped.append("reason_ratio (output_tokens counts the reasoning)")
    if fields_seen & {f"{m}_tokens" for m in MODALITIES}:
        not_mapped.append("modality (image/audio/video tokens are added to input_tokens as text)")
    # the import report's "servegen" entry: counted while the rows are drawn
    counts: dict[str, Any] = dict(clients=len(clients), windows=len(windows), duration_s=end, seed=seed)
    counts.update(dict.fromkeys(("active_client_windows", "idle_client_windows", "zero_output_draws"), 0))
    counts["not_mapped"] = not_mapped
    skipped = BadLines(folder.name, skip_bad)  # the trace files' skipped lines, for the report
    skipped.count = sum(b.count for b in bad.values())
    skipped.first = [dict(f, reason=f"{b.source}: {f['reason']}") for b in bad.values() for f in b.first][:5]
    sampler = _Sampler(np.random.default_rng(seed), bad, counts)

    def records() -> Iterator[TokenRecord]:
        sent: Counter = Counter()
        for i, start in enumerate(windows):
            stop = min(starts[i + 1] if i + 1 < len(starts) else start + step, end)
            batch: list[tuple[float, int, str, int, int]] = []
            for c in clients:
                w = c.windows.get(start)
                times = sampler.arrivals(w, stop - start) if w is not None else np.zeros(0)
                if not len(times):
                    counts["idle_client_windows"] = counts.get("idle_client_windows", 0) + 1
                    continue
                dists = sampler.dataset(c, start, w.line)  # type: ignore[union-attr]
                if dists is None:
                    counts["windows_without_distribution"] = counts.get("windows_without_distribution", 0) + 1
                    continue
                inputs, outputs = sampler.lengths(dists, len(times))
                counts["active_client_windows"] = counts.get("active_client_windows", 0) + 1
                n = len(times)
                batch.extend(zip(times.tolist(), [w.line] * n, [c.name] * n, inputs.tolist(), outputs.tolist()))  # type: ignore[union-attr]
            batch.sort(key=lambda r: r[0])
            for t, line, name, n_in, n_out in batch:
                k = sent[name]
                sent[name] += 1
                counts["zero_output_draws"] = counts.get("zero_output_draws", 0) + (n_out == 0)
                yield TokenRecord(
                    line=line,
                    arrival_us=round(t * 1_000_000),
                    input_tokens=n_in,
                    output_tokens=n_out,
                    max_tokens=max(n_out, 1),  # a server takes no max_tokens of 0
                    request_id=f"servegen-{name}-{k}",
                    model=model,
                )

    return write_token_trace(
        records(),
        out,
        source=folder.name,
        source_format=SOURCE_FORMAT,
        tokenizer=tokenizer,
        block_size=block_size,
        synthesis=Synthesis(seed=seed),
        bad=skipped,
        limit=limit,
        progress=progress,
        report={"servegen": counts},
    )
