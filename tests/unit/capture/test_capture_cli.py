"""`replay capture`'s refusals: one line naming the flag, exit 2, before anything starts."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from replay.cli.main import main


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "no redaction key: set REPLAY_REDACT_KEY"),
        (["--sample", "0"], "--sample: must be in (0, 1], got 0.0"),
        (["--no-redact", "--key-file", "k"], "--key-file: not with --no-redact"),
        (["--no-redact", "--timeout", "0"], "--timeout: must be > 0, got 0.0"),
        (["--no-redact", "--listen", "8080"], "argument --listen: '8080' is not HOST:PORT"),
    ],
)
def test_bad_flags_and_no_key_stop_with_one_line(argv, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("REPLAY_REDACT_KEY", raising=False)
    with pytest.raises(SystemExit) if "--listen" in argv else nullcontext():
        rc = main(["capture", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "c"), *argv])
        assert rc == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
    assert not (tmp_path / "c").exists()
