"""The two sides a fidelity comparison holds against each other: the live trace and a replay stage.

Owns :class:`Side` (one stream of requests as it was observed: when each arrived or was sent, its
lengths as its engine counted them, its block hashes, sessions and think times, what the engine
reported), :func:`live_side` (from a trace's rows), :func:`replay_side` (from the requests a
stage sent and what the target reported), :func:`compression` (how many times faster a stage
ran than the live rows it replayed) and :func:`template_overhead` (the tokens an engine's chat
template adds to each prompt).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from fidelity import cache

__all__ = [
    "Side",
    "live_side",
    "replay_side",
    "compression",
    "template_overhead",
    "TEMPLATE_MAX",
    "TEMPLATE_PER_MESSAGE_MAX",
    "TEMPLATE_PER_CALL_MAX",
    "TEMPLATE_PER_TOOL_MAX",
    "message_counts",
    "PER_REQUEST_SLACK",
    "REUSE_RESOLUTION_S",
]

# A chat template adds tokens to every prompt (role markers, a few per message): a request whose
# engine-counted prompt is between PER_REQUEST_SLACK fewer and TEMPLATE_MAX more tokens than
# recorded agrees; the template fitted by template_overhead is subtracted before comparing lengths.
TEMPLATE_MAX = 256
# ... and at most this many tokens a message (a role marker and separators: Llama 3's adds 5)
TEMPLATE_PER_MESSAGE_MAX = 32
# ... a tool call in the history (its markers, name and the JSON around its arguments, which the
# trace's lengths count: Qwen's and the embedded engine's "<tool_call> {"name": ..., "arguments":
# ...} </tool_call>" add about 15)
TEMPLATE_PER_CALL_MAX = 64
# ... and a tool definition (its name, type and parameter schema as JSON: a trace counts the
# descriptions' text; a one-parameter tool's JSON is about 40 tokens, a large schema a few hundred)
TEMPLATE_PER_TOOL_MAX = 512
MESSAGE_BATCH = 50_000  # bodies read at a time to count their messages
PER_REQUEST_SLACK = 2
# how far a live timestamp may be from the moment it stands for: a trace whose timestamps share a
# millisecond (Mooncake's are whole ms) has reuse times of 0 that a replay, sending those requests µs
# apart, turns into µs; compared exactly, the first 60 requests of Mooncake's trace failed
# cache.reuse_time.ks (D 0.5) on a replay sent 0-50 µs after each arrival. A replay's times are
# within its send-lag bound instead (Side.time_slack_s)
REUSE_RESOLUTION_S = 1e-3


@dataclass(eq=False)
class Side:
    """One stream of requests, in the order they arrived / were sent. Its prefix-cache
    simulations are run once each, when a metric first asks (:meth:`cache_share`, :meth:`reuse_s`)."""

    name: str
    times_s: np.ndarray  # arrival (live) or actual send (replay), seconds
    input_tokens: np.ndarray  # as the side's engine counted them where known, else as recorded (NaN: unknown)
    output_tokens: np.ndarray
    recorded_input: np.ndarray  # the trace's input_tokens of these requests (the sim's denominators)
    hashes: pl.Series  # list[u64] block hashes per request
    block_size: int
    sessions: np.ndarray  # session id per request (the request id where it has none)
    think_s: np.ndarray  # gap from the previous turn's end to this turn (NaN: first turn or unknown)
    engine_cached: np.ndarray | None = None  # engine-reported cached tokens (NaN: not reported)
    # what this side's engine adds to each recorded prompt (median; 0: unknown): the engine hit rate
    # divides ``engine_cached`` by ``recorded_input`` plus this, as the engines cache their chat
    # template's tokens too (live's is taken to be the replay's: fidelity.compare.compare_sides)
    template_tokens: int = 0
    ttft_s: np.ndarray | None = None
    e2e_s: np.ndarray | None = None
    itl_s: np.ndarray | None = None
    engine_prompt_all: np.ndarray | None = None  # the engine's prompt tokens of every completed request
    time_scale: float = 1.0  # how many times faster than live this side ran
    # how far its times may be from the moments they stand for, in live seconds: a live trace's
    # timestamp resolution (REUSE_RESOLUTION_S), a replay stage's send-lag bound x time_scale
    time_slack_s: float = REUSE_RESOLUTION_S
    notes: tuple[str, ...] = ()
    ids: np.ndarray | None = None  # request id per request: a replay's requests pair with the live rows they replayed
    # a replay stage's schedule (seconds, its own clock): when each request was due, and when it
    # was released (a causal turn held for the turn before: later than due); None for live
    scheduled_s: np.ndarray | None = None
    ready_s: np.ndarray | None = None
    # schema 3 traces: per request, its time less the latest end of its dependencies on this side
    # (live: the recorded wait_us; a replay: its send less their ends; negative: sent before a
    # dependency ended), in this side's seconds; NaN where it has none; None without dependencies
    dep_wait_s: np.ndarray | None = None
    # schema 3 traces: per request, its depth in the graph of this side's rows (the longest chain
    # of dependencies ending at it) and its fan-out (how many of them depend on it), from the
    # trace's columns (replay.dag.depth_and_fan_out); None without dependencies
    depth: np.ndarray | None = None
    fan_out: np.ndarray | None = None
    _memo: dict = field(default_factory=dict, init=False, repr=False)

    @property
    def n(self) -> int:
        return len(self.times_s)

    def _unbounded(self) -> tuple[np.ndarray, np.ndarray]:
        if "unbounded" not in self._memo:
            self._memo["unbounded"] = cache.simulate(self.hashes, 0, self.times_s)
        return self._memo["unbounded"]

    def cache_share(self, capacity: int) -> float | None:
        """Share of the recorded prompt tokens a prefix cache of ``capacity`` blocks (0:
        unbounded) would have served, in this side's order."""
        total = float(np.nansum(self.recorded_input))
        if total <= 0:
            return None
        if capacity not in self._memo:
            hits = self._unbounded()[0] if capacity == 0 else cache.simulate(self.hashes, capacity)
            self._memo[capacity] = float(hits.sum(dtype=np.int64)) * self.block_size / total
        return self._memo[capacity]

    def offered_hits(self) -> np.ndarray:
        """Per request, the leading blocks an unbounded prefix cache over this side's order held."""
        return self._unbounded()[0]

    def reuse_s(self) -> np.ndarray:
        """Per request that hit an unbounded prefix cache, the time since its longest cached
        prefix was last used, in live seconds (each within ``time_slack_s`` of the true gap)."""
        reuse = self._unbounded()[1]
        return reuse[np.isfinite(reuse)] * self.time_scale

    def take(self, mask: np.ndarray, shift_s: np.ndarray | None = None) -> Side:
        """The requests where ``mask`` is True (for A/A halves), in time order; with ``shift_s``
        (per request of this side), each request's time moved by it first (a whole session moved
        by one amount keeps its think times)."""
        index = np.flatnonzero(mask)
        times = self.times_s[index]
        if shift_s is not None:
            times = times + shift_s[index]
            order = np.argsort(times, kind="stable")
            index, times = index[order], times[order]
        return self._reordered(index, times)

    def _reordered(self, rank: np.ndarray, times_s: np.ndarray) -> Side:
        """The requests ``rank`` (indexes into this side, in their new order), at ``times_s``."""

        def cut(a):
            return None if a is None else a[rank]

        return Side(
            name=self.name,
            times_s=times_s,
            input_tokens=self.input_tokens[rank],
            output_tokens=self.output_tokens[rank],
            recorded_input=self.recorded_input[rank],
            hashes=self.hashes.gather(pl.Series(rank)),
            block_size=self.block_size,
            sessions=self.sessions[rank],
            think_s=self.think_s[rank],
            engine_cached=cut(self.engine_cached),
            template_tokens=self.template_tokens,
            ttft_s=cut(self.ttft_s),
            e2e_s=cut(self.e2e_s),
            itl_s=None,
            time_scale=self.time_scale,
            time_slack_s=self.time_slack_s,
            notes=self.notes,
            ids=cut(self.ids),
            scheduled_s=cut(self.scheduled_s),
            ready_s=cut(self.ready_s),
            dep_wait_s=cut(self.dep_wait_s),
            depth=cut(self.depth),
            fan_out=cut(self.fan_out),
        )


def _f64(s: pl.Series) -> np.ndarray:
    return s.cast(pl.Float64).fill_null(np.nan).to_numpy()


def _think_times(df: pl.DataFrame, start: str, end: str) -> np.ndarray:
    """Per row: its ``start`` minus the previous turn's ``end`` in the same session (NaN for a
    first turn or where either is missing). ``df`` in time order with a ``_session`` column."""
    return _f64(df.select((pl.col(start) - pl.col(end).shift(1).over("_session")).alias("t"))["t"])


def dependency_waits(df: pl.DataFrame, start: str, end: str) -> np.ndarray | None:
    """Per row of ``df`` (with ``request_id`` and ``depends_on``): its ``start`` less the latest
    ``end`` among its dependencies that are rows of ``df`` (:func:`replay.dag.row_edges`; NaN
    where it has none, or an end is unknown); None when no row depends on another."""
    from replay.dag import has_edges, row_edges

    if not has_edges(df):
        return None
    pairs = row_edges(df)
    i, j = pairs["i"].to_numpy(), pairs["j"].to_numpy()
    latest = np.full(df.height, -np.inf)
    np.maximum.at(latest, i, _f64(df[end])[j])  # an unknown end (NaN) leaves the wait unknown
    out = np.full(df.height, np.nan)
    rows = np.unique(i)
    out[rows] = _f64(df[start])[rows] - latest[rows]
    return out


def with_graph(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` (rows in a trace's order) with ``_depth`` and ``_fan_out`` of each row in the graph
    of these rows (:func:`replay.dag.depth_and_fan_out`), where a row depends on another."""
    from replay.dag import depth_and_fan_out, has_edges

    if not has_edges(df):
        return df
    depth, fan = depth_and_fan_out(df)
    return df.with_columns(_depth=pl.Series(depth, dtype=pl.Float64), _fan_out=pl.Series(fan, dtype=pl.Float64))


def _graph(df: pl.DataFrame, what: str) -> np.ndarray | None:
    """The Side field ``what`` (depth, fan_out) from :func:`with_graph`'s column (None: no graph)."""
    return _f64(df[f"_{what}"]) if f"_{what}" in df.columns else None


def live_side(df: pl.DataFrame, block_size: int, name: str = "live") -> Side:
    """The live trace's rows (any subset, sorted here by arrival) as a side."""
    df = (
        (with_graph(df) if "depends_on" in df.columns else df)
        .sort("arrival_us", maintain_order=True)
        .with_columns(
            _session=pl.col("session_id").fill_null(pl.col("request_id")),
            _t=pl.col("arrival_us").cast(pl.Float64) / 1e6,
        )
    )
    has = set(df.columns)
    e2e = _f64(df["e2e_us"]) / 1e6 if "e2e_us" in has else None
    if e2e is not None:
        df = df.with_columns(_end=pl.col("_t") + pl.col("e2e_us").cast(pl.Float64) / 1e6)
        think = _think_times(df, "_t", "_end")
    else:
        think = np.full(df.height, np.nan)
    cached = _f64(df["cached_tokens"]) if "cached_tokens" in has else None
    if cached is not None and np.isnan(cached).all():
        cached = None
    ttft = _f64(df["ttft_us"]) / 1e6 if "ttft_us" in has else None
    recorded = _f64(df["input_tokens"])
    dep_wait = None
    if "depends_on" in has:
        # the recorded wait where there is one, else the arrival less the dependencies' recorded ends
        if "_end" not in df.columns:
            df = df.with_columns(_end=pl.lit(None, dtype=pl.Float64))
        dep_wait = dependency_waits(df, "_t", "_end")
        if dep_wait is not None and "wait_us" in has:
            recorded_wait = _f64(df["wait_us"]) / 1e6
            has_deps = (df["depends_on"].list.len() > 0).to_numpy()
            dep_wait = np.where(np.isfinite(recorded_wait) & has_deps, recorded_wait, dep_wait)
    return Side(
        name=name,
        times_s=df["_t"].to_numpy(),
        input_tokens=recorded,
        output_tokens=_f64(df["output_tokens"]),
        recorded_input=recorded,
        hashes=df["block_hashes"],
        block_size=block_size,
        sessions=df["_session"].to_numpy(),
        think_s=think,
        engine_cached=cached,
        ttft_s=None if ttft is None or np.isnan(ttft).all() else ttft,
        e2e_s=None if e2e is None or np.isnan(e2e).all() else e2e,
        ids=df["request_id"].to_numpy(),
        dep_wait_s=dep_wait,
        depth=_graph(df, "depth"),
        fan_out=_graph(df, "fan_out"),
    )


def compression(live: pl.DataFrame, stage: pl.DataFrame) -> float:
    """How many times faster than live the stage ran its rows: the live arrival span of the rows
    it replayed over the span of their intended send times (1 when either span is empty)."""
    ids = stage["request_id"]
    live_span = _span(live.filter(pl.col("request_id").is_in(ids.implode()))["arrival_us"]) / 1e6
    stage_span = _span(stage["intended_ns"]) / 1e9
    if not live_span or not stage_span:
        return 1.0
    return float(live_span / stage_span)


def _span(values: pl.Series) -> float:
    """Largest less smallest of a numeric column, nulls left out (0 with fewer than two)."""
    v = values.drop_nulls().to_numpy()
    return float(v.max() - v.min()) if len(v) > 1 else 0.0


def template_overhead(
    engine_prompt: np.ndarray,
    recorded: np.ndarray,
    messages: np.ndarray | None = None,
    calls: np.ndarray | None = None,
    tools: np.ndarray | None = None,
) -> tuple[np.ndarray, str] | None:
    """The tokens the engine added to each prompt (its chat template), and that in words; None
    when the engine counts prompts differently (another tokenizer, or other prompts).

    A template adds a few tokens a prompt, a few a message, a few a tool call in the history and
    the JSON of each tool definition, whatever the prompt's length. So the engine's prompt tokens
    less the recorded ones are fitted (least squares) as ``a + b x messages + c x calls + d x
    tools + e x recorded`` (``messages``: each request's count, NaN where unknown, 0 for a prompt
    that is not chat messages, which gets no template; ``calls`` and ``tools`` its tool calls and
    tool definitions, 0 where not given). A term is fitted only where its count varies (a count
    the same in every request is part of ``a``, and ``a``'s limit grows by that count times the
    term's), and the template is taken when ``a`` is between 0 and :data:`TEMPLATE_MAX` and each
    other term between 0 and its limit (:data:`TEMPLATE_PER_MESSAGE_MAX`,
    :data:`TEMPLATE_PER_CALL_MAX`, :data:`TEMPLATE_PER_TOOL_MAX`). The part that grows with the
    prompt (``e``: prompts the replay made longer or shorter) is not the template's: it stays in
    the lengths compared."""
    diff = engine_prompt - recorded
    known = np.isfinite(diff) & np.isfinite(recorded)
    messages = np.full(len(diff), np.nan) if messages is None else messages  # None: none counted
    by_message = len(np.unique(messages[known & np.isfinite(messages)])) >= 2
    if by_message:
        known &= np.isfinite(messages)
    if not known.any():
        return None
    # a prompt without messages (completions, embeddings, among chats) gets no template
    has_messages = np.isfinite(messages) & (messages > 0)
    templated = has_messages[known] if by_message else np.ones(int(known.sum()), bool)
    columns = [templated.astype(float)]
    limit_a = float(TEMPLATE_MAX)
    # (name, per-request counts, the most tokens one adds) of the terms that vary
    terms: list[tuple[str, np.ndarray, float]] = []
    candidates = [("a message", messages if by_message else None, TEMPLATE_PER_MESSAGE_MAX)]
    candidates += [("a tool call", calls, TEMPLATE_PER_CALL_MAX), ("a tool definition", tools, TEMPLATE_PER_TOOL_MAX)]
    for name, counts, most in candidates:
        if counts is None:
            continue
        counts = np.nan_to_num(np.asarray(counts, dtype=np.float64))
        inside = counts[known][templated]
        if len(inside) and np.ptp(inside) > 0:
            terms.append((name, counts, float(most)))
            columns.append(np.where(templated, counts[known], 0.0))
        elif len(inside):
            limit_a += float(inside[0]) * most  # the same in every prompt: part of a
    if np.ptp(recorded[known]) > 0:
        columns.append(recorded[known])
    coef = np.linalg.lstsq(np.column_stack(columns), diff[known], rcond=None)[0]
    a = float(coef[0])
    per = [float(c) for c in coef[1 : 1 + len(terms)]]
    # within half a token of the range is rounding: a template of 0 a message fits as -1e-12
    if not -0.5 <= a <= limit_a or any(not -0.5 <= c <= most for c, (_, _, most) in zip(per, terms)):
        return None
    a, per = max(a, 0.0), [max(c, 0.0) for c in per]
    if not terms:
        return np.full(len(diff), float(round(a))), f"{round(a):+d} tokens a prompt"
    fitted = np.full(len(diff), a)
    for c, (_, counts, _) in zip(per, terms):
        fitted = fitted + c * counts
    # a prompt that is not chat messages gets none; requests whose messages were not counted get
    # the template's median
    per_request = np.where(has_messages, fitted, np.where(np.isnan(messages), np.nan, 0.0)) if by_message else fitted
    fill = float(np.nanmedian(per_request))
    words = " and ".join([f"{a:+.0f} tokens a prompt"] + [f"{c:+.1f} {name}" for c, (name, _, _) in zip(per, terms)])
    return np.where(np.isfinite(per_request), per_request, fill), words


def _template_counts(body: str | None, api: str, roles: int) -> tuple[float, float, float]:
    """What an engine's chat template renders of one body: (messages, tool calls in the history,
    tool definitions); NaN messages where the body cannot be read. A chat body's messages are its
    ``"role"`` keys (``roles``, counted for a whole batch at once); a Responses API body's are its
    ``instructions`` and ``input`` items. Only a body that mentions tools is parsed for them."""
    if api not in ("chat", "responses"):
        return 0.0, 0.0, 0.0
    if body is None:  # a body built at replay time (synthesis): its messages unknown
        return math.nan, 0.0, 0.0
    if api == "chat" and '"tool' not in body:
        return float(roles), 0.0, 0.0
    try:
        obj = json.loads(body)
    except ValueError:
        return (float(roles) if api == "chat" else math.nan), 0.0, 0.0
    if not isinstance(obj, dict):
        return math.nan, 0.0, 0.0
    tools = obj.get("tools")
    n_tools = float(len(tools)) if isinstance(tools, list) else 0.0
    if api == "chat":
        messages = [m for m in obj.get("messages") or () if isinstance(m, dict)]
        calls = sum(len(m["tool_calls"]) for m in messages if isinstance(m.get("tool_calls"), list))
        return float(roles), float(calls), n_tools
    items = obj.get("input")
    n = 1 if isinstance(items, str) else len(items) if isinstance(items, list) else 0
    calls = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call") if isinstance(items, list) else 0
    return float(n + isinstance(obj.get("instructions"), str)), float(calls), n_tools


def message_counts(trace, ids: pl.Series | None = None) -> pl.DataFrame:
    """``request_id``, ``_messages`` (the chat messages its engine renders with its template: a
    chat body's ``messages``, a Responses API body's instructions and input items; 0 for
    completions and embeddings), ``_calls`` (the tool calls in its history) and ``_tools`` (the
    tool definitions it carries) of the rows of ``trace`` (those whose ids are in ``ids``), read a
    batch of bodies at a time; no rows when no body has messages (a token-only trace)."""
    rows = trace.df.get_column("request_id")
    keep = np.ones(len(rows), bool) if ids is None else rows.is_in(ids.implode()).to_numpy()
    apis = trace.df.get_column("api")
    counts: list[list[tuple[float, float, float]]] = []
    has_bodies = "body" in trace.df.columns or trace.body_file is not None
    done = 0
    for values in trace.body_batches(trace.df.height, MESSAGE_BATCH) if has_bodies else ():
        api = apis.slice(done, len(values)).to_list()
        roles = pl.Series(values, dtype=pl.String).str.count_matches(r'"role"\s*:').to_list()
        counts.append([_template_counts(body, kind, n or 0) for body, kind, n in zip(values, api, roles)])
        done += len(values)
    empty = pl.DataFrame(schema={"request_id": pl.String, "_messages": pl.Float64, "_calls": pl.Float64, "_tools": pl.Float64})
    if not counts:
        return empty
    got = np.array([c for batch in counts for c in batch], dtype=np.float64).reshape(-1, 3)
    frame = pl.DataFrame({"request_id": rows, "_messages": got[:, 0], "_calls": got[:, 1], "_tools": got[:, 2]}).filter(keep)
    return frame if frame["_messages"].fill_nan(0).sum() > 0 else empty


def replay_side(
    sent: pl.DataFrame, stage: pl.DataFrame, block_size: int, name: str = "replay", messages: pl.DataFrame | None = None
) -> Side:
    """One stage's sent requests, joined on request_id with the rows of the trace it replayed
    (``sent``: their block hashes and recorded lengths, what the replay offered the engine;
    ``messages``: their message counts, :func:`message_counts`, for the template's fit)."""
    cols = ["request_id", "block_hashes", "input_tokens", "output_tokens"]
    if "depends_on" in sent.columns:
        # the graph of the rows this stage sent, in the trace's order
        replayed = stage.filter(pl.col("sent_ns").is_not_null())["request_id"]
        sent = with_graph(sent.filter(pl.col("request_id").is_in(replayed.implode())))
        cols += ["depends_on"] + [c for c in ("_depth", "_fan_out") if c in sent.columns]
    df = stage.select(pl.exclude("input_tokens")).join(
        sent.select(cols).rename({"input_tokens": "recorded_input", "output_tokens": "recorded_output"}),
        on="request_id",
        how="inner",
    )
    if messages is not None:
        df = df.join(messages, on="request_id", how="left")
    df = (
        df.filter(pl.col("sent_ns").is_not_null())
        .sort("sent_ns", maintain_order=True)
        .with_columns(
            _session=pl.col("session_id").fill_null(pl.col("request_id")),
            _t=pl.col("sent_ns").cast(pl.Float64) / 1e9,
            _end=pl.col("end_ns").cast(pl.Float64) / 1e9,
        )
    )
    ok = (df["error"] == "none").to_numpy()
    recorded = _f64(df["recorded_input"])
    engine_prompt = np.where(ok, _f64(df["prompt_tokens"]), np.nan)
    notes: list[str] = []
    counted = {k: _f64(df[f"_{k}"]) if f"_{k}" in df.columns else None for k in ("messages", "calls", "tools")}
    overhead = template_overhead(engine_prompt, recorded, **counted)
    template = 0
    if np.isfinite(engine_prompt).any():
        inputs = engine_prompt - (overhead[0] if overhead else 0)
        if overhead and np.any(overhead[0]):
            template = int(round(float(np.median(overhead[0]))))
            notes.append(
                f"the engine counted {overhead[1]} more than recorded (its chat template); subtracted before comparing lengths"
            )
        elif overhead is None:
            notes.append(
                "the engine's prompt tokens differ from the recorded ones by more than a chat template "
                "would add (another tokenizer than the trace's, or other prompts)"
            )
    else:
        inputs = recorded
        notes.append("the engine reported no prompt tokens: input lengths are the recorded ones of the requests sent")
    outputs = np.where(ok, _f64(df["completion_tokens"].fill_null(df["output_chunks"])), np.nan)
    cached = np.where(ok, _f64(df["cached_tokens"]), np.nan)
    first_token = _f64(df["first_token_ns"]) / 1e9
    itl = None
    if "chunk_us" in df.columns:
        done = df.filter(pl.col("error") == "none")
        itl = (
            done.select(pl.col("chunk_us").cast(pl.List(pl.Int64)).list.diff(null_behavior="drop").alias("d"))
            .explode("d")["d"]
            .drop_nulls()
            .to_numpy()
            / 1e6
        )
    t = df["_t"].to_numpy()
    # a dependency that was never sent or never ended leaves its dependent's wait unknown
    dep_wait = dependency_waits(df, "_t", "_end") if "depends_on" in df.columns else None
    return Side(
        name=name,
        times_s=t,
        input_tokens=inputs,
        output_tokens=outputs,
        recorded_input=recorded,
        hashes=df["block_hashes"],
        block_size=block_size,
        sessions=df["_session"].to_numpy(),
        think_s=_think_times(df, "_t", "_end"),
        engine_cached=None if np.isnan(cached).all() else cached,
        template_tokens=template,
        ttft_s=np.where(ok, first_token - t, np.nan),
        e2e_s=np.where(ok, df["_end"].to_numpy() - t, np.nan),
        itl_s=itl,
        engine_prompt_all=engine_prompt,
        notes=tuple(notes),
        ids=df["request_id"].to_numpy(),
        scheduled_s=_f64(df["intended_ns"]) / 1e9,
        ready_s=_f64(df["release_ns"]) / 1e9,
        dep_wait_s=dep_wait,
        depth=_graph(df, "depth"),
        fan_out=_graph(df, "fan_out"),
    )
