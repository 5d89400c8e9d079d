"""Our exports read back by the peers' own code, each in its own venv (a subprocess): AIPerf
0.13.0's ``dag_jsonl`` loader, inference-perf 0.7.0's OTel replay graph builder, GuideLLM 0.8.1's
trace deserializers (``trace_synthetic`` and ``mooncake``: its file reader, row checks and prompt
builder, with a one-character-per-token tokenizer of ours and without torch; see
``replay/targets/peer_install.py``), vLLM's ``timed_trace`` reader (its CPU build).
``replay engines install-peers`` / ``install-vllm`` put them in the cache; a missing one skips here
and fails under CI (``real_engines.require``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import polars as pl
import pytest

from capture.exporters import export_trace
from replay.targets.peer_install import GUIDELLM_TRACE, INFERENCE_PERF_GRAPH, peer_python
from replay.targets.vllm_install import vllm_python
from tests.integration.real_engines import require
from tests.unit.capture.test_export_peers import ARRIVAL_MS, E2E_MS, EDGES, IDS, WAIT_MS, agent_trace

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

GUIDELLM_READ = (
    GUIDELLM_TRACE
    + """
import json
class Chars:  # a tokenizer of one token per character: a prompt's tokens are its characters
    def encode(self, text):
        return [ord(c) for c in text]
    def decode(self, ids, skip_special_tokens=True):
        return "".join(map(chr, ids))
out = []
for path, kind, block in zip(sys.argv[1::3], sys.argv[2::3], sys.argv[3::3]):
    source = FileDataArgs(kind="json_file", path=path)
    args = (MooncakeTraceFormatArgs(source=source, hash_id_block_size=int(block)) if kind == "mooncake"
            else MinimalTraceFormatArgs(source=source))
    try:
        data = DatasetDeserializerFactory.deserialize(config=args, processor_factory=Chars, random_seed=0)
        rows = []
        for item in data:
            (turn,) = json.loads(item["conversation_turns"])["turns"]
            c = {k: v[0] for k, v in turn["columns"].items()}
            rows.append([c["text_column"], c["prompt_tokens_count_column"], c["output_tokens_count_column"],
                         c["relative_timestamp_column"], c.get("request_duration_column")])
    except Exception as e:  # its row checks
        out.append(f"{type(e).__name__}: {e}")
        continue
    table = getattr(data._ex_iterable.format, "_hash_id_table", {})  # mooncake: hash id -> its token block
    out.append({"rows": rows, "blocks": {k: len(v) for k, v in table.items()}})
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


def _blocks_shared(a: list | str, b: list | str, size: int = 1) -> int:
    """How many leading blocks of ``size`` items ``a`` and ``b`` have in common."""
    n = 0
    while n * size < min(len(a), len(b)) and a[n * size : (n + 1) * size] == b[n * size : (n + 1) * size]:
        n += 1
    return n


def test_guidellm_reads_our_times_lengths_durations(make_trace, tmp_path):
    python = require(peer_python("guidellm"), "guidellm 0.8.1", "replay engines install-peers")
    out = tmp_path / "g.jsonl"
    export_trace("guidellm", agent_trace(make_trace), out)
    ours = [json.loads(x) for x in out.read_text().splitlines()]
    synthetic, mooncake = _run(python, GUIDELLM_READ, str(out), "trace_synthetic", "512", str(out), "mooncake", "512")
    assert isinstance(synthetic, dict) and isinstance(mooncake, dict), (synthetic, mooncake)
    for read in (synthetic, mooncake):
        # offsets in seconds from the first arrival, in arrival order (a0 and b0 tie: file order)
        assert [r[3] for r in read["rows"]] == [a / 1000 for a in ARRIVAL_MS]
        assert [r[1:3] for r in read["rows"]] == [[x["input_length"], x["output_length"]] for x in ours]
        assert [r[2] for r in read["rows"]] == [5 + i for i in range(len(IDS))]
        assert [r[4] for r in read["rows"]] == [e / 1000 for e in E2E_MS]  # its duration column
        assert [len(r[0]) for r in read["rows"]] == [x["input_length"] for x in ours]  # its prompts, full length
    assert set(mooncake["blocks"]) == {str(i) for x in ours for i in x["hash_ids"]}


def test_guidellm_mooncake_kind_rebuilds_our_shared_blocks(tmp_path):
    python = require(peer_python("guidellm"), "guidellm 0.8.1", "replay engines install-peers")
    from capture.importers import import_mooncake

    rows = [  # Mooncake ids of 512 tokens: prompts sharing two blocks, one, and a repeat of the first
        {"timestamp": 0, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2, 3]},
        {"timestamp": 1500, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 4]},
        {"timestamp": 2250, "input_length": 600, "output_length": 6, "hash_ids": [1, 5]},
        {"timestamp": 3000, "input_length": 1100, "output_length": 7, "hash_ids": [1, 2, 3]},
    ]
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    import_mooncake(src, tmp_path / "m.parquet", hash_block=512)
    out512, out16 = tmp_path / "g512.jsonl", tmp_path / "g16.jsonl"
    export_trace("guidellm", tmp_path / "m.parquet", out512)  # its default hash_id_block_size, 512
    export_trace("guidellm", tmp_path / "m.parquet", out16, block_size=16)
    files = (str(out512), "mooncake", "512", str(out16), "mooncake", "16", str(out16), "mooncake", "512")
    read = _run(python, GUIDELLM_READ, *files)
    for got, out, block in ((read[0], out512, 512), (read[1], out16, 16)):
        assert isinstance(got, dict), got
        ours = [json.loads(x) for x in out.read_text().splitlines()]
        prompts = [r[0] for r in got["rows"]]
        assert [r[1:4] for r in got["rows"]] == [[r["input_length"], r["output_length"], r["timestamp"] / 1000] for r in rows]
        assert [len(p) for p in prompts] == [r["input_length"] for r in rows]
        # its prompts share exactly the leading blocks whose ids ours share
        for i, a in enumerate(ours):
            for j, b in enumerate(ours):
                assert _blocks_shared(prompts[i], prompts[j], block) == _blocks_shared(a["hash_ids"], b["hash_ids"]), (i, j)
        assert prompts[3] == prompts[0] and _blocks_shared(ours[1]["hash_ids"], ours[0]["hash_ids"]) == 1024 // block
        # its table: one block per id of ours, of block tokens (the rest of the prompt for a row's last id)
        sizes: dict[str, int] = {}
        for x in ours:
            for k, h in enumerate(x["hash_ids"]):
                last = k == len(x["hash_ids"]) - 1 and x["input_length"] % block
                sizes.setdefault(str(h), x["input_length"] % block if last else block)
        assert got["blocks"] == sizes
    # the 16-token ids read as 512-token ones: its row check refuses them
    assert read[2] == "InvalidRowError: Input token count of 1100 split into blocks of size 512 does not match given 69 blocks"


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
