"""A capture folder is a Trace everywhere one is accepted: `replay inspect`, `replay run` (the
embedded engine) and `replay export` give on the folder of a real capture (several segments) what
they give on the same rows written as one Parquet file."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from replay.cli.main import main
from replay.sim import start_sim
from replay.trace import read_trace
from tests.integration.capture_proxy import capture


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """A real capture (redacted) of two conversations, in at least two segments, and the same
    trace as one file."""
    tmp = tmp_path_factory.mktemp("captured")
    out = tmp / "cap"
    with start_sim(time_scale=0.05, served_model_name="sim") as sim, capture(sim.url, out, "--segment-seconds", "0.3") as proxy:

        def send(session: str, text: str, stream: bool) -> None:
            r = httpx.post(
                proxy.url + "/v1/chat/completions",
                headers={"X-Session-Id": session},
                timeout=60,
                json={"model": "sim", "max_tokens": 6, "stream": stream, "messages": [{"role": "user", "content": text}]},
            )
            assert r.status_code == 200

        for i in range(3):
            send("a", f"Tell me about rivers, part {i}.", stream=i % 2 == 0)
        deadline = time.monotonic() + 60
        while not list(out.glob("segment-*.parquet")):  # the first segment rolled
            assert time.monotonic() < deadline, proxy.stderr()
            time.sleep(0.1)
        for i in range(3):
            send("b", f"Tell me about lakes, part {i}.", stream=i % 2 == 1)
        assert proxy.stop() == 0
    assert len(list(out.glob("segment-*.parquet"))) >= 2
    single = tmp / "single.parquet"
    read_trace(out).write(single)
    return out, single


def _cli(capsys, *argv: str) -> str:
    assert main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_inspect_reads_the_folder_as_the_file(captured, capsys):
    folder, single = captured
    of_folder = json.loads(_cli(capsys, "inspect", str(folder), "--json"))
    of_file = json.loads(_cli(capsys, "inspect", str(single), "--json"))
    assert of_folder == of_file
    assert (of_folder["rows"], of_folder["sessions"], of_folder["source_format"]) == (6, 2, "capture")


@pytest.mark.parametrize("fmt", ["mooncake", "openai"])
def test_export_of_the_folder_is_the_export_of_the_file(captured, fmt, tmp_path, capsys):
    folder, single = captured
    _cli(capsys, "export", fmt, str(folder), "-o", str(tmp_path / "folder.jsonl"), "--quiet")
    _cli(capsys, "export", fmt, str(single), "-o", str(tmp_path / "file.jsonl"), "--quiet")
    lines = (tmp_path / "folder.jsonl").read_text().splitlines()
    assert len(lines) == 6
    assert lines == (tmp_path / "file.jsonl").read_text().splitlines()


def test_run_replays_the_folder_as_the_file(captured, tmp_path, capsys):
    folder, single = captured
    results = []
    for trace in (folder, single):
        results.append(
            json.loads(_cli(capsys, "run", str(trace), "--speedup", "4", "--json", "--out", str(tmp_path / trace.name)))
        )
    # the same schedule, the same requests and prompts, all answered (latencies are the run's own)
    same = ("requests", "sent", "completed", "errors", "prompt_tokens", "window_s", "offered_rate")
    folder_stage, file_stage = (r["stages"][0] for r in results)
    assert {k: folder_stage[k] for k in same} == {k: file_stage[k] for k in same}
    assert (folder_stage["requests"], folder_stage["completed"], folder_stage["errors"]) == (6, 6, {})
