"""The `replay` command end to end: generate, inspect, run, sweep, results on disk, errors, Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.results import read_stage
from replay.trace import read_trace
from tests.integration.conftest import trace_of_bodies


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "work.parquet"
    from tests.e2e.conftest import run_cli

    done = run_cli("generate", "-o", str(path), "--requests", "60", "--seed", "3", "--rate", "20")
    assert done.returncode == 0, done.stderr
    return path


def test_help_lists_the_commands(cli):
    done = cli("--help")
    assert done.returncode == 0
    for command in ("generate", "import", "inspect", "run", "sweep"):
        assert command in done.stdout
    done = cli("sweep", "--help")
    assert "--rates" in done.stdout and "--slo" in done.stdout


def test_generate_and_inspect(cli, small_trace):
    trace = read_trace(small_trace)
    assert trace.df.height == 60 and trace.meta.source_format == "generated"
    done = cli("inspect", str(small_trace), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["rows"] == 60 and summary["sessions"] >= 1


def test_run_writes_results_and_json(cli, small_trace, scripted, tmp_path):
    server = scripted()
    out = tmp_path / "res"
    done = cli("run", str(small_trace), "--url", server.url, "--rate", "30", "--requests", "30", "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    stage = summary["stages"][0]
    assert stage["completed"] == 30 and stage["errors"] == {} and stage["requested_rate"] == 30
    assert (out / "summary.json").exists()
    requests, meta_summary = read_stage(out / summary["files"][0])
    assert requests.height == 30 and meta_summary["completed"] == 30
    trace = read_trace(small_trace)
    # max_tokens follow the trace, so the (scripted) server streamed exactly that many chunks
    expected = trace.df.head(30)["max_tokens"].to_list()
    assert requests["output_chunks"].to_list() == expected
    assert requests["request_id"].to_list() == trace.df.head(30)["request_id"].to_list()
    assert not list(out.glob("*.parts")), "the rows written as the stage went are gone once its file is"
    # the scripted server has no /metrics: the stage says so and went on; --metrics-url none reads nothing
    url = server.url + "/metrics"
    assert stage["engine_metrics"] == {"url": url, "unavailable": f"GET {url} answered HTTP 404"}
    done = cli(
        "run",
        str(small_trace),
        "--url",
        server.url,
        "--rate",
        "30",
        "--requests",
        "3",
        "--metrics-url",
        "none",
        "--out",
        str(tmp_path / "none"),
        "--json",
    )
    assert done.returncode == 0 and json.loads(done.stdout)["stages"][0]["engine_metrics"] is None


def test_a_run_killed_mid_stage_keeps_the_requests_that_had_finished(cli, scripted, tmp_path):
    # 40 requests 100 ms apart, each answered at once; the CLI is SIGKILLed about 2.5 s in
    server = scripted()
    trace = trace_of_bodies(
        [{"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(40)],
        arrival_us=[i * 100_000 for i in range(40)],
    )
    path = tmp_path / "t.parquet"
    trace.write(path)
    out = tmp_path / "res"
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "replay.cli.main", "run", str(path), "--url", server.url, "--out", str(out), "--json"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while len(server.arrivals) < 25 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        killed_ns = time.time_ns()
        proc.kill()
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert len(server.arrivals) >= 25, err.read_text()
    stage = out / "stage00_asrecorded.parquet"
    assert not stage.exists()
    requests, summary = read_stage(stage)
    assert summary == {"partial": True}
    ids = requests["request_id"].to_list()
    assert ids == [f"r{i}" for i in range(len(ids))], "whole rows, in request order, none twice"
    assert set(requests["error"].to_list()) == {"none"}
    # every request answered 1 s before the kill is on disk (the parts lag by ~0.5 s at most)
    answered_early = {a.body["messages"][0]["content"] for a in server.arrivals if a.t_unix_ns < killed_ns - 1e9}
    assert len(answered_early) >= 10
    assert {f"q{i}" for i in range(len(ids))} >= answered_early


def test_sweep_table_names_saturation(cli, scripted, tmp_path):
    server = scripted(concurrency=1, chunk_delay_s=0.02)
    path = tmp_path / "t.parquet"
    trace_of_bodies([{"max_tokens": 4} for _ in range(20)]).write(path)
    done = cli(
        "sweep",
        str(path),
        "--url",
        server.url,
        "--rates",
        "2,60",
        "--arrivals",
        "constant",
        "--lag-bound-ms",
        "50",
        "--out",
        str(tmp_path / "sw"),
    )
    assert done.returncode == 0, done.stderr
    assert "saturation: 60 req/s" in done.stdout
    summary = json.loads((tmp_path / "sw" / "summary.json").read_text())
    assert summary["saturation"]["rate"] == 60 and len(summary["files"]) == 2


def _write_table(path, table: pa.Table) -> None:
    pq.write_table(table, path)


@pytest.mark.parametrize(
    "case, expected",
    [
        ("not_parquet", "not a Parquet file"),
        ("missing_column", "column 'arrival_us' missing"),
        ("wrong_type", "column 'arrival_us' has type"),
        ("unsorted", "not sorted"),
        ("negative", "negative"),
        ("empty", "empty"),
        ("version", "schema version '7' unknown"),
        ("absent", "no such file"),
    ],
)
def test_bad_traces_get_one_line_and_exit_2(cli, tmp_path, case, expected):
    good = trace_of_bodies([{"max_tokens": 2} for _ in range(3)])
    path = tmp_path / f"{case}.parquet"
    table = good.df.to_arrow().replace_schema_metadata(good.meta.to_metadata())
    if case == "not_parquet":
        path.write_text("TIMESTAMP,ContextTokens\n")
    elif case == "missing_column":
        _write_table(path, table.drop_columns(["arrival_us"]))
    elif case == "wrong_type":
        i = table.schema.get_field_index("arrival_us")
        _write_table(path, table.set_column(i, "arrival_us", pa.array(["a", "b", "c"])))
    elif case in ("unsorted", "negative"):
        values = [5, 1, 9] if case == "unsorted" else [-1, 0, 1]
        i = table.schema.get_field_index("arrival_us")
        _write_table(path, table.set_column(i, "arrival_us", pa.array(values, pa.int64())))
    elif case == "empty":
        _write_table(path, table.slice(0, 0))
    elif case == "version":
        meta = {**good.meta.to_metadata(), "faithful_replay.schema_version": "7"}
        _write_table(path, table.replace_schema_metadata(meta))
    done = cli("run", str(path), "--url", "http://127.0.0.1:9")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path.name) in lines[0], done.stderr
    assert expected in lines[0]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--rates", "1,x"], "--rates"),
        (["--rates", "0,2"], "--rates"),
        (["--rates", "1", "--slo", "ttft=fast"], "--slo"),
        (["--rates", "1", "--slo", "latency=2s"], "--slo"),
        (["--rates", "1", "--duration=-5s"], "--duration"),
        (["--rates", "1", "--requests", "0"], "--requests"),
        (["--rate", "2"], "--rate"),
        (["--rates", "1", "--cv", "0", "--arrivals", "gamma"], "--cv"),
    ],
)
def test_bad_flags_name_the_flag(cli, small_trace, flags, flag):
    done = cli("sweep", str(small_trace), "--url", "http://127.0.0.1:9", *flags)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and flag in done.stderr and "Traceback" not in done.stderr


def test_bad_url_is_named(cli, small_trace):
    done = cli("run", str(small_trace), "--url", "localhost:8000")
    assert done.returncode == 2 and "--url" in done.stderr and "localhost:8000" in done.stderr


def test_ctrl_c_cancels_and_keeps_partial_results(scripted, small_trace, tmp_path):
    server = scripted(headers_delay_s=30.0)  # nothing ever completes on its own
    out = tmp_path / "partial"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "replay.cli.main",
            "run",
            str(small_trace),
            "--url",
            server.url,
            "--rate",
            "10",
            "--arrivals",
            "constant",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while len(server.arrivals) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "partial results kept" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stages"][0]["cancelled"] is True and summary["stages"][0]["valid"] is False
    requests, _ = read_stage(out / summary["files"][0])
    assert requests.height == 60
    sent = requests.filter(pl.col("sent_ns").is_not_null())
    assert 5 <= sent.height < 60
    assert set(requests["error"].unique().to_list()) == {"cancelled"}


def test_without_url_the_embedded_engine_serves(cli, small_trace, tmp_path):
    out = tmp_path / "sim"
    done = cli(
        "run",
        str(small_trace),
        "--requests",
        "8",
        "--rate",
        "20",
        "--out",
        str(out),
        "--json",
        "--sim-profile",
        "instant",
        "--sim-config",
        '{"max_num_seqs": 4}',
    )
    assert done.returncode == 0, done.stderr
    stage = json.loads(done.stdout)["stages"][0]
    assert stage["completed"] == 8 and stage["errors"] == {}
    requests, _ = read_stage(out / json.loads(done.stdout)["files"][0])
    # the engine streamed exactly the trace's output lengths (max_tokens + ignore_eos)
    assert requests["completion_tokens"].to_list() == requests["expected_output_tokens"].to_list()
    assert (requests["prompt_tokens"] > requests["input_tokens"]).all()  # the chat template adds tokens
    # its /metrics (vLLM's names) was read before and after the stage at least
    m = stage["engine_metrics"]
    assert m["engine"] == "vllm" and m["url"].endswith("/metrics") and "preemptions" in m, m


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--sim-config", "{nope"], "--sim-config: not JSON"),
        (["--sim-config", '{"max_num_seqz": 4}'], "unknown knob 'max_num_seqz'"),
        (["--sim-config", '{"max_num_seqs": 0}'], "--max-num-seqs"),
        (["--url", "http://127.0.0.1:9", "--sim-config", "{}"], "only applies without --url"),
    ],
)
def test_bad_embedded_engine_config(cli, small_trace, flags, expected):
    done = cli("run", str(small_trace), "--requests", "2", *flags)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and expected in done.stderr, done.stderr


def _result_keys() -> set[str]:
    from replay.config import RunConfig
    from replay.sweep import Saturation, SweepResult

    empty = SweepResult(
        config=RunConfig(url="http://h:1"), rates=[], stages=[], summaries=[], saturation=Saturation("not_reached")
    )
    return set(empty.to_json(trace="", files=[]))


def test_run_and_sweep_print_and_write_the_one_result_json(cli, small_trace, scripted, tmp_path):
    server = scripted()
    for command, flags in (("run", ["--rate", "30"]), ("sweep", ["--rates", "20,30"])):
        out = tmp_path / command
        done = cli(
            command,
            str(small_trace),
            "--url",
            server.url,
            *flags,
            "--requests",
            "10",
            "--lag-bound-ms",
            "50",
            "--out",
            str(out),
            "--json",
        )
        assert done.returncode == 0, done.stderr
        printed = json.loads(done.stdout)
        assert printed == json.loads((out / "summary.json").read_text())
        assert set(printed) == _result_keys()
        assert printed["trace"] == str(small_trace) and len(printed["files"]) == len(printed["stages"])
        assert printed["saturation"]["status"] == "not_reached"
        for stage in printed["stages"]:
            assert stage["offered_rate"] == pytest.approx(stage["requested_rate"])


def test_the_table_shows_requested_offered_and_achieved_rates(cli, tmp_path, scripted):
    server = scripted()
    path = tmp_path / "t.parquet"
    # a burst of 30 requests 10 ms apart, then one request a second: 2 req/s over 5 s comes from the burst
    arrivals = [i * 10_000 for i in range(30)] + [300_000 + i * 1_000_000 for i in range(1, 31)]
    trace_of_bodies([{"max_tokens": 2} for _ in arrivals], arrival_us=arrivals).write(path)
    done = cli(
        "run",
        str(path),
        "--url",
        server.url,
        "--rate",
        "2",
        "--duration",
        "5s",
        "--lag-bound-ms",
        "50",
        "--out",
        str(tmp_path / "r"),
    )
    assert done.returncode == 0, done.stderr
    assert "requested" in done.stdout and "offered" in done.stdout and "achieved" in done.stdout
    row = next(line for line in done.stdout.splitlines() if line.strip("│ ").startswith("2 "))
    assert [c.strip() for c in row.split("│")[1:3]] == ["2", "2"]  # requested, offered
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["stages"][0]["requests"] == 10 and summary["stages"][0]["window_s"] == 5.0


def test_an_undetermined_saturation_is_printed(cli, scripted, tmp_path):
    server = scripted(concurrency=1, chunk_delay_s=0.02)
    path = tmp_path / "t.parquet"
    trace_of_bodies([{"max_tokens": 4} for _ in range(20)]).write(path)
    done = cli(
        "sweep",
        str(path),
        "--url",
        server.url,
        "--rates",
        "5,60",
        "--arrivals",
        "constant",
        "--lag-bound-ms",
        "0.000001",
        "--out",
        str(tmp_path / "sw"),
    )
    assert done.returncode == 0, done.stderr
    assert "saturation: undetermined at 60 req/s" in done.stdout and "send lag p99" in done.stdout
    summary = json.loads((tmp_path / "sw" / "summary.json").read_text())
    assert summary["saturation"]["rate"] is None and summary["saturation"]["undetermined_at"] == 60


@pytest.mark.parametrize(
    "target, expected",
    [
        ("refused", "connection refused"),
        ("wrong_key", "answered HTTP 401 (Unauthorized): check --api-key"),
    ],
)
def test_a_wrong_target_is_one_line_and_exit_2_before_any_stage(cli, small_trace, scripted, tmp_path, target, expected):
    if target == "refused":
        from tests.integration.test_target_check import closed_port

        url, key = f"http://127.0.0.1:{closed_port()}", []
    else:
        server = scripted(api_key="sekrit")
        url, key = server.url, ["--api-key", "wrong"]
    for command, rate in (("run", ["--rate", "10"]), ("sweep", ["--rates", "10,20"])):
        out = tmp_path / f"{target}-{command}"
        done = cli(command, str(small_trace), "--url", url, *rate, *key, "--requests", "5", "--out", str(out))
        assert done.returncode == 2, (done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert lines == [f"error: {url}: {lines[0].split(': ', 2)[2]}"] and expected in lines[0], done.stderr
        assert not out.exists()  # no stage ran


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["run", "--rate", "-1"], "--rate: must be a finite number > 0"),
        (["run", "--rate", "1", "--duration", "1ms"], "--duration: 0.001s at 1 req/s keeps no request"),
        (["run", "--rate", "1", "--requests", "999"], "--requests: 999 asked, the trace has 60 rows"),
        (["sweep", "--rates", "1,100", "--duration", "10s"], "--duration: 10s at 100 req/s needs more than 1000"),
        (["sweep", "--rates", "auto:1"], "--rates auto:N: N must be a whole number >= 2"),
        (["sweep", "--rates", "auto:x"], "--rates: 'auto:x' is not auto or auto:N"),
        (["sweep", "--rates", "auto", "--probe-duration", "0s"], "--probe-duration: must be > 0"),
        (["run", "--concurrency", "2", "--duration", "5s"], "--concurrency: a closed-loop stage ends when its requests"),
        (["run", "--concurrency", "0"], "--concurrency: must be a whole number >= 1"),
        (["sweep", "--concurrency", "1,x"], "--concurrency: '1,x' must list whole numbers of users"),
        (["sweep", "--concurrency", "2", "--rates", "1"], "not allowed with argument"),
    ],
)
def test_bad_flags_fail_before_the_embedded_engine_starts(cli, small_trace, flags, expected):
    command, *rest = flags
    done = cli(command, str(small_trace), *rest)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and expected in done.stderr, done.stderr
    assert "embedded engine" not in done.stderr  # it never started


def test_sweep_auto_rates_probe_then_run_stages_around_the_saturation(cli, scripted, tmp_path):
    # one response at a time, each ~80 ms (4 chunks 20 ms apart): capacity about 12 req/s
    server = scripted(concurrency=1, chunk_delay_s=0.02)
    path = tmp_path / "t.parquet"
    trace_of_bodies([{"max_tokens": 4} for _ in range(300)]).write(path)
    out = tmp_path / "auto"
    done = cli(
        "sweep",
        str(path),
        "--url",
        server.url,
        "--rates",
        "auto:3",
        "--probe-duration",
        "1s",
        "--requests",
        "20",
        "--lag-bound-ms",
        "50",
        "--out",
        str(out),
        "--json",
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stderr.splitlines() if line.startswith("auto rates: "))
    summary = json.loads(done.stdout)
    search = summary["rate_search"]
    assert search["saturation"]["status"] == "saturated"
    assert len(summary["rates"]) == 3 and summary["rates"] == search["rates"]
    assert summary["rates"][0] < search["kept_up_rate"] < search["saturation"]["rate"] < summary["rates"][-1]
    # bisected until the saturated rate is within 10% of the kept-up one, or the probes ran out
    assert search["saturation"]["rate"] <= 1.1 * search["kept_up_rate"] or len(search["probes"]) == 10
    assert f"saturates at {search['saturation']['rate']:.3g} req/s" in line
    assert "stages at " + ", ".join(f"{r:g}" for r in summary["rates"]) in line
    assert [s["requested_rate"] for s in summary["stages"]] == summary["rates"]


def test_drain_cuts_off_and_the_table_says_why(cli, small_trace, scripted, tmp_path):
    # the server never answers in time: the stage ends 0.3 s after its last send, not at --timeout
    server = scripted(headers_delay_s=20.0)
    done = cli(
        "run",
        str(small_trace),
        "--url",
        server.url,
        "--rate",
        "50",
        "--requests",
        "5",
        "--drain",
        "0.3s",
        "--warm-connections",
        "0",
        "--out",
        str(tmp_path / "res"),
    )
    assert done.returncode == 0, done.stderr
    # answered only after 20 s, so a request that ended was cut off by the drain, not answered
    assert "cut off at 50 req/s: 5 requests still open when the drain ended" in done.stdout
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    stage = summary["stages"][0]
    assert stage["cut_off"] == 5 and stage["errors"] == {"cut_off": 5} and stage["completed"] == 0
    assert stage["runner"]["warm_connections"] == 0


def test_causal_sessions_and_chunk_times_flags(cli, small_trace, scripted, tmp_path):
    server = scripted()
    out = tmp_path / "res"
    done = cli(
        "run",
        str(small_trace),
        "--url",
        server.url,
        "--rate",
        "40",
        "--requests",
        "40",
        "--sessions",
        "causal",
        "--chunk-times",
        "none",
        "--out",
        str(out),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    stage = json.loads(done.stdout)["stages"][0]
    assert stage["sessions"] == "causal" and stage["completed"] == 40
    slip = stage["slip_ms"]
    assert slip["p50"] is not None and slip["max"] >= 0
    requests, _ = read_stage(out / "stage00_40rps.parquet")
    # turns held back by their previous turn were sent at their release, after it ended
    late = requests.filter(pl.col("release_ns") > pl.col("intended_ns"))
    assert (late["sent_ns"] >= late["release_ns"]).all()
    assert requests["chunk_us"].list.len().sum() == 0 and requests["output_chunks"].sum() > 0
    done = cli("run", str(small_trace), "--url", server.url, "--sessions", "closed")
    assert done.returncode == 2 and "--sessions" in done.stderr


def test_an_invalid_stage_says_why():
    from replay.config import RunConfig
    from replay.metrics import _invalid_reason
    from replay.runner import StageResult

    runner = {
        "dispatcher_switches": {"voluntary": 10, "involuntary": 7},
        "dispatcher_priority": "nice",
        "worker_switches": {"voluntary": 5, "involuntary": 3},
    }
    result = StageResult(
        config=RunConfig(url="http://127.0.0.1:9", lag_bound_ms=1.0),
        requests=pl.DataFrame(),
        start_unix_ns=0,
        offered_rate=1.0,
        cancelled=False,
        interrupted=False,
        runner=runner,
    )
    why = _invalid_reason(result, 2.5)
    assert why == (
        "send lag p99 2.50 ms over the 1 ms bound; the runner lost the CPU 7 times on its dispatcher "
        "(nice priority) and 3 on its I/O threads"
    )


def test_a_token_only_import_is_replayed_with_synthesized_prompts(cli, scripted, tmp_path, gpt2):
    # the stored trace has no text; the run builds each prompt, and the server receives exactly
    # the recorded token counts, sharing blocks where the hash ids do
    rows = [
        {"timestamp": 10 * i, "input_length": 600 + 50 * i, "output_length": 3, "hash_ids": [5, 60 + i] if i % 2 else [5, 6]}
        for i in range(8)
    ]
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trace_path = tmp_path / "m.parquet"
    done = cli("import", "mooncake", str(src), "-o", str(trace_path), "--quiet")
    assert done.returncode == 0, done.stderr
    assert read_trace(trace_path).df["body"].is_null().all()
    server = scripted()
    done = cli("run", str(trace_path), "--url", server.url, "--rate", "40", "--out", str(tmp_path / "res"))
    assert done.returncode == 0, done.stderr
    prompts = [a.body["prompt"] for a in sorted(server.arrivals, key=lambda a: a.t_unix_ns)]
    assert [len(gpt2.encode(p, add_special_tokens=False).ids) for p in prompts] == [r["input_length"] for r in rows]
    assert all(a.body["max_tokens"] == 3 and a.body["stream"] for a in server.arrivals)
    head = prompts[0][:2000]
    assert all(p.startswith(head) for p in prompts)  # hash id 5 first everywhere
    assert prompts[2].startswith(prompts[0])  # ids [5, 6] again, 100 tokens longer
    assert not prompts[3].startswith(prompts[1][: len(prompts[1]) - 1])  # [5, 61] vs [5, 63]


def test_headers_and_the_key_from_the_environment_go_with_every_request_never_stored(cli, small_trace, scripted, tmp_path):
    import os

    key, tenant = "sk-env-key-not-stored-4711", "tenant-not-stored-0815"
    server = scripted(api_key=key)  # answers 401 without it
    env = {**os.environ, "OPENAI_API_KEY": key}
    out = tmp_path / "h"
    done = cli(
        "run",
        str(small_trace),
        "--url",
        server.url,
        "--rate",
        "20",
        "--requests",
        "6",
        "--header",
        f"X-Tenant: {tenant}",
        "--header",
        "X-Route:blue",
        "--lag-bound-ms",
        "50",
        "--out",
        str(out),
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert len(server.arrivals) == 6
    for sent in [a.headers for a in server.arrivals] + server.models_requests:
        sent = {k.lower(): v for k, v in sent.items()}  # names are case-insensitive
        assert sent.get("authorization") == f"Bearer {key}" and sent.get("x-tenant") == tenant
        assert sent.get("x-route") == "blue"
    stored = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert stored and key.encode() not in stored and tenant.encode() not in stored
    # an explicit Authorization header wins over the key; a malformed header is one line, exit 2
    done = cli(
        "run",
        str(small_trace),
        "--url",
        server.url,
        "--rate",
        "20",
        "--requests",
        "2",
        "--header",
        "Authorization: Bearer wrong",
        "--out",
        str(tmp_path / "w"),
        env=env,
    )
    assert done.returncode == 2 and "HTTP 401" in done.stderr
    done = cli("run", str(small_trace), "--url", server.url, "--header", "X-Tenant", "--out", str(tmp_path / "b"), env=env)
    assert done.returncode == 2 and done.stderr.strip() == "error: --header: 'X-Tenant' is not 'Name: value'"


def test_a_closed_loop_sweep_names_its_stages_by_users(cli, small_trace, tmp_path):
    out = tmp_path / "users"
    done = cli(
        "sweep",
        str(small_trace),
        "--concurrency",
        "1,4",
        "--requests",
        "20",
        "--sim-profile",
        "instant",
        "--sim-config",
        '{"max_num_seqs": 4}',
        "--lag-bound-ms",
        "50",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.strip("│ ").startswith(("1 user ", "4 users "))]
    assert len(rows) == 2, done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["concurrency"] == [1, 4] and summary["rates"] == [None, None]
    assert [s["concurrency"] for s in summary["stages"]] == [1, 4]
    assert all(s["offered_rate"] is None and s["completed"] == 20 for s in summary["stages"])
    assert summary["files"] == ["stage00_c1.parquet", "stage01_c4.parquet"]
    assert "4 users" in (out / "sweep.html").read_text()


def test_repeats_run_on_a_fresh_engine_each_and_report_median_spread_and_interval(cli, small_trace, tmp_path):
    from replay.sim import SimConfig, start_sim

    def hits(*flags):
        out = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        done = cli(
            "run",
            str(small_trace),
            "--requests",
            "40",
            "--rate",
            "20",
            "--repeats",
            "2",
            "--lag-bound-ms",
            "50",
            "--out",
            str(out),
            "--json",
            *flags,
        )
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["repeats"] == 2 and [s["repeat"] for s in summary["stages"]] == [0, 1]
        assert summary["files"] == ["stage00_20rps.parquet", "stage01_20rps.parquet"]
        return [s["cache_hit_rate"] for s in summary["stages"]]

    # the embedded engine starts afresh for each repeat: the second starts as cold as the first,
    # even with the prefix cache kept
    first, second = hits("--sim-profile", "instant", "--keep-prefix-cache")
    assert first > 0.2 and second == pytest.approx(first, abs=0.01)
    # one engine kept between the repeats (--url) hits what the first repeat cached, unless the
    # cache is reset before each repeat (the default)
    with start_sim(SimConfig(profile="instant")) as server:
        warm = hits("--url", server.url, "--keep-prefix-cache")
        reset = hits("--url", server.url)
    assert warm[1] > warm[0] + 0.2 and reset[1] == pytest.approx(reset[0], abs=0.01)

    out = tmp_path / "sweep"
    done = cli(
        "sweep",
        str(small_trace),
        "--rates",
        "10,30",
        "--requests",
        "30",
        "--repeats",
        "2",
        "--sim-profile",
        "instant",
        "--lag-bound-ms",
        "50",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert [(s["requested_rate"], s["repeat"]) for s in summary["stages"]] == [(10, 0), (30, 0), (10, 1), (30, 1)]
    assert [(r["load"], r["runs"]) for r in summary["by_load"]] == [(10, 2), (30, 2)]
    achieved = summary["by_load"][1]["metrics"]["achieved"]
    assert achieved["median"] == pytest.approx(30, rel=0.1) and len(achieved["values"]) == 2
    assert "over 2 repeats" in done.stdout and "30 +- " in done.stdout
    assert summary["interval"]["held"] == 30 and "held up to 30 req/s in every repeat" in done.stdout
    assert "saturation interval: held up to 30 req/s in every repeat" in (out / "sweep.html").read_text()
