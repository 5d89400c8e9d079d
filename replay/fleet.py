"""Fleets as targets: one replay's schedule sent to several replicas, routed client-side.

Owns :class:`Target`, :data:`ROUTES`, :func:`read_targets` (``--targets FILE``),
:func:`fleet_targets` (``--url`` given several times, or a file), :func:`route_keys` (what the
router reads of each request) and :func:`replica_breakdown` (a stage's per-replica table and its
imbalance flag). The routing policies themselves are the compiled core's (``replay_core::route``,
docs/fleets.md), the one definition of them; the runner picks each request's replica as it sends
it, so ``least-loaded`` sees the requests open at that instant:

- ``round-robin``: replicas in turn;
- ``session``: a session sticks to the replica its first request got (the least loaded, ties to
  the one holding the fewest sessions, then the lowest index); a subagent's session goes with its
  root session (``parent_session_id``, followed to the top);
- ``prefix``: the replica whose recently routed requests share the longest prefix of block hashes
  with this one (the Trace's ``block_hashes``, else its ``hash_ids``; each replica remembers a
  bounded number of blocks, least recently used forgotten first); ties and no match go
  least-loaded;
- ``least-loaded``: the fewest requests in flight, ties in turn.

One target is today's path: no router, no ``replica`` column.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import polars as pl

from replay.dag import root_sessions
from replay.errors import ConfigError

__all__ = [
    "Target",
    "ROUTES",
    "DEFAULT_ROUTE",
    "IMBALANCE_SHARE",
    "read_targets",
    "fleet_targets",
    "route_keys",
    "replica_breakdown",
    "replica_lines",
    "replica_vs_live",
    "replica_vs_live_lines",
]

ROUTES = ("round-robin", "session", "prefix", "least-loaded")
DEFAULT_ROUTE = "round-robin"
# a replica that got more than this many times its even share of the requests is flagged
IMBALANCE_SHARE = 1.5

_URL = re.compile(r"^https?://[^/\s]+")
_NAME = re.compile(r"^[A-Za-z0-9_.:@-]+$")


@dataclass(frozen=True)
class Target:
    """One replica of a fleet: the name its results carry (``replica`` column) and its base URL."""

    name: str
    url: str


def _default_name(url: str) -> str:
    """A bare URL's replica name: its host and port (and path, when it has one)."""
    return re.sub(r"^https?://", "", url).rstrip("/")


def _named(urls: list[tuple[str | None, str]]) -> tuple[Target, ...]:
    """Targets from (name or None, url): a missing name is the URL's host:port; names are unique
    (a repeated default gets ``#2``, ``#3``...)."""
    out: list[Target] = []
    seen: set[str] = set()
    for name, url in urls:
        if name is None:
            base = name = _default_name(url)
            k = 2
            while name in seen:
                name, k = f"{base}#{k}", k + 1
        seen.add(name)
        out.append(Target(name, url))
    return tuple(out)


def read_targets(path: str | Path) -> tuple[Target, ...]:
    """``--targets FILE``: one replica per line, ``NAME URL`` or just ``URL`` (named by its
    host:port); blank lines and ``#`` comments are skipped. A bad line is a ConfigError naming
    ``file:line``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--targets: cannot read '{p}': {getattr(e, 'strerror', None) or e}") from None
    pairs: list[tuple[str | None, str]] = []
    names: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        where = f"--targets {p}:{number}"
        if len(parts) > 2:
            raise ConfigError(f"{where}: '{line}' is not 'NAME URL' or 'URL'")
        name, url = (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
        if not _URL.match(url):
            raise ConfigError(f"{where}: '{url}' is not an http:// or https:// URL")
        if name is not None:
            if not _NAME.match(name) or _URL.match(name):
                raise ConfigError(f"{where}: '{name}' is not a replica name (letters, digits, _.:@-)")
            if name in names:
                raise ConfigError(f"{where}: replica name '{name}' is given twice")
            names.add(name)
        pairs.append((name, url))
    if not pairs:
        raise ConfigError(f"--targets {p}: names no URL")
    return _named(pairs)


def fleet_targets(urls: list[str] | tuple[str, ...], targets_file: str | Path | None = None) -> tuple[Target, ...]:
    """The replicas of ``--url`` (given once or more) and ``--targets FILE`` (one or the other)."""
    if targets_file is not None and urls:
        raise ConfigError("--targets and --url: give the replicas one way (a file, or --url several times)")
    if targets_file is not None:
        return read_targets(targets_file)
    return _named([(None, u) for u in urls])


def _hash64(text: str) -> int:
    """A stable nonzero 64-bit hash of a session id (0 means none to the router)."""
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
    return h or 1


class RouteKeys(TypedDict, total=False):
    """The runner's ``route_*`` arguments (:func:`replay._engine.run`)."""

    route_sessions: np.ndarray
    route_blocks: np.ndarray
    route_block_offsets: np.ndarray


def route_keys(rows: pl.DataFrame, route: str | None) -> RouteKeys:
    """What the router reads of each row under `route` (the runner's ``route_*`` arguments):
    ``session``: each row's root session hashed (0: none); ``prefix``: each row's block hashes
    (the Trace's ``block_hashes``, else its ``hash_ids``; none for a row with neither) with their
    offsets; other policies read nothing."""
    if route == "session":
        roots = root_sessions(rows)
        cache: dict[str, int] = {}
        keys = np.fromiter(
            (0 if r is None else cache.setdefault(r, _hash64(r)) for r in roots), dtype=np.uint64, count=len(roots)
        )
        return {"route_sessions": keys}
    if route == "prefix":
        blocks = _block_lists(rows)
        lengths = blocks.list.len().fill_null(0).to_numpy().astype(np.uint64)
        offsets = np.zeros(rows.height + 1, dtype=np.uint64)
        np.cumsum(lengths, out=offsets[1:])
        flat = blocks.explode().drop_nulls().to_numpy().astype(np.uint64) if rows.height else np.zeros(0, np.uint64)
        return {"route_blocks": np.ascontiguousarray(flat), "route_block_offsets": offsets}
    return {}


def _block_lists(rows: pl.DataFrame) -> pl.Series:
    """Each row's block hashes for prefix routing: ``block_hashes`` where the row has some, else
    ``hash_ids``, else none."""
    empty = pl.Series("b", [None] * rows.height, dtype=pl.List(pl.UInt64))
    cols = [rows[c].cast(pl.List(pl.UInt64)) for c in ("block_hashes", "hash_ids") if c in rows.columns]
    if not cols:
        return empty
    out = cols[0]
    for c in cols[1:]:
        out = pl.select(pl.when(out.list.len().fill_null(0) > 0).then(out).otherwise(c)).to_series()
    return out


def _ms(values: pl.Series, q: float) -> float | None:
    v = values.drop_nulls().cast(pl.Float64).to_numpy()
    return float(np.percentile(v, q)) / 1e6 if len(v) else None


def replica_breakdown(requests: pl.DataFrame, ok: pl.DataFrame, route: str | None = None) -> dict[str, Any] | None:
    """A stage's per-replica table, or None when its results name fewer than two replicas (one
    target): for each replica its share of the requests, errors, cache hit (cached over prompt
    tokens, where the engine reported cached tokens), TTFT and E2E p50 / p99 from the intended
    send (ms); and ``imbalance``: why the load looks uneven (None when it does not): a replica
    that got more than :data:`IMBALANCE_SHARE` times its even share of the requests, or one with
    errors while another has none. `ok` is :func:`replay.metrics.completed` of `requests`."""
    if "replica" not in requests.columns:
        return None
    names = [n for n in requests["replica"].unique(maintain_order=True).to_list() if n is not None]
    if len(names) < 2:
        return None
    n = requests.height
    rows = []
    for name in sorted(names):
        mine = requests.filter(pl.col("replica") == name)
        done = ok.filter(pl.col("replica") == name)
        cached = done.filter(pl.col("cached_tokens").is_not_null())
        prompt = float(cached["prompt_tokens"].fill_null(0).sum() or 0)
        rows.append(
            {
                "replica": name,
                "requests": mine.height,
                "share": mine.height / n if n else 0.0,
                "errors": int((mine["error"] != "none").sum()),
                "cache_hit_rate": float(cached["cached_tokens"].sum()) / prompt if cached.height and prompt else None,
                "ttft_p50_ms": _ms(done["ttft_ns"], 50),
                "ttft_p99_ms": _ms(done["ttft_ns"], 99),
                "e2e_p50_ms": _ms(done["e2e_ns"], 50),
                "e2e_p99_ms": _ms(done["e2e_ns"], 99),
            }
        )
    even = 1.0 / len(rows)
    reasons = [
        f"{r['replica']} got {r['share']:.0%} of the requests (even share {even:.0%})"
        for r in rows
        if r["share"] > IMBALANCE_SHARE * even
    ]
    clean = [r["replica"] for r in rows if r["errors"] == 0]
    if clean:
        reasons += [f"{r['replica']} had {r['errors']} errors, {clean[0]} none" for r in rows if r["errors"]]
    return {"route": route, "rows": rows, "imbalance": "; ".join(reasons) or None}


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def replica_lines(table: dict[str, Any] | None) -> list[str]:
    """:func:`replica_breakdown`'s table in words, a line per replica and one for the imbalance
    (none for one target)."""
    if not table:
        return []
    lines = [
        f"replica {r['replica']}: {r['share']:.0%} of requests ({r['requests']}), {r['errors']} errors, "
        f"cache hit {_f(r['cache_hit_rate'], '{:.0%}')}, TTFT p50/p99 {_f(r['ttft_p50_ms'])}/{_f(r['ttft_p99_ms'])} ms, "
        f"E2E p50/p99 {_f(r['e2e_p50_ms'])}/{_f(r['e2e_p99_ms'])} ms"
        for r in table["rows"]
    ]
    if table.get("imbalance"):
        lines.append(f"imbalanced ({table.get('route')}): {table['imbalance']}")
    return lines


def replica_vs_live(stage: pl.DataFrame, live_rows: pl.DataFrame) -> list[dict[str, Any]] | None:
    """A fleet stage's requests per replica beside the same requests live (the fidelity report's
    per-replica section; no verdict rests on it): each replica's requests, errors, and TTFT / E2E
    p50 from the send (ms) in the replay and, for those requests, as recorded live (the trace's
    ``ttft_us`` / ``e2e_us``). None when the stage names fewer than two replicas."""
    if "replica" not in stage.columns or stage["replica"].drop_nulls().n_unique() < 2:
        return None
    live = live_rows.select(
        "request_id",
        *(pl.col(c).alias(f"live_{c}") for c in ("ttft_us", "e2e_us") if c in live_rows.columns),
    )
    joined = stage.join(live, on="request_id", how="left")
    out = []
    for name in sorted(joined["replica"].drop_nulls().unique().to_list()):
        mine = joined.filter(pl.col("replica") == name)
        ok = mine.filter(pl.col("error") == "none")

        def live_ms(col: str) -> float | None:
            if col not in ok.columns:
                return None
            v = ok[col].drop_nulls().cast(pl.Float64).to_numpy()
            return float(np.percentile(v, 50)) / 1e3 if len(v) else None

        out.append(
            {
                "replica": name,
                "requests": mine.height,
                "errors": int((mine["error"] != "none").sum()),
                "ttft_p50_ms": _ms(ok["first_token_ns"] - ok["sent_ns"], 50),
                "live_ttft_p50_ms": live_ms("live_ttft_us"),
                "e2e_p50_ms": _ms(ok["end_ns"] - ok["sent_ns"], 50),
                "live_e2e_p50_ms": live_ms("live_e2e_us"),
            }
        )
    return out


def replica_vs_live_lines(rows: list[dict[str, Any]] | None) -> list[str]:
    """:func:`replica_vs_live` in words, a line per replica."""
    return [
        f"replica {r['replica']}: {r['requests']} requests, {r['errors']} errors, TTFT p50 {_f(r['ttft_p50_ms'])} ms "
        f"(live {_f(r['live_ttft_p50_ms'])}), E2E p50 {_f(r['e2e_p50_ms'])} ms (live {_f(r['live_e2e_p50_ms'])})"
        for r in rows or []
    ]
