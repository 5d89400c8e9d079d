"""Baseten trace and SageMaker Data Capture imports: samples written field by field from their
schemas (ai-dynamo/aiperf@264464ae baseten_trace_models.py; @1acb3691 sagemaker_data_capture.py
and the AWS DataCaptureConfig reference), checked against what they record."""

from __future__ import annotations

import base64
import json

import pytest

from capture.importers import import_log
from capture.importers.sniff import sniff
from replay.errors import TraceError

T0_MS = 1_700_000_000_000


def _baseten(**over):
    cols = dict(
        timestamp_start_unix_ms=[T0_MS + 1000, T0_MS, T0_MS + 250],  # not in time order
        prompt=["Other question", "Hello there", "Hello there. And more"],
        input_tokens=[2, 2, 5],
        output_tokens=[3, 4, 0],
        total_hashes=[[9], [1], [1, 2]],
        provided_session_id=[None, "s", "s"],
        duration_ttft_ms=[None, 10, 20],
        duration_e2e_ms=[70, 50, 60],
        request_canceled=[0, 0, 1],
        cached_tokens_reference=[None, 0, 2],
        model_name=["m", "m", "m"],
        block_size=[16, 16, 16],
    )
    cols.update(over)
    return cols


def _write(tmp_path, cols, name="trace.parquet", ipc=False):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(cols)
    path = tmp_path / name
    if ipc:
        with pa.ipc.new_file(path, table.schema) as w:
            w.write_table(table)
    else:
        pq.write_table(table, path, row_group_size=2)
    return path


@pytest.mark.parametrize("ipc", [False, True])
def test_a_baseten_trace_imports_sessions_latencies_cache_and_cancels(tmp_path, imported, ipc):
    path = _write(tmp_path, _baseten(), "trace.arrow" if ipc else "trace.parquet", ipc=ipc)
    assert sniff(path) == "baseten"
    trace = imported(import_log, "baseten", path)
    rows = trace.df.to_dicts()
    assert [r["request_id"] for r in rows] == ["row-2", "row-3", "row-1"]  # by arrival
    assert [r["arrival_us"] for r in rows] == [0, 250_000, 1_000_000] and trace.meta.t0_unix_us == T0_MS * 1000
    assert [(r["session_id"], r["turn"], r["depends_on"]) for r in rows] == [("s", 0, []), ("s", 1, ["row-2"]), ("row-1", 0, [])]
    assert [r["ttft_us"] for r in rows] == [10_000, 20_000, None]
    assert [r["e2e_us"] for r in rows] == [50_000, 60_000, 70_000]
    assert [r["cached_tokens"] for r in rows] == [0, 2, None]
    assert [r["output_tokens"] for r in rows] == [4, 0, 3]
    assert [r["outcome"] for r in rows] == ["completed", "client_disconnected", "completed"]
    assert json.loads(rows[1]["body"]) == {"model": "m", "prompt": "Hello there. And more"} and rows[1]["api"] == "completions"
    assert rows[0]["input_tokens"] == 2  # "Hello there" under gpt2
    report = json.loads(trace.meta.import_report)["baseten"]
    assert report["rows_read"] == 3 and report["recorded_prompt_tokens"] == 9 and report["canceled"] == 1
    assert "total_hashes" in report["not_mapped"]


def test_a_bad_baseten_row_names_the_row_and_field_and_skip_bad_counts_it(tmp_path, imported):
    path = _write(tmp_path, _baseten(request_canceled=[0, 2, 1]), "bad.parquet")
    with pytest.raises(TraceError, match=r"^bad.parquet: row 2: 2 is not 0 or 1 \(field 'request_canceled'\)$"):
        import_log("baseten", path, tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()
    trace = imported(import_log, "baseten", path, skip_bad=True)
    assert len(trace) == 2 and json.loads(trace.meta.import_report)["baseten"]["skipped_lines"] == 1
    cols = _baseten()
    del cols["total_hashes"]
    with pytest.raises(TraceError, match=r"no column 'total_hashes'"):
        import_log("baseten", _write(tmp_path, cols, "short.parquet"), tmp_path / "y.parquet")


def test_a_redacting_baseten_import_writes_no_raw_text(tmp_path, monkeypatch):
    pytest.importorskip("presidio_analyzer")
    import redact.pipeline
    from redact import RedactionKey
    from replay.trace import read_trace

    monkeypatch.setattr(redact.pipeline, "default_processes", lambda: 1)
    cols = _baseten(prompt=["Mail ada@example.com", "Hi", "Hi again"])
    key = RedactionKey(b"baseten-test-key-0123456789")
    result = import_log("baseten", _write(tmp_path, cols), tmp_path / "r.parquet", key=key)
    trace = read_trace(result.path)
    assert trace.meta.redaction_policy == "redacted" and "ada@example.com" not in "".join(trace.df["body"].to_list())


def _capture(event, time, body, answer=None, encoding="JSON", content_type="application/json"):
    def entry(mode, payload):
        data = payload if isinstance(payload, str) else json.dumps(payload)
        if encoding == "BASE64":
            data = base64.b64encode(data.encode()).decode()
        return {"observedContentType": content_type, "mode": mode, "data": data, "encoding": encoding}

    data = {"endpointInput": entry("INPUT", body)}
    if answer is not None:
        data["endpointOutput"] = entry("OUTPUT", answer)
    return {"captureData": data, "eventMetadata": {"eventId": event, "inferenceTime": time}, "eventVersion": "0"}


HELLO = "Hello! How can I help you today?"


def _sagemaker_folder(tmp_path):
    first = [{"role": "user", "content": "Hi"}]
    hour = tmp_path / "capture" / "ep" / "AllTraffic" / "2024" / "05" / "01" / "00"
    hour.mkdir(parents=True)
    (hour / "a.jsonl").write_text(
        json.dumps(
            _capture(
                "e1",
                "2024-05-01T00:00:01Z",
                {"messages": first, "max_tokens": 50},
                {
                    "choices": [{"message": {"role": "assistant", "content": HELLO}}],
                    "usage": {"prompt_tokens": 8, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}},
                },
            )
        )
        + "\n"
        + json.dumps(
            _capture(
                "e2",
                "2024-05-01T00:00:01Z",  # the same second: a tie, kept in file order
                {"messages": [*first, {"role": "assistant", "content": HELLO}, {"role": "user", "content": "Bye"}]},
                {"usage": {"prompt_tokens": 20, "completion_tokens": 2}},
                encoding="BASE64",
            )
        )
        + "\n"
        + json.dumps(_capture("e3", "2024-05-01T00:00:03Z", "1,2,3", encoding="CSV", content_type="text/csv"))
        + "\n"
    )
    return tmp_path / "capture"


def test_a_sagemaker_capture_folder_imports_bodies_usage_and_sessions(tmp_path, imported):
    folder = _sagemaker_folder(tmp_path)
    assert sniff(folder) == "sagemaker"
    trace = imported(import_log, "sagemaker", folder)
    rows = trace.df.to_dicts()
    assert [r["request_id"] for r in rows] == ["e1", "e2"] and [r["arrival_us"] for r in rows] == [0, 0]
    assert [(r["session_id"], r["turn"], r["depends_on"]) for r in rows] == [("e1", 0, []), ("e1", 1, ["e1"])]
    assert [r["output_tokens"] for r in rows] == [9, 2] and [r["max_tokens"] for r in rows] == [50, 2]
    assert rows[0]["cached_tokens"] == 4 and rows[0]["response"] == HELLO and rows[0]["ttft_us"] is None
    report = json.loads(trace.meta.import_report)["sagemaker"]
    assert report["files"] == 1 and report["not_imported"] == {"not_json: CSV": 1}


def test_a_bad_sagemaker_line_names_the_file_line_and_field(tmp_path, imported):
    folder = _sagemaker_folder(tmp_path)
    hour = next(folder.rglob("a.jsonl")).parent
    broken = _capture("e9", "yesterday", {"messages": [{"role": "user", "content": "x"}]})
    (hour / "b.jsonl").write_text("\n" + json.dumps(broken) + "\n")
    with pytest.raises(TraceError, match=r"b.jsonl: line 2: time 'yesterday' .* \(field 'eventMetadata.inferenceTime'\)"):
        import_log("sagemaker", folder, tmp_path / "x.parquet")
    trace = imported(import_log, "sagemaker", folder, skip_bad=True)
    report = json.loads(trace.meta.import_report)["sagemaker"]
    assert len(trace) == 2 and report["skipped_lines"] == 1 and report["first_skipped"][0]["line"] == 2


def test_baseten_sessions_fall_back_to_poor_man_session_id_as_aiperf_does(tmp_path, imported):
    cols = _baseten(provided_session_id=["x", "y", None], poor_man_session_id=[7, 8, 8])
    trace = imported(import_log, "baseten", _write(tmp_path, cols))
    assert dict(zip(trace.df["request_id"], trace.df["session_id"])) == {"row-1": "7", "row-2": "8", "row-3": "8"}
    assert json.loads(trace.meta.import_report)["baseten"]["session_column"] == "poor_man_session_id"
