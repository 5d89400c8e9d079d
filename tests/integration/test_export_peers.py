"""Our exports read back by the peers' own code, each in its own venv (a subprocess): AIPerf
0.13.0's ``dag_jsonl`` loader, inference-perf 0.7.0's OTel replay graph builder, vLLM's
``timed_trace`` reader (its CPU build). ``replay engines install-peers`` / ``install-vllm`` put
them in the cache; a missing one skips here and fails under CI (``real_engines.require``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import polars as pl
import pytest

from capture.exporters import export_trace
from replay.targets.peer_install import INFERENCE_PERF_GRAPH, peer_python
from replay.targets.vllm_install import vllm_python
from tests.integration.real_engines import require
from tests.unit.capture.test_export_peers import EDGES, IDS, WAIT_MS, agent_trace

AIPERF_READ = """
import json, sys
from aiperf.dataset.loader.dag_jsonl import DagJsonlLoader
out = {}
for path in sys.argv[1:]:
    loader = DagJsonlLoader(path)
    convs = {c.session_id: c for c in loader.load()}
    out[path] = {"roots": sorted(loader.root_session_ids()), "sessions": {
        sid: {"mode": str(c.context_mode.value), "delays": [t.delay for t in c.turns],
              "messages": [t.raw_messages for t in c.turns], "max_tokens": [t.max_tokens for t in c.turns],
              "branches": {b.branch_id: [b.child_conversation_ids, str(b.mode.value)] for b in c.branches},
              "joins": [[p.branch_id for p in t.prerequisites] for t in c.turns]}
        for sid, c in convs.items()}}
print(json.dumps(out))
"""

INFERENCE_PERF_READ = (
    INFERENCE_PERF_GRAPH
    + """
import json
out = {}
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    calls, _ = graph.build_raw_calls(json.loads(path.read_text())["spans"])
    g = graph.build_graph(calls, source_file=str(path))
    span = {e.event_id: e.call.call_id for e in g.events.values()}
    out[path.name] = {span[e.event_id]: [sorted(span[p] for p in e.predecessor_event_ids), e.wait_ms,
                                         e.call.total_input_tokens, e.call.expected_output_tokens]
                      for e in g.events.values()}
print(json.dumps(out))
"""
)

VLLM_READ = """
import json, sys
from vllm.benchmarks.datasets.datasets import TimedTrace
class Vocab:  # TimedTrace samples prompt tokens from the tokenizer's vocabulary
    all_special_ids = [0]
    def get_vocab(self):
        return {f"t{i}": i for i in range(1000)}
labels = {f"timed_trace_label_{k}": k for k in ("timestamp", "input_length", "output_length", "hash_ids")}
data = TimedTrace(dataset_path=sys.argv[1], random_seed=0, **labels)
print(json.dumps([[r.prompt, r.prompt_len, r.expected_output_len, r.timestamp] for r in data.sample(Vocab(), 100)]))
"""


def _run(python: Path, script: str, *args: str) -> dict | list:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the venv sees only its own packages
    done = subprocess.run([str(python), "-c", script, *args], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_aiperf_loads_our_dag_with_its_spawns_joins_and_delays(make_trace, tmp_path):
    python = require(peer_python("aiperf"), "aiperf 0.13.0", "replay engines install-peers")
    out = tmp_path / "dag.jsonl"
    export_trace("dag", agent_trace(make_trace), out)
    # a session the second lock keeps out: its spawn goes with it, and the file still loads
    bodies = [json.dumps({"messages": [{"role": "user", "content": f"q {r}"}]}) for r in IDS]
    bodies[3] = json.dumps({"messages": [{"role": "user", "content": "mail jane.doe@example.com"}]})
    locked = tmp_path / "locked.jsonl"
    export_trace("dag", agent_trace(make_trace, body=pl.Series(bodies)), locked)
    read = _run(python, AIPERF_READ, str(out), str(locked))
    dag = read[str(out)]
    assert dag["roots"] == ["main", "other"]
    main = dag["sessions"]["main"]
    assert main["branches"] == {"main:1": [["sub-a", "sub-b"], "spawn"]}
    assert main["joins"] == [[], [], ["main:1"], []]  # turn 2 waits for both subagents
    assert main["delays"] == [0.0, 200.0, 200.0, 100.0] and dag["sessions"]["sub-a"]["delays"] == [100.0, 200.0]
    assert main["messages"][2] == [{"role": "user", "content": "question m2"}]
    assert main["max_tokens"] == [5, 6, 10, 12]
    assert {s["mode"] for s in dag["sessions"].values()} == {"message_array_with_responses"}
    assert set(read[str(locked)]["sessions"]) == {"main", "sub-a", "other"}
    assert read[str(locked)]["sessions"]["main"]["branches"] == {"main:1": [["sub-a"], "spawn"]}


def test_inference_perf_rebuilds_our_edges_from_the_folder(make_trace, tmp_path):
    python = require(peer_python("inference-perf"), "inference-perf 0.7.0", "replay engines install-peers")
    out = tmp_path / "otel"
    export_trace("inference-perf", agent_trace(make_trace), out)
    read = _run(python, INFERENCE_PERF_READ, str(out))
    assert set(read) == {"000000-other.json", "000001-main.json"}
    rebuilt = {**read["000000-other.json"], **read["000001-main.json"]}
    ours = dict(zip(IDS, EDGES, strict=True))
    # chains and the fan-out come back exactly, with our waits; the join m2 keeps only its
    # latest dependency (a1): inference-perf's time rule gives each call one such edge
    assert {r: v[0] for r, v in rebuilt.items() if r != "m2"} == {r: e for r, e in ours.items() if r != "m2"}
    assert rebuilt["m2"][0] == ["a1"] and set(ours["m2"]) == {"a1", "b0"}
    assert {r: v[1] for r, v in rebuilt.items()} == {r: w or 0 for r, w in zip(IDS, WAIT_MS, strict=True)}
    # usage tokens: the trace's input_tokens and output_tokens
    assert [rebuilt[r][2:] for r in IDS] == [[10 * i, 5 + i] for i in range(len(IDS))]


@pytest.mark.slow  # vLLM imports torch: about 10 s
def test_vllm_timed_trace_reader_rebuilds_lengths_sharing_and_times(tmp_path):
    python = require(vllm_python(), "vLLM's CPU build", "replay engines install-vllm")
    from capture.importers import import_mooncake

    rows = [  # Mooncake ids of 32 tokens: the first two prompts share 64 tokens, the third is the first again
        {"timestamp": 0, "input_length": 100, "output_length": 4, "hash_ids": [1, 2, 3, 4]},
        {"timestamp": 1500, "input_length": 70, "output_length": 5, "hash_ids": [1, 2, 9]},
        {"timestamp": 2250, "input_length": 100, "output_length": 6, "hash_ids": [1, 2, 3, 4]},
    ]
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    import_mooncake(src, tmp_path / "m.parquet", hash_block=32)
    out = tmp_path / "timed.jsonl"
    export_trace("vllm", tmp_path / "m.parquet", out)  # its defaults: seconds, 16-token ids
    read = _run(python, VLLM_READ, str(out))
    assert [r[1] for r in read] == [100, 70, 100]  # every prompt at its full length
    assert [r[2] for r in read] == [4, 5, 6] and [r[3] for r in read] == [0.0, 1.5, 2.25]
    first, second, third = (r[0] for r in read)
    assert third == first and second[:64] == first[:64] and second[64:70] != first[64:70]
