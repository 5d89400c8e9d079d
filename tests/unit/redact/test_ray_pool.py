"""`replay capture --redact-ray`'s analysis: a Redactor on Presidio actors of a local Ray cluster
(started by the pool itself) redacts as its worker processes do, and fails closed the same way:
a text that makes the analyzer raise, or hang past the timeout, drops its record.

Ray's start (~6 s) and its actors' (each loads spaCy) make these slow."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("faker")

from redact import RedactionKey  # noqa: E402
from redact.pipeline import Redactor  # noqa: E402
from tests.unit.redact.test_pipeline import POISON, SLOW, RaisingRecognizer, _trace  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

KEY = RedactionKey(b"ray-pool-test-key-0123456789abcdef")


def _rows():
    from examples.pii_corpus import make_corpus

    return _trace(make_corpus(8, seed=9), {2: POISON, 5: SLOW}).df


def test_actors_on_a_local_cluster_redact_as_worker_processes_do_and_fail_closed():
    df = _rows()
    block = 16
    with Redactor(KEY, processes=1, timeout_s=5, extra_recognizers=[RaisingRecognizer()]) as local:
        want, want_accounts = local.redact_rows(df, block)
    assert not ray.is_initialized()
    with Redactor(KEY, processes=2, timeout_s=5, extra_recognizers=[RaisingRecognizer()], ray_address="local") as on_ray:
        got, accounts = on_ray.redact_rows(df, block)
        assert ray.is_initialized() and len(ray.nodes()) == 1
    assert not ray.is_initialized()  # the pool started Ray, and stopped it
    assert got.equals(want)  # the same rows, the same surrogates
    reasons = sorted(a.reason for a in accounts if a.reason)
    assert reasons == sorted(a.reason for a in want_accounts if a.reason)
    # the raising text and the hanging one (its actors killed on the timeout) kept their records out
    assert any(r.startswith("RuntimeError") for r in reasons) and any(r.startswith("timeout") for r in reasons)
    stored = "".join(got["body"].drop_nulls().to_list())
    assert POISON not in stored and SLOW not in stored
    assert got["body"].null_count() == len(reasons)  # a quarantined row leaves without its text


def test_an_address_without_a_cluster_is_one_clear_error():
    from replay.errors import ConfigError

    with Redactor(KEY, processes=1, ray_address="127.0.0.1:1") as r:
        with pytest.raises(ConfigError, match=r"^--redact-ray 127.0.0.1:1: no Ray cluster answers there"):
            r._get_pool()
    assert not ray.is_initialized()
