"""Azure LLM inference CSVs of 2024 (the week, DynamoLLM) and 2025 (multimodal, ModServe, gzipped):
each year's timestamp forms, the images counted and said not replayed, bad rows, `auto`."""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timezone

import pytest

from capture.importers import import_azure
from capture.importers.sniff import sniff
from replay.cli.main import main
from replay.errors import TraceError
from replay.trace import read_trace
from replay.traffic import trace_summary


def _us(*args) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp()) * 1_000_000


def _csv(header: str, rows: list[tuple]) -> str:
    return header + "\n" + "".join(",".join(str(c) for c in r) + "\n" for r in rows)


# AzureLLMInferenceTrace_{code,conv}_1week.csv (2024): TIMESTAMP with microseconds and +00:00, or
# without a fraction when it is whole (both forms in one file, the notebook's note)
ROWS_2024 = [
    ("2024-05-10 00:00:00.009930+00:00", 2162, 5),
    ("2024-05-10 00:00:01+00:00", 76, 15),
    ("2024-05-10 00:00:01.509930+00:00", 7670, 8),
    ("2024-05-10 00:00:02.009930+00:00", 378, 56),
]
# AzureLMMInferenceTrace_multimodal.csv.gz (2025): TIMESTAMP in ms with Z, NumImages second
ROWS_2025 = [
    ("2024-10-15T12:00:00.269Z", 0, 770, 491),
    ("2024-10-15T12:00:05.819Z", 1, 949, 126),
    ("2024-10-15T12:00:06.519Z", 16, 4564, 137),
    ("2024-10-15T12:00:07.269Z", 0, 78, 5),
    ("2024-10-15T12:00:08.269Z", 2, 1724, 28),
]
HEADER_2025 = "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens"


def _import(tmp_path, path, **kwargs):
    out = tmp_path / "out.parquet"
    result = import_azure(path, out, **kwargs)
    return read_trace(out), json.loads(result.meta.import_report)


def _gz(tmp_path, text: str, name: str = "AzureLMMInferenceTrace_multimodal.csv.gz"):
    path = tmp_path / name
    with gzip.open(path, "wt") as f:
        f.write(text)
    return path


def test_2024_week_both_timestamp_forms(tmp_path):
    path = tmp_path / "AzureLLMInferenceTrace_code_1week.csv"
    path.write_text(_csv("TIMESTAMP,ContextTokens,GeneratedTokens", ROWS_2024))
    trace, report = _import(tmp_path, path)
    df = trace.df
    assert trace.meta.t0_unix_us == _us(2024, 5, 10) + 9930
    assert df["arrival_us"].to_list() == [0, 990_070, 1_500_000, 2_000_000]
    assert df["input_tokens"].to_list() == [2162, 76, 7670, 378]
    assert df["max_tokens"].to_list() == [5, 15, 8, 56]
    assert trace_summary(trace)["mean_rate_rps"] == pytest.approx(3 / 2.0)
    assert "images" not in report and "not_replayed" not in report  # not a multimodal file
    assert sniff(path) == "azure"


def test_2025_multimodal_gzipped(tmp_path, capsys):
    path = _gz(tmp_path, _csv(HEADER_2025, ROWS_2025))
    trace, report = _import(tmp_path, path)
    df = trace.df
    assert df.height == 5
    assert trace.meta.t0_unix_us == _us(2024, 10, 15, 12) + 269_000
    assert df["arrival_us"].to_list() == [0, 5_550_000, 6_250_000, 7_000_000, 8_000_000]
    assert df["input_tokens"].to_list() == [770, 949, 4564, 78, 1724]  # images' tokens included, as text
    assert df["max_tokens"].to_list() == [491, 126, 137, 5, 28]
    assert trace_summary(trace)["mean_rate_rps"] == pytest.approx(4 / 8.0)
    assert (report["image_rows"], report["images"]) == (3, 19)
    assert report["not_replayed"].startswith("images not replayed: 3 rows had 19 images; their tokens are in ContextTokens")
    assert sniff(path) == "azure"
    out = tmp_path / "cli.parquet"
    assert main(["import", "auto", str(path), "-o", str(out), "--quiet"]) == 0
    assert report["not_replayed"] in capsys.readouterr().out
    # with --limit, the counts are of the rows imported
    _, report = _import(tmp_path, path, limit=2)
    assert (report["image_rows"], report["images"]) == (1, 1)


def test_multimodal_bad_rows_and_skip_bad(tmp_path):
    rows = [ROWS_2025[0], ("2024-10-15T12:00:01.000Z", "x", 10, 2), ROWS_2025[1]]
    path = _gz(tmp_path, _csv(HEADER_2025, rows))
    with pytest.raises(TraceError) as info:
        _import(tmp_path, path)
    assert str(info.value) == ("AzureLMMInferenceTrace_multimodal.csv.gz: line 3: 'x' is not an integer >= 0 (field 'NumImages')")
    assert not (tmp_path / "out.parquet").exists()
    trace, report = _import(tmp_path, path, skip_bad=True)
    assert trace.df["request_id"].to_list() == ["azure-000000", "azure-000001"]
    assert report["skipped_lines"] == 1 and (report["image_rows"], report["images"]) == (1, 1)
    broken = tmp_path / "broken.csv.gz"
    broken.write_bytes(gzip.compress(_csv(HEADER_2025, ROWS_2025).encode())[:40])
    with pytest.raises(TraceError, match=r"^broken.csv.gz: not a readable CSV \(Compressed file ended"):
        _import(tmp_path, broken)
