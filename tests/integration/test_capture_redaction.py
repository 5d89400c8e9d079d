"""Redaction under `replay capture` fails closed: the official OpenAI SDK sends every class of PII
the redactor knows through the recording proxy to an upstream that repeats what it is told, and
not one raw value is stored anywhere in the capture folder (segments, spool, capture.json,
metadata); a value found once is replaced where a later request mentions it bare; a record
still holding a PII shape after redaction is kept out by the second lock and counted; `replay
audit` finds the capture clean."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import openai
import pytest

from replay.trace import read_trace
from tests.integration.capture_proxy import KEY, ROOT, capture, stored_bytes
from tests.scripted_server import ScriptedServer

PASSWORD = "Vq3nLw8pTide"
PLANTED = {
    "EMAIL_ADDRESS": ["priya.raman@billing.internal", "ops@home.arpa"],
    "PHONE_NUMBER": ["(393) 555-0142", "+31 6 12345678", "+91 98765 43210"],
    "CREDIT_CARD": ["4111 1111 1111 1111", "5500-0000-0000-0004"],
    "IBAN_CODE": ["DE89-3704-0044-0532-0130-00", "GB82 WEST 1234 5698 7654 32"],
    "IP_ADDRESS": ["2001:db8::8a2e:370:7334", "203.0.113.77"],
    "US_SSN": ["536-22-1234"],
    "API_KEY": ["sk-proj-Zx81KqWm29LpVnR4tY7uJ3hG5fDq0"],
    "JWT": ["eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r"],
    "URL_PASSWORD": [PASSWORD],
    "PASSWORD": ["Tr0ub4dor&3x", "s3cr3t-Hamster-77"],
    "STREET_ADDRESS": ["221B Baker Street, London NW1 6XE", "Hauptstraße 12, 10115 Berlin"],
    "PERSON": ["Oluwaseun Adeyemi", "Kwame"],
}
PEM = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n-----END PRIVATE KEY-----"
)

FIRST = (
    "Hi Kwame,\n"
    "Oluwaseun Adeyemi asked me to sort out the billing account. Reach her at "
    "priya.raman@billing.internal or ops@home.arpa, or call (393) 555-0142, +31 6 12345678 or "
    "+91 98765 43210. Cards on file: 4111 1111 1111 1111 and 5500-0000-0000-0004; refunds go to "
    "DE89-3704-0044-0532-0130-00 or GB82 WEST 1234 5698 7654 32. SSN 536-22-1234. She lives at "
    "221B Baker Street, London NW1 6XE and works at Hauptstraße 12, 10115 Berlin.\n"
    f"The app connects with postgres://billing:{PASSWORD}@2001:db8::8a2e:370:7334/app from "
    "203.0.113.77, my password is Tr0ub4dor&3x and the deploy has\n"
    "export DB_PASSWORD=s3cr3t-Hamster-77\n"
    "OPENAI_API_KEY=sk-proj-Zx81KqWm29LpVnR4tY7uJ3hG5fDq0\n"
    "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dBjftJeZ4CVPmB92K27uhbUJU1p1r\n" + PEM + "\nThanks,\nPriya"
)
# a later request that mentions the URL's password bare, with no word that says what it is
LATER = f"I typed {PASSWORD} by hand and it still fails. Is {PASSWORD} wrong?"


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def echo():
    server = ScriptedServer(echo=True).start()
    yield server
    server.stop()


@pytest.mark.parametrize(
    "analysis",
    [
        pytest.param((), id="worker processes"),
        # the same rules with the analysis on Presidio actors of a Ray cluster the capture starts
        pytest.param(("--redact-ray", "--redact-processes", "2"), id="ray", marks=pytest.mark.slow),
    ],
)
def test_no_planted_value_is_stored_and_a_leftover_shape_is_kept_out(echo, tmp_path, analysis):
    if analysis:
        pytest.importorskip("ray")
    out = tmp_path / "cap"
    with capture(echo.url, out, "--segment-seconds", "1", *analysis) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client-key-not-stored-0000", max_retries=0, timeout=60)
        first = [{"role": "system", "content": "You repeat what you are told."}, {"role": "user", "content": FIRST}]
        a = client.chat.completions.create(
            model="scripted",
            messages=first,
            max_tokens=8,
            user="priya.raman@billing.internal",
            metadata={"customer": "Oluwaseun Adeyemi"},
            store=True,
        )
        assert "priya.raman@billing.internal" in a.choices[0].message.content  # the client sees it all
        later = [*first, {"role": "assistant", "content": a.choices[0].message.content}, {"role": "user", "content": LATER}]
        chunks = list(client.chat.completions.create(model="scripted", messages=later, max_tokens=8, stream=True))
        assert PASSWORD in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        tool = [
            {"role": "user", "content": "Log me in"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {
                            "name": "login",
                            "arguments": json.dumps({"email": "priya.raman@billing.internal", "secret": PASSWORD}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "user", "content": f"Done? I used {PASSWORD}."},
        ]
        client.chat.completions.create(model="scripted", messages=tool, max_tokens=4)
        # a session id that is an email address is stored as it is: the second lock keeps the
        # record out and counts it
        client.chat.completions.create(
            model="scripted",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=2,
            extra_headers={"X-Session-Id": "kwame@corp.lan"},
        )
        deadline = time.monotonic() + 120
        while 'replay_capture_records_dropped_total{reason="lock"} 1.0' not in _metrics(proxy.url):
            assert time.monotonic() < deadline, _metrics(proxy.url)
            time.sleep(0.2)
        while "replay_capture_records_written_total 3.0" not in _metrics(proxy.url):
            assert time.monotonic() < deadline, _metrics(proxy.url)
            time.sleep(0.2)
        metrics = _metrics(proxy.url)
        assert 'replay_capture_lock_records_total{type="EMAIL_ADDRESS"} 1.0' in metrics
        assert proxy.stop() == 0
        said = proxy.stderr().strip().splitlines()[-1]
        assert ("2 actors on Ray at local" if analysis else "worker processes") in said, said

    trace = read_trace(out)
    assert len(trace) == 3
    report = json.loads(trace.meta.capture_report)
    assert report["dropped_lock"] == 1 and report["lock_EMAIL_ADDRESS"] == 1
    redaction = json.loads(trace.meta.redaction_report)
    assert redaction["mentions"] >= 1 and redaction["lock"] == {"EMAIL_ADDRESS": 1}
    stored = stored_bytes(out)
    values = [v for vs in PLANTED.values() for v in vs] + PEM.splitlines()[1:3] + ["kwame@corp.lan"]
    leaked = [v for v in values if v.encode() in stored or json.dumps(v)[1:-1].encode() in stored]
    assert leaked == []
    # the surrogates are known to the trace, so the audit finds nothing raw
    audit = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "audit", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert KEY.encode() not in stored
