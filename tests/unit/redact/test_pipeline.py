"""Redacting a whole trace: nothing labelled survives, the workload's shape does, failures are
quarantined (never written), and the file path streams to the same result."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

pytest.importorskip("faker")

from capture.importers.logs import build_trace
from capture.importers.records import LogRecord  # noqa: E402
from presidio_analyzer import EntityRecognizer  # noqa: E402
from redact import RedactionKey, redact_file, redact_trace  # noqa: E402
from examples.pii_corpus import make_corpus  # noqa: E402
from replay.bodies import prompt_token_ids, text_slots  # noqa: E402
from replay.blocks import block_hashes, prefix_hits  # noqa: E402
from replay.cli.main import main  # noqa: E402
from replay.errors import TraceError  # noqa: E402
from replay.tokenizer import load_tokenizer  # noqa: E402
from replay.trace import read_trace  # noqa: E402

KEY = RedactionKey(b"pipeline-test-key-0123456789")
STRUCTURED = {
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "IP_ADDRESS",
    "US_SSN",
    "API_KEY",
    "JWT",
    "PRIVATE_KEY",
    "BEARER_TOKEN",
    "URL_PASSWORD",
}
POISON = "please-make-the-analyzer-raise"
SLOW = "please-make-the-analyzer-hang"


class RaisingRecognizer(EntityRecognizer):
    """A user's own recognizer that raises (or hangs) on one marker: the quarantine path."""

    def __init__(self):
        super().__init__(supported_entities=["TEST_MARKER"], name="raising", supported_language="en")

    def load(self):
        pass

    def analyze(self, text, entities, nlp_artifacts=None):
        if POISON in text:
            raise RuntimeError("recognizer failed")
        if SLOW in text:
            time.sleep(600)
        return []


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(30, seed=5)


def _trace(corpus, extra: dict[int, str] | None = None):
    records = []
    for i, (body, response) in enumerate(zip(corpus.requests, corpus.responses)):
        body = json.loads(json.dumps(body))
        if extra and i in extra:
            body["messages"][-1]["content"] += " " + extra[i]
        records.append(
            LogRecord(
                arrival_us=1_700_000_000_000_000 + int(corpus.arrival_s[i] * 1e6),
                api="chat",
                model=body.get("model"),
                body=body,
                request_id=f"r{i:04d}",
                response=response,
            )
        )
    return build_trace(records, source="corpus", source_format="openai-jsonl")


@pytest.fixture(scope="module")
def redacted(corpus):
    raw = _trace(corpus)
    out, report = redact_trace(raw, KEY, processes=1)
    return raw, out, report


def test_nothing_labelled_survives(corpus, redacted):
    raw, out, _ = redacted
    assert len(out) == len(raw)
    text = "\n".join(out.df["body"].to_list() + [r or "" for r in out.df["response"].to_list()])
    values = {s.value for lab in corpus.labels.values() for s in lab.spans if s.entity in STRUCTURED}
    assert len(values) > 100
    leaked = sorted(v for v in values if json.dumps(v)[1:-1] in text or v in text)
    assert leaked == []


def test_structure_and_sampling_parameters_are_untouched(redacted):
    raw, out, _ = redacted
    for a, b in zip(raw.df["body"].to_list(), out.df["body"].to_list()):
        a, b = json.loads(a), json.loads(b)
        assert [m["role"] for m in a["messages"]] == [m["role"] for m in b["messages"]]
        assert {k: v for k, v in a.items() if k != "messages"} == {k: v for k, v in b.items() if k != "messages"}
    for col in ("request_id", "session_id", "arrival_us", "input_tokens", "block_hashes"):
        assert out.df[col].equals(raw.df[col]), col


def test_token_lengths_and_prefix_sharing_survive(redacted):
    raw, out, report = redacted
    tok = load_tokenizer(raw.meta.tokenizer)
    bs = raw.meta.block_size_tokens
    lengths, hashes = [], []
    for body in out.df["body"].to_list():
        ids = prompt_token_ids([s.text for s in text_slots(json.loads(body))], tok)
        lengths.append(len(ids))
        hashes.append(block_hashes(ids, bs))
    delta = np.array(lengths) - raw.df["input_tokens"].to_numpy()
    # a surrogate off by a token or two (counted in the report) shifts every later turn that
    # resends it: the floor is 97% of requests exact
    assert (delta == 0).mean() >= 0.97, np.unique(delta, return_counts=True)
    assert np.abs(delta).max() <= 10
    assert abs(delta.sum()) / raw.df["input_tokens"].sum() <= 0.002
    # a request off in length holds a surrogate off in length, and the report counts it
    assert (delta != 0).any() <= (sum(report.token_exceptions.values()) >= 1)
    assert report.to_dict()["requests_token_exact"] == pytest.approx((delta == 0).mean())
    raw_hits = prefix_hits(raw.df["block_hashes"].to_list())
    red_hits = prefix_hits(hashes)
    kept = sum(min(a, b) for a, b in zip(raw_hits, red_hits)) / sum(raw_hits)
    assert sum(raw_hits) > 1000 and kept >= 0.99
    assert report.prefix_sharing_kept == pytest.approx(kept)
    assert report.to_dict()["requests_token_exact"] == pytest.approx((delta == 0).mean())


def test_one_text_one_redaction_and_identifiers_kept(corpus, redacted):
    raw, out, _ = redacted
    seen: dict[str, str] = {}
    kept = total = 0
    for a, b in zip(raw.df["body"].to_list(), out.df["body"].to_list()):
        for sa, sb in zip(text_slots(json.loads(a)), text_slots(json.loads(b))):
            assert seen.setdefault(sa.text, sb.text) == sb.text
            for word in corpus.labels[sa.text].non_pii:
                total += 1
                kept += word in sb.text
    assert total > 100 and kept / total >= 0.95  # measured 0.965


def test_metadata_names_the_key_not_the_secret(redacted):
    _, out, report = redacted
    meta = out.meta
    assert meta.redaction_policy == "redacted" and meta.redaction_key == KEY.fingerprint
    assert KEY.secret.decode() not in json.dumps(meta.to_metadata())
    stored = json.loads(meta.redaction_report)
    assert stored["written"] == len(out) and stored["quarantined"] == 0
    assert stored["entities"]["EMAIL_ADDRESS"] > 0 and stored["analysed"] < stored["texts"]
    assert "prefix sharing kept" in report.summary()
    with pytest.raises(TraceError, match="already redacted"):
        redact_trace(out, KEY, processes=1)


def test_a_text_that_makes_the_analyzer_raise_is_quarantined(corpus):
    raw = _trace(corpus, {3: POISON, 7: POISON})
    out, report = redact_trace(raw, KEY, processes=1, extra_recognizers=[RaisingRecognizer()])
    # the poisoned turns and every later request that resends them
    bad = {rid for rid, body in zip(raw.df["request_id"], raw.df["body"]) if POISON in body}
    assert len(bad) >= 2 and report.quarantined == len(bad)
    assert set(out.df["request_id"]).isdisjoint(bad) and len(out) == len(raw) - len(bad)
    assert POISON not in "".join(out.df["body"].to_list())
    assert report.quarantine_reasons == {"RuntimeError": len(bad)}


def test_a_text_whose_analysis_hangs_is_quarantined(corpus):
    raw = _trace(corpus, {2: SLOW})
    out, report = redact_trace(raw, KEY, processes=1, timeout_s=3, extra_recognizers=[RaisingRecognizer()])
    bad = {rid for rid, body in zip(raw.df["request_id"], raw.df["body"]) if SLOW in body}
    assert bad and report.quarantined == len(bad) and report.quarantine_reasons == {"timeout": len(bad)}
    assert len(out) == len(raw) - len(bad)


def test_the_file_path_streams_to_the_same_trace(corpus, redacted, tmp_path, monkeypatch):
    import redact.pipeline

    raw, out, _ = redacted
    src = raw.write(tmp_path / "raw.parquet")
    monkeypatch.setattr(redact.pipeline, "ROW_BATCH", 16)  # several row groups
    report = redact_file(src, tmp_path / "red.parquet", KEY, processes=1)
    back = read_trace(tmp_path / "red.parquet")
    assert back.df.equals(out.df)
    assert back.meta.redaction_report and report.written == len(out)
    assert report.prefix_sharing_kept == pytest.approx(json.loads(out.meta.redaction_report)["prefix_sharing_kept"])


def test_cli_needs_a_key_and_redacts(corpus, redacted, tmp_path, monkeypatch, capsys):
    raw, _, _ = redacted
    src = raw.write(tmp_path / "raw.parquet")
    monkeypatch.delenv("REPLAY_REDACT_KEY", raising=False)
    assert main(["redact", str(src), "-o", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "REPLAY_REDACT_KEY" in err[0]
    assert not (tmp_path / "o.parquet").exists()
    key_file = tmp_path / "key"
    key_file.write_text("cli-test-key-0123456789\n")
    assert (
        main(["redact", str(src), "-o", str(tmp_path / "o.parquet"), "--key-file", str(key_file), "--quiet", "--processes", "1"])
        == 0
    )
    assert "entities:" in capsys.readouterr().out
    assert read_trace(tmp_path / "o.parquet").meta.redaction_key == RedactionKey(b"cli-test-key-0123456789").fingerprint


def test_the_file_path_rejects_a_bad_input_row_and_writes_nothing(redacted, tmp_path):
    import polars as pl
    import pyarrow.parquet as pq

    raw, _, _ = redacted
    bodies = raw.df["body"].to_list()
    bodies[20] = "not json"
    table = raw.df.with_columns(pl.Series("body", bodies)).to_arrow()
    table = table.replace_schema_metadata({k.encode(): v.encode() for k, v in raw.meta.to_metadata().items()})
    pq.write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(TraceError, match=r"bad\.parquet.*column 'body' is not a JSON object at row 20"):
        redact_file(tmp_path / "bad.parquet", tmp_path / "out.parquet", KEY, processes=1)
    assert list(tmp_path.iterdir()) == [tmp_path / "bad.parquet"]


def test_null_bodies_stay_null_and_real_text_beside_them_is_redacted(tmp_path):
    # an AIPerf mooncake_trace with token-only rows (null bodies, synthesized at replay) and
    # one row of real text
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
    imported = tmp_path / "raw.parquet"
    import_mooncake(src, imported)
    out = tmp_path / "red.parquet"
    report = redact_file(imported, out, KEY, processes=1)
    assert report.written == 3 and report.quarantined == 0
    before, after = read_trace(imported), read_trace(out)
    assert after.df["body"].is_null().to_list() == [True, False, True]
    assert "jane.roe@example.com" in before.df["body"][1]
    assert "jane.roe@example.com" not in after.df["body"][1]
    assert after.meta.synthesis == before.meta.synthesis
    built = [b for batch in after.body_batches(3, 3, synthesize=True) for b in batch]
    assert built[0] == [b for batch in before.body_batches(3, 3, synthesize=True) for b in batch][0]


def test_identifier_fields_and_metadata_values_are_pseudonymized(tmp_path):
    bodies = [
        {
            "model": "m",
            "user": "alice@corp.example",
            "metadata": {"customer": "Acme Bank", "tier": 2},
            "messages": [{"role": "user", "content": "Hello there."}],
            "temperature": 0.3,
        },
        {
            "model": "m",
            "user": "alice@corp.example",
            "prompt_cache_key": "tenant-42",
            "metadata": {"customer": "Acme Bank"},
            "messages": [{"role": "user", "content": "Hello again."}],
        },
        {
            "model": "m",
            "safety_identifier": "bob-7781",
            "user": "bob@corp.example",
            "messages": [{"role": "user", "content": "Hi."}],
        },
    ]
    records = [
        LogRecord(arrival_us=1_700_000_000_000_000 + i * 1_000_000, api="chat", model="m", body=b, request_id=f"r{i}")
        for i, b in enumerate(bodies)
    ]
    out, report = redact_trace(build_trace(records, source="ids", source_format="openai-jsonl"), KEY, processes=1)
    assert report.quarantined == 0
    text = "\n".join(out.df["body"].to_list())
    for raw in ("alice@corp.example", "bob@corp.example", "Acme Bank", "tenant-42", "bob-7781"):
        assert raw not in text
    a, b, c = (json.loads(x) for x in out.df["body"].to_list())
    assert a["user"] == b["user"] != c["user"] and a["user"].startswith("id-")
    assert a["metadata"]["customer"] == b["metadata"]["customer"] != a["user"]
    assert a["metadata"]["tier"] == 2 and a["temperature"] == 0.3  # not strings: untouched
    assert b["prompt_cache_key"].startswith("id-") and c["safety_identifier"].startswith("id-")
    assert [m["content"] for m in a["messages"]] == ["Hello there."]  # nothing found: same text
    # the same values under another key get other pseudonyms
    other, _ = redact_trace(
        build_trace(records, source="ids", source_format="openai-jsonl"),
        RedactionKey(b"another-key-0123456789abcdef"),
        processes=1,
    )
    assert json.loads(other.df["body"][0])["user"] != a["user"]


def test_the_workers_make_the_surrogates_this_process_would(corpus, monkeypatch):
    from redact.pipeline import Redactor, frame_texts
    from redact.surrogates import Surrogates

    made_here = []
    fresh = Surrogates._rng  # called once for every surrogate made anew (a cached one is not)

    def counted(self, label, value):
        made_here.append((label, value))
        return fresh(self, label, value)

    texts = frame_texts(_trace(corpus).df)
    with Redactor(KEY, "gpt2", processes=1) as r:
        monkeypatch.setattr(Surrogates, "_rng", counted)  # here only: the spawned worker imports its own
        done = r.redact_texts(texts)
        monkeypatch.undo()
        cached = dict(r.surrogates._cache)
    replaced = {(e, t[a:b]) for t, entry in done.items() for e, a, b in entry.spans}
    assert len(replaced) > 100 and replaced <= set(cached)
    # every surrogate written came from the worker: this process made (almost) none itself
    assert len(made_here) <= len(replaced) // 50, made_here[:5]
    # and each is the one this process makes with the same key and tokenizer
    here = Surrogates(KEY, load_tokenizer("gpt2"))
    assert all(here.make(e, v) == cached[(e, v)] for e, v in replaced)
