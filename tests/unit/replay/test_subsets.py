"""`replay sample` keeps whole sessions; `replay slice` cuts a time window; both stream and keep
what a null body is built from."""

from __future__ import annotations

import polars as pl
import pytest

from replay.cli.main import main
from replay.errors import ConfigError, TraceError
from replay.subsets import sample_sessions, session_kept, slice_window
from replay.trace import read_trace


@pytest.fixture
def sessions_trace(tmp_path):
    """60 sessions of 1-5 turns interleaved in time, and 40 requests without a session; bodies
    null (synthesized)."""
    from capture.importers import import_burstgpt

    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type,Session ID,Elapsed time"]
    t = 0.0
    for i in range(200):
        t += 0.25
        session = f"s{i % 60}" if i < 160 else ""
        lines.append(f"{t:.2f},ChatGPT,{10 + i},{i % 7},{10 + i + i % 7},Conversation log,{session},1.5")
    src = tmp_path / "b.csv"
    src.write_text("\n".join(lines) + "\n")
    import_burstgpt(src, tmp_path / "t.parquet")
    return tmp_path / "t.parquet"


def _bodies(trace):
    return [b for batch in trace.body_batches(len(trace), 64, synthesize=True) for b in batch]


def test_sample_keeps_whole_sessions(sessions_trace, tmp_path):
    out = tmp_path / "s.parquet"
    n = sample_sessions(sessions_trace, out, 0.5, seed=3)
    full, part = read_trace(sessions_trace), read_trace(out)
    assert n == len(part) and 0 < n < len(full)
    key = pl.col("session_id").fill_null(pl.col("request_id"))
    kept = set(part.df.select(key)["session_id"].to_list())
    sizes = full.df.group_by(key).len()
    for session, size in zip(sizes["session_id"], sizes["len"]):
        got = part.df.filter(key == session).height
        assert got == (size if session in kept else 0)  # all turns or none
        assert (session in kept) == session_kept(session, 0.5, 3)
    # a kept row is the same row, with the same synthesized text
    rows = full.df.with_row_index().filter(pl.col("request_id").is_in(part.df["request_id"].implode()))
    assert part.df.equals(rows.drop("index"))
    assert _bodies(part) == [_bodies(full)[i] for i in rows["index"].to_list()]
    assert part.meta.synthesis == full.meta.synthesis
    # another seed keeps other sessions; the share is near the fraction
    other = tmp_path / "o.parquet"
    sample_sessions(sessions_trace, other, 0.5, seed=4)
    assert set(read_trace(other).df["request_id"]) != set(part.df["request_id"])
    assert 0.25 < len(kept) / sizes.height < 0.75
    with pytest.raises(ConfigError, match="--sessions"):
        sample_sessions(sessions_trace, out, 1.5)


def test_slice_cuts_a_window_and_moves_time_zero(sessions_trace, tmp_path):
    out = tmp_path / "w.parquet"
    n = slice_window(sessions_trace, out, 10.0, 20.0)
    full, part = read_trace(sessions_trace), read_trace(out)
    expected = full.df.filter((pl.col("arrival_us") >= 10_000_000) & (pl.col("arrival_us") < 20_000_000))
    assert n == expected.height == 40
    assert part.df["request_id"].to_list() == expected["request_id"].to_list()
    assert part.df["arrival_us"].to_list() == [t - 10_000_000 for t in expected["arrival_us"]]
    assert part.meta.t0_unix_us == full.meta.t0_unix_us + 10_000_000
    assert _bodies(part)[0] == _bodies(full)[full.df["request_id"].to_list().index(part.df["request_id"][0])]
    with pytest.raises(TraceError, match="no rows kept"):
        slice_window(sessions_trace, tmp_path / "none.parquet", 1000.0, 2000.0)
    assert not (tmp_path / "none.parquet").exists()
    with pytest.raises(ConfigError, match="--from/--to"):
        slice_window(sessions_trace, out, 5.0, 5.0)


def test_cli(sessions_trace, tmp_path, capsys):
    out = tmp_path / "c.parquet"
    assert main(["slice", str(sessions_trace), "-o", str(out), "--from", "40"]) == 0
    assert "wrote" in capsys.readouterr().out and len(read_trace(out)) == 40
    assert main(["sample", str(sessions_trace), "-o", str(out), "--sessions", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --sessions")
