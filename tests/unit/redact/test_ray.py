"""The Ray Data path (``replay redact --ray``) on a small local Ray cluster started here: the same
rows, surrogates, metadata and report as the local path, and failures still quarantined.

Ray's start (~6 s) and its actors' (each loads spaCy in its analysis process) make these slow."""

from __future__ import annotations

import json
import os
import sys

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
pytest.importorskip("faker")

from redact import RedactionKey, redact_file  # noqa: E402
from redact.ray_data import redact_file_ray  # noqa: E402
from replay.cli.main import main  # noqa: E402
from replay.errors import RedactionError  # noqa: E402
from replay.trace import read_trace  # noqa: E402
from tests.unit.redact.test_pipeline import POISON, RaisingRecognizer, _trace  # noqa: E402

# Ray warns about its own deprecated settings, and that a small input keeps some actors idle
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The minimum number of concurrent actors:UserWarning"),
]

KEY = RedactionKey(b"ray-test-key-0123456789abcdef")


@pytest.fixture(scope="module")
def cluster():
    """Two CPUs on this machine; the workers import what this process imports (the test
    module's recognizer included)."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}},
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def raw_file(tmp_path_factory):
    from examples.pii_corpus import make_corpus

    path = tmp_path_factory.mktemp("ray") / "raw.parquet"
    return _trace(make_corpus(10, seed=5), {3: POISON, 7: POISON}).write(path)


def _without_seconds(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "seconds"}


def test_the_cli_ray_path_writes_what_the_local_path_writes(cluster, raw_file, tmp_path, monkeypatch, capsys):
    # `replay redact --ray` end to end (one Ray redaction serves the flag and the comparison)
    local = redact_file(raw_file, tmp_path / "local.parquet", KEY, processes=1)
    monkeypatch.setenv("REPLAY_REDACT_KEY", KEY.secret.decode())
    assert main(["redact", str(raw_file), "-o", str(tmp_path / "ray.parquet"), "--ray", "--actors", "2", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "entities:" in printed and f"({local.written} requests)" in printed
    a, b = read_trace(tmp_path / "local.parquet"), read_trace(tmp_path / "ray.parquet")
    assert len(a) > 16 and a.df.equals(b.df)  # same rows, same surrogates, same order
    ma, mb = a.meta.to_metadata(), b.meta.to_metadata()
    ra, rb = json.loads(ma.pop("redaction_report")), json.loads(mb.pop("redaction_report"))
    assert ma == mb and mb["redaction_key"] == KEY.fingerprint
    assert _without_seconds(ra) == _without_seconds(rb) == _without_seconds(local.to_dict())
    assert rb["entities"]["EMAIL_ADDRESS"] > 0 and rb["analysed"] < rb["texts"]
    assert main(["redact", str(raw_file), "-o", str(tmp_path / "p.parquet"), "--actors", "2"]) == 2
    assert "--actors: only with --ray" in capsys.readouterr().err


def test_the_ray_path_quarantines_what_makes_the_analyzer_raise(cluster, raw_file, tmp_path):
    # batches of 8 rows over 2 actors: each actor sees some of the values, every row gets them all
    raw = read_trace(raw_file)
    bad = {rid for rid, body in zip(raw.df["request_id"], raw.df["body"]) if POISON in body}
    local = redact_file(raw_file, tmp_path / "local.parquet", KEY, processes=1, extra_recognizers=[RaisingRecognizer()])
    seen = []
    on_ray = redact_file_ray(
        raw_file,
        tmp_path / "ray.parquet",
        KEY,
        actors=2,
        batch_rows=8,
        extra_recognizers=[RaisingRecognizer()],
        progress=lambda done, total: seen.append((done, total)),
    )
    assert len(bad) >= 2 and on_ray.quarantined == len(bad)
    assert on_ray.quarantine_reasons == {"RuntimeError": len(bad)}
    out = read_trace(tmp_path / "ray.parquet")
    assert set(out.df["request_id"]).isdisjoint(bad) and len(out) == len(raw) - len(bad)
    assert POISON not in "".join(out.df["body"].to_list())
    want = read_trace(tmp_path / "local.parquet")
    assert len(raw) > 16 and out.df.equals(want.df)  # same rows, same surrogates, same order
    ma, mb = want.meta.to_metadata(), out.meta.to_metadata()
    ra, rb = json.loads(ma.pop("redaction_report")), json.loads(mb.pop("redaction_report"))
    assert ma == mb and mb["redaction_key"] == KEY.fingerprint
    # the report returned is the one written, and the local path's
    assert _without_seconds(ra) == _without_seconds(rb) == _without_seconds(on_ray.to_dict())
    assert _without_seconds(local.to_dict()) == _without_seconds(on_ray.to_dict())
    assert seen and seen[-1][0] == seen[-1][1] == on_ray.requests


class RaisesAlways(RaisingRecognizer):
    def analyze(self, text, entities, nlp_artifacts=None):
        raise RuntimeError("always")


def test_all_quarantined_writes_nothing(cluster, raw_file, tmp_path):
    with pytest.raises(RedactionError, match="all .* requests quarantined"):
        redact_file_ray(raw_file, tmp_path / "out.parquet", KEY, actors=1, extra_recognizers=[RaisesAlways()])
    assert not (tmp_path / "out.parquet").exists()
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_a_bad_input_row_is_an_error_naming_the_file_and_nothing_is_written(cluster, raw_file, tmp_path):
    import polars as pl
    import pyarrow.parquet as pq

    from replay.errors import TraceError

    raw = read_trace(raw_file)
    bodies = raw.df["body"].to_list()
    bodies[5] = "not json"
    table = raw.df.with_columns(pl.Series("body", bodies)).to_arrow()
    table = table.replace_schema_metadata({k.encode(): v.encode() for k, v in raw.meta.to_metadata().items()})
    pq.write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(TraceError, match=r"bad\.parquet.*column 'body' is not a JSON object"):
        redact_file_ray(tmp_path / "bad.parquet", tmp_path / "out.parquet", KEY, actors=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet"]


def test_null_bodies_stay_null_on_ray_too(cluster, tmp_path):
    # token-only rows (null bodies, synthesized at replay) beside one row of real text
    from capture.importers import import_mooncake

    src = tmp_path / "aiperf.jsonl"
    src.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]},
                {
                    "timestamp": 5,
                    "output_length": 4,
                    "messages": [{"role": "user", "content": "Write to jane.roe@example.com about the invoice."}],
                },
                {"timestamp": 9, "input_length": 30, "output_length": 2},
            ]
        )
        + "\n"
    )
    import_mooncake(src, tmp_path / "raw.parquet")
    local = redact_file(tmp_path / "raw.parquet", tmp_path / "local.parquet", KEY, processes=1)
    on_ray = redact_file_ray(tmp_path / "raw.parquet", tmp_path / "ray.parquet", KEY, actors=1)
    a, b = read_trace(tmp_path / "local.parquet"), read_trace(tmp_path / "ray.parquet")
    assert b.df["body"].is_null().to_list() == [True, False, True]
    assert "jane.roe@example.com" not in b.df["body"][1] and a.df.equals(b.df)
    assert _without_seconds(local.to_dict()) == _without_seconds(on_ray.to_dict())
    assert on_ray.written == 3 and on_ray.prefix_checked_requests == 1
