"""ServeGen client folders (built here field by field from alibaba/ServeGen's clientpool.py:
``chunk-<c>-trace.csv`` rows ``window_s,rate_rps,cv,pattern,arg1,arg2`` and
``chunk-<c>-dataset.json`` windows of Python-dict strings) sampled into a seeded workload."""

from __future__ import annotations

import json

import numpy as np
import pytest

from capture.importers.servegen import import_servegen
from capture.importers.sniff import sniff
from replay.errors import TraceError
from replay.trace import read_trace

W = 600


def _client(folder, name, rows, dataset):
    """Write one client: ``rows`` (window_s, rate, cv, pattern, arg1, arg2) and ``dataset``
    ({window_s: {field: {value: probability}}}, written as ServeGen's dict strings)."""
    folder.mkdir(exist_ok=True)
    (folder / f"chunk-{name}-trace.csv").write_text("".join(",".join(str(c) for c in row) + "\n" for row in rows))
    (folder / f"chunk-{name}-dataset.json").write_text(
        json.dumps({str(ts): {k: repr(v) for k, v in fields.items()} for ts, fields in dataset.items()})
    )


def _gamma_row(ts, rate, cv):
    shape = 1 / cv**2  # ServeGen: Gamma(a=shape, scale); cv = 1/sqrt(shape)
    return (ts, rate, cv, "Gamma", shape, 1 / (rate * shape))


LANG = {"input_tokens": {100: 0.5, 200: 0.0, 300: 0.5}, "output_tokens": {10: 0.25, 20: 0.75}}
LANG_LATER = {"input_tokens": {50: 1.0}, "output_tokens": {5: 1.0}}


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "m-test"
    # client 0: Gamma cv 2 at 3 req/s, idle in window 600, Gamma again; distributions change at 1200
    rows0 = [_gamma_row(0, 3.0, 2.0), (600, 0, 0, "", 0, 0), _gamma_row(1200, 3.0, 2.0)]
    _client(d, "0", rows0, {0: LANG, 1200: LANG_LATER})
    # client 1: Weibull at 0.5 req/s in every window, one distribution window
    rows1 = [(ts, 0.5, 1.5, "Weibull", 0.7, 1.3) for ts in (0, 600, 1200)]
    _client(d, "1", rows1, {0: {"input_tokens": {7: 1.0}, "output_tokens": {1: 1.0}}})
    return d


def _run(folder, tmp_path, name="out.parquet", **kw):
    out = tmp_path / name
    import_servegen(folder, out, **kw)
    return read_trace(out, bodies=False)


def test_rates_patterns_and_lengths(folder, tmp_path):
    trace = _run(folder, tmp_path, seed=3)
    df = trace.df
    assert trace.meta.source_format == "servegen"
    t = df["arrival_us"].to_numpy() + trace.meta.t0_unix_us
    assert (np.diff(df["arrival_us"].to_numpy()) >= 0).all()
    c0 = df["request_id"].str.starts_with("servegen-0-").to_numpy()
    win = t // (W * 1_000_000)
    # each window holds round(rate * 600) requests of each active client; the idle one none
    assert [int(((win == k) & c0).sum()) for k in range(3)] == [1800, 0, 1800]
    assert [int(((win == k) & ~c0).sum()) for k in range(3)] == [300, 300, 300]
    # Gamma interarrivals keep the window's CV (2), within sampling error of 1800 gaps
    for k in (0, 2):
        gaps = np.diff(t[(win == k) & c0]).astype(float)
        assert abs(gaps.std() / gaps.mean() - 2.0) < 0.3
    # lengths only from the support of positive probability, each window its distribution
    first, third = c0 & (win == 0), c0 & (win == 2)
    assert set(df["input_tokens"].to_numpy()[first]) == {100, 300}  # 200 has probability 0
    assert set(df["output_tokens"].to_numpy()[first]) == {10, 20}
    assert abs((df["output_tokens"].to_numpy()[first] == 20).mean() - 0.75) < 0.05
    assert set(df["input_tokens"].to_numpy()[third]) == {50}
    assert set(df["input_tokens"].to_numpy()[~c0]) == {7}
    assert df["max_tokens"].to_list() == df["output_tokens"].to_list()
    report = json.loads(trace.meta.import_report)["servegen"]
    assert report["clients"] == 2 and report["windows"] == 3 and report["idle_client_windows"] == 1
    assert report["active_client_windows"] == 5


def test_seeded_duration_and_limit(folder, tmp_path):
    a = _run(folder, tmp_path, "a.parquet", seed=5, duration=900)
    b = _run(folder, tmp_path, "b.parquet", seed=5, duration=900)
    c = _run(folder, tmp_path, "c.parquet", seed=6, duration=900)
    assert a.df.equals(b.df)
    assert not a.df["arrival_us"].equals(c.df["arrival_us"])
    t = a.df["arrival_us"].to_numpy() + a.meta.t0_unix_us
    assert t.max() < 900_000_000  # the second window is cut at 900 s: 0.5 req/s * 300 s from client 1
    assert int((t >= 600_000_000).sum()) == 150
    assert len(_run(folder, tmp_path, "d.parquet", limit=10)) == 10


def test_multimodal_and_reason_fields(tmp_path):
    d = tmp_path / "mm"
    mm = {
        "text_tokens": {10: 1.0},
        "image_tokens": {100: 1.0},
        "audio_tokens": {0: 1.0},
        "video_tokens": {0: 1.0},
        "image_count": {2: 1.0},
        "audio_count": {0: 1.0},
        "video_count": {0: 1.0},
        "output_tokens": {4: 1.0},
    }
    _client(d, "0", [_gamma_row(0, 0.1, 1.0)], {0: mm})
    trace = _run(d, tmp_path)
    assert set(trace.df["input_tokens"]) == {210}  # text + 2 images of 100
    r = tmp_path / "reason"
    _client(r, "0", [_gamma_row(0, 0.1, 1.0)], {0: {**LANG, "reason_ratio": {0.0: 0.5, 0.5: 0.5}}})
    report = json.loads(_run(r, tmp_path, "r.parquet").meta.import_report)["servegen"]
    assert any("reason_ratio" in x for x in report["not_mapped"])


def test_bad_input_names_file_line_and_field(folder, tmp_path):
    trace_csv = folder / "chunk-1-trace.csv"
    lines = trace_csv.read_text().splitlines()
    trace_csv.write_text("\n".join([lines[0], "600,fast,1.5,Weibull,0.7,1.3", lines[2]]) + "\n")
    with pytest.raises(TraceError, match=r"chunk-1-trace.csv: line 2: 'fast' is not a number \(field 'rate_rps'\)"):
        _run(folder, tmp_path)
    trace = _run(folder, tmp_path, "skip.parquet", skip_bad=True)  # the bad window makes no requests
    report = json.loads(trace.meta.import_report)
    assert report["skipped_lines"] == 1 and "chunk-1-trace.csv" in report["first_skipped"][0]["reason"]
    trace_csv.write_text("0,0.5,1.5,Poisson,0.7,1.3\n")
    with pytest.raises(TraceError, match=r"line 1: 'Poisson' is not Gamma, Weibull or empty \(field 'pattern'\)"):
        _run(folder, tmp_path)
    trace_csv.write_text("600,0.5,1.5,Weibull,0.7,1.3\n0,0.5,1.5,Weibull,0.7,1.3\n")
    with pytest.raises(TraceError, match=r"line 2: window 0 is not after .*\(field 'window_s'\)"):
        _run(folder, tmp_path)
    trace_csv.write_text("0,0.5,1.5,Weibull,0.7,1.3\n")
    code = {"0": {"input_tokens": "__import__('os')", "output_tokens": "{1: 1.0}"}}  # never run: literal_eval
    (folder / "chunk-1-dataset.json").write_text(json.dumps(code))
    with pytest.raises(TraceError, match=r"dataset.json: window 0: is not a Python dict literal \(field 'input_tokens'\)"):
        _run(folder, tmp_path)
    _client(folder, "1", [(1200, 0.5, 1.5, "Weibull", 0.7, 1.3)], {1800: LANG})
    with pytest.raises(TraceError, match=r"trace.csv: line 1: chunk-1-dataset.json has no distribution at or before window 1200"):
        _run(folder, tmp_path)


def test_sniff_finds_a_servegen_folder(folder):
    assert sniff(folder) == "servegen"
