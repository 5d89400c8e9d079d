"""`replay compare` end to end: two runs on the embedded engine, one with a tenth of the batch."""

from __future__ import annotations

import json


def test_a_smaller_batch_is_caught_as_worse_and_the_gate_exits_1(cli, tmp_path):
    small_trace = tmp_path / "work.parquet"
    done = cli("generate", "-o", str(small_trace), "--requests", "30", "--seed", "3")
    assert done.returncode == 0, done.stderr
    runs = {}
    for name, seqs in (("wide", 16), ("narrow", 2)):
        runs[name] = tmp_path / name
        done = cli(
            "run",
            str(small_trace),
            "--rate",
            "10",
            "--requests",
            "30",
            "--lag-bound-ms",
            "20",
            "--sim-config",
            json.dumps({"max_num_seqs": seqs, "time_scale": 0.2}),
            "--out",
            str(runs[name]),
        )
        assert done.returncode == 0, done.stderr
    out = tmp_path / "cmp"
    gate = cli(
        "compare", str(runs["wide"]), str(runs["narrow"]), "--metrics", "goodput,ttft_p50,e2e_p50", "--out", str(out), "--json"
    )
    assert gate.returncode == 1, gate.stderr
    report = json.loads(gate.stdout)
    assert report["state"] == "worse"
    changes = {c["metric"]: c for c in report["pairs"][0]["changes"]}
    assert changes["ttft_p50"]["verdict"] == "worse" and changes["ttft_p50"]["b"] > 3 * changes["ttft_p50"]["a"]
    assert json.loads((out / "compare.json").read_text())["state"] == "worse"
    assert "<title>Compare: worse</title>" in (out / "compare.html").read_text()
    # the other way round nothing got worse: the wide batch is better
    back = cli("compare", str(runs["narrow"]), str(runs["wide"]), "--metrics", "ttft_p50")
    assert back.returncode == 0, back.stdout + back.stderr
    assert "compare: not worse" in back.stdout


def test_a_folder_that_is_not_a_result_is_one_line_and_exit_2(cli, tmp_path):
    done = cli("compare", str(tmp_path), str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {tmp_path}: no summary.json (not a results folder of replay run / replay sweep)"


def test_two_traces_are_swept_alike_then_compared_by_their_repeats(cli, tmp_path):
    import shlex

    from tests.integration.conftest import trace_of_bodies

    traces = {}
    for name, answer in (("short", 8), ("long", 64)):  # the same questions, answers 8x longer in B
        traces[name] = tmp_path / f"{name}.parquet"
        trace_of_bodies(
            [
                {"model": "m", "messages": [{"role": "user", "content": f"question {i} about the weather"}], "max_tokens": answer}
                for i in range(30)
            ],
            arrival_us=[i * 50_000 for i in range(30)],
        ).write(traces[name])
    flags = shlex.join(
        [
            "--rates",
            "10",
            "--requests",
            "20",
            "--repeats",
            "2",
            "--lag-bound-ms",
            "20",
            "--sim-config",
            json.dumps({"time_scale": 0.2}),
        ]
    )
    out = tmp_path / "cmp"
    done = cli(
        "compare",
        str(traces["short"]),
        str(traces["long"]),
        "--sweep",
        flags,
        "--metrics",
        "e2e_p50",
        "--out",
        str(out),
        "--json",
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)  # the sweeps' tables went to stderr
    pair = report["pairs"][0]
    assert pair["method"] == "repeats (2 A x 2 B)"
    assert pair["changes"][0]["verdict"] == "worse" and pair["changes"][0]["b"] > 3 * pair["changes"][0]["a"]
    for side, trace in (("a", traces["short"]), ("b", traces["long"])):
        summary = json.loads((out / side / "summary.json").read_text())
        assert summary["trace"] == str(trace) and summary["repeats"] == 2 and len(summary["stages"]) == 2


def test_two_traces_without_sweep_flags_are_one_line_and_exit_2(cli, tmp_path):
    from tests.integration.conftest import trace_of_bodies

    trace = tmp_path / "t.parquet"
    trace_of_bodies([{"max_tokens": 4}] * 3).write(trace)
    done = cli("compare", str(trace), str(trace))
    assert done.returncode == 2 and "give the sweep's flags: --sweep" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
