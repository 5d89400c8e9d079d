"""Round trips through Mooncake JSONL for the token-only formats: BurstGPT (with and without
sessions) and vidur / splitwise imported, exported as Mooncake at a block size and imported
again keep their counts, token lengths, arrival times and prefix sharing (block hash identity up
to renaming); and the same on the public traces in ../shared/data."""

from __future__ import annotations

import pytest

from capture.exporters import export_trace
from capture.importers import import_mooncake, import_token_trace
from replay.blocks import prefix_hits
from replay.trace import read_trace
from tests.unit.capture.test_export import _canonical
from tests.unit.capture.test_token_imports import BURST_FULL, BURST_SHORT

VIDUR = (
    "arrived_at,num_prefill_tokens,num_decode_tokens,num_total_tokens\n"
    "0.0,1200,40,1240\n0.25,16,1,17\n0.2500005,700,9,709\n1.75,33,128,161\n3.001,2048,2,2050\n"
)
# the BurstGPT release with sessions, a failed request (0 response tokens) among them
CASES = {"burstgpt-sessions": ("burstgpt", BURST_FULL), "burstgpt": ("burstgpt", BURST_SHORT), "vidur": ("vidur", VIDUR)}


def _round_trip(src_trace, tmp_path, block_size: int):
    """Export ``src_trace`` as Mooncake with ids of ``block_size`` tokens and import it again
    (hashed in the source trace's blocks)."""
    first = read_trace(src_trace)
    out = tmp_path / f"m{block_size}.jsonl"
    export_trace("mooncake", first, out, block_size=block_size)
    again = tmp_path / f"again{block_size}.parquet"
    import_mooncake(out, again, hash_block=block_size, block_size=first.meta.block_size_tokens)
    return first, read_trace(again)


def _assert_kept(first, again) -> None:
    assert len(again) == len(first)
    for col in ("arrival_us", "input_tokens", "output_tokens"):
        assert again.df[col].to_list() == first.df[col].to_list(), col
    hashes = first.df["block_hashes"].to_list()
    assert sum(map(len, hashes)) > 0  # there are blocks to compare
    assert _canonical(again.df["block_hashes"].to_list()) == _canonical(hashes)
    assert prefix_hits(again.df["block_hashes"].to_list()) == prefix_hits(hashes)


@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_token_formats_round_trip_through_mooncake(case, block_size, tmp_path):
    fmt, text = CASES[case]
    src = tmp_path / "in.csv"
    src.write_text(text)
    import_token_trace(fmt, src, tmp_path / "first.parquet")
    first, again = _round_trip(tmp_path / "first.parquet", tmp_path, block_size)
    _assert_kept(first, again)


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "name", "limit", "block_size"),
    [
        ("azure", "azure_llm_2023_conv.csv", 3000, 16),
        ("mooncake", "mooncake_synthetic.jsonl", 300, 16),
    ],
)
def test_public_traces_round_trip_through_mooncake(shared_traces, fmt, name, limit, block_size, tmp_path):
    import_token_trace(fmt, shared_traces / name, tmp_path / "first.parquet", limit=limit)
    first, again = _round_trip(tmp_path / "first.parquet", tmp_path, block_size)
    _assert_kept(first, again)
    if fmt == "mooncake":  # the trace shares prefixes, and keeps them
        assert sum(prefix_hits(first.df["block_hashes"].to_list())) > 0
