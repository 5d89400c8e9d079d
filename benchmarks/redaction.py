"""How fast is redaction? Requests/s and MB/s of our pipeline against a naive Presidio loop.

Issue [4] "Redaction": redacting a multi-turn capture should run at least 20x the requests/s of the
obvious approach. Both pipelines read the same seeded corpus (:func:`examples.pii_corpus.make_corpus`:
multi-turn chat sessions whose request k resends the system prompt and every earlier turn, with
names, addresses, cards, keys, code, logs... in the user turns and some echoed in the answers):

* (a) naive: one process, no cache; for every request, ``json.loads`` its body and call Presidio's
  ``AnalyzerEngine.analyze`` on every text slot (:func:`replay.bodies.text_slots`), with the
  analyzer as a user would configure it without our pipeline: :func:`redact.analyzer.build_analyzer`
  with the spaCy model's default pipes enabled again (tok2vec, tagger, parser, attribute ruler,
  lemmatizer and NER; ``senter`` stays off, as ``spacy.load`` leaves it), the same
  ``entities=list(ENTITIES)`` and ``score_threshold=SCORE_THRESHOLD``. It only finds entities;
  replacing them would be extra.
* (b) ours: ``redact_trace(trace, key)`` (:mod:`redact.pipeline`) on a Trace of the same requests,
  made with the log importer's builder (:func:`capture.importers.logs.build_trace`: gpt2 token
  counts, 16-token block hashes, the recorded answer of each request in ``response``). It does
  more than (a): it also redacts the answers, replaces what it finds with surrogates, re-tokenizes
  and checks the block hashes. Worker processes: ``--processes`` (default: all CPUs, at most 8).

Each pipeline runs in a fresh subprocess. What is timed excludes one-time setup, printed apart:
for (a) building the analyzer and a first call; for (b) the Redactor (tokenizer, surrogate word
pools) and its worker processes started and answering (``redact_trace`` is then handed that
Redactor), and the building of the input trace. Throughput: requests/s, and MB/s where MB is the
UTF-8 bytes (10^6) of every message text of every request (what the naive loop reads), the same
figure for both. Peak RSS (MiB): ``ru_maxrss`` of the pipeline's process, and for (b) of its
largest worker (``RUSAGE_CHILDREN`` once the pool is closed).

An agreement check (a third subprocess) takes ``--agree-texts`` distinct message texts (seeded
sample) and compares the (entity, start, end) sets of the naive full-pipeline analyzer with
:class:`redact.analyzer.TextAnalyzer` (NER only, what (b)'s workers run), both through the same
filters, overlap resolution and name propagation (``redact.analyzer.found_spans``); it prints
the share of texts with identical sets, the count of each type on both sides, and a few differing examples.

Not a pass/fail test: it prints a table and the ratio (b)/(a) in requests/s (target >= 20), with
the machine's 1-minute load average before and after each pipeline (other work on the machine
slows (b), which needs every CPU, more than (a)).
Progress goes to stderr. ``--json`` prints one JSON object instead of the tables.

usage: PYTHONPATH=<checkout> python benchmarks/redaction.py [--sessions 250] [--turns-mean 6]
           [--seed 0] [--processes N] [--agree-texts 150] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the corpus is examples/pii_corpus.py, not part of the installed packages
DEFAULT_SESSIONS = 250
QUICK_SESSIONS = 8
TARGET_RATIO = 20.0
KEY = b"redaction-benchmark-key-0123456789abcdef"
T0_UNIX_US = 1_767_225_600_000_000  # 2026-01-01 UTC, the corpus' first arrival


def peak_mib(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # KB on Linux


def cpu_s(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a live process has used so far, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the corpus (same in every process)


def corpus_of(args: argparse.Namespace):
    from examples.pii_corpus import make_corpus

    return make_corpus(args.sessions, seed=args.seed, turns_mean=args.turns_mean)


def request_bodies(corpus) -> list[str]:
    """Each request's body as a log holds it (a JSON string)."""
    return [json.dumps(b, separators=(",", ":"), ensure_ascii=False) for b in corpus.requests]


def corpus_shape(corpus) -> dict:
    from replay.bodies import text_slots

    texts = [s.text for b in corpus.requests for s in text_slots(b)]
    sessions = len(set(corpus.session_ids))
    return {
        "sessions": sessions,
        "requests": len(corpus.requests),
        "text_slots": len(texts),
        "distinct_texts": len(set(texts)),
        "distinct_with_answers": len(set(texts) | set(corpus.responses)),
        "mean_turns": len(corpus.requests) / sessions if sessions else 0.0,
        "mean_slots": len(texts) / len(corpus.requests) if corpus.requests else 0.0,
        "text_bytes": sum(len(t.encode("utf-8")) for t in texts),
    }


# ---------------------------------------------------------------- (a) the naive loop


def full_pipeline_analyzer():
    """build_analyzer() with the spaCy pipes we disable enabled again, as ``spacy.load`` gives
    them (the model's own default-disabled pipes, ``senter``, stay off)."""
    import importlib.util

    import spacy

    from redact.analyzer import _NER_ONLY_DISABLED, SPACY_MODEL, build_analyzer

    analyzer = build_analyzer()
    nlp = analyzer.nlp_engine.nlp["en"]
    # the pipes the packaged model ships disabled (its meta.json; nlp.config now lists ours too)
    package = Path(importlib.util.find_spec(SPACY_MODEL).origin).parent
    default_off = set(spacy.util.get_model_meta(package).get("disabled", []))
    for name in _NER_ONLY_DISABLED:
        if name in nlp.component_names and name not in default_off and name in nlp.disabled:
            nlp.enable_pipe(name)
    return analyzer


def child_naive(args: argparse.Namespace) -> dict:
    from redact.analyzer import ENTITIES, SCORE_THRESHOLD
    from replay.bodies import text_slots

    corpus = corpus_of(args)
    bodies = request_bodies(corpus)
    t = time.perf_counter()
    analyzer = full_pipeline_analyzer()
    entities = list(ENTITIES)
    analyzer.analyze(
        text="Warm up: call Maria Lopez at 555-0100.", language="en", entities=entities, score_threshold=SCORE_THRESHOLD
    )
    setup_s = time.perf_counter() - t
    pipes = analyzer.nlp_engine.nlp["en"].pipe_names
    log(f"  (a) naive: analyzer ready in {setup_s:.1f} s (pipes {', '.join(pipes)}); {len(bodies)} requests")
    found: Counter = Counter()
    t = time.perf_counter()
    for i, raw in enumerate(bodies):
        for slot in text_slots(json.loads(raw)):
            for r in analyzer.analyze(text=slot.text, language="en", entities=entities, score_threshold=SCORE_THRESHOLD):
                found[r.entity_type] += 1
        if (i + 1) % 500 == 0:
            log(f"  (a) naive: {i + 1} requests, {time.perf_counter() - t:.0f} s")
    wall = time.perf_counter() - t
    return {
        "pipeline": "naive",
        "processes": 1,
        "requests": len(bodies),
        "wall_s": wall,
        "setup_s": setup_s,
        "peak_main_mib": peak_mib(),
        "peak_worker_mib": None,
        "pipes": pipes,
        "results": dict(sorted(found.items())),
    }


# ---------------------------------------------------------------- (b) redact_trace


def build_input_trace(corpus):
    """The corpus as a Trace, as the log importers make one (token counts, block hashes, answers)."""
    from capture.importers.logs import build_trace
    from capture.importers.records import LogRecord

    records = [
        LogRecord(
            arrival_us=T0_UNIX_US + int(round(float(a) * 1e6)),
            api="chat",
            model=body.get("model"),
            body=body,
            request_id=f"req-{i}",
            session_id=f"s{sid}",
            response=resp,
        )
        for i, (body, resp, sid, a) in enumerate(zip(corpus.requests, corpus.responses, corpus.session_ids, corpus.arrival_s))
    ]
    return build_trace(records, source="redaction benchmark corpus", source_format="synthetic")


def child_pipeline(args: argparse.Namespace) -> dict:
    import redact.pipeline as pipeline
    from redact.key import RedactionKey

    corpus = corpus_of(args)
    t = time.perf_counter()
    trace = build_input_trace(corpus)
    trace_s = time.perf_counter() - t
    key = RedactionKey(KEY)
    t = time.perf_counter()
    ready = pipeline.Redactor(key, trace.meta.tokenizer, processes=args.processes)
    ready._get_pool()  # start the workers (each loads spaCy and Presidio) before the clock starts
    setup_s = time.perf_counter() - t
    log(
        f"  (b) redact_trace: {ready.processes} workers ready in {setup_s:.1f} s "
        f"(trace built in {trace_s:.1f} s); {len(trace)} requests"
    )

    real = pipeline.Redactor

    def started_redactor(k, tokenizer, **kw):  # redact_trace's Redactor: the one already started
        assert k is key and tokenizer == ready.tokenizer_name and kw.get("processes") == args.processes
        return ready

    pipeline.Redactor = started_redactor
    workers_before = sum(proc_cpu_s(pid) for pid in ready._pool._processes)  # their setup
    try:
        main_before = cpu_s(resource.RUSAGE_SELF)
        t = time.perf_counter()
        out, report = pipeline.redact_trace(trace, key, processes=args.processes)
        wall = time.perf_counter() - t
        main_cpu = cpu_s(resource.RUSAGE_SELF) - main_before
    finally:
        pipeline.Redactor = real
    assert len(out) == report.written
    return {
        "pipeline": "redact_trace",
        "processes": ready.processes,
        "requests": len(trace),
        "wall_s": wall,
        "setup_s": setup_s,
        "trace_s": trace_s,
        "peak_main_mib": peak_mib(),
        "peak_worker_mib": peak_mib(resource.RUSAGE_CHILDREN),
        "main_cpu_s": main_cpu,
        "workers_cpu_s": cpu_s(resource.RUSAGE_CHILDREN) - workers_before,
        "report": report.to_dict(),
    }


# ---------------------------------------------------------------- agreement on a sample


def child_agree(args: argparse.Namespace) -> dict:
    from redact.analyzer import ENTITIES, SCORE_THRESHOLD, TextAnalyzer, found_spans
    from replay.bodies import text_slots

    corpus = corpus_of(args)
    distinct = list(dict.fromkeys(s.text for b in corpus.requests for s in text_slots(b)))
    sample = random.Random(args.seed).sample(distinct, min(args.agree_texts, len(distinct)))
    naive = full_pipeline_analyzer()
    ours = TextAnalyzer()
    ours_found = ours.analyze_batch(sample)
    same, diffs = 0, []
    counts = {"naive": Counter(), "ours": Counter()}
    for text, got in zip(sample, ours_found):
        if isinstance(got, BaseException):
            raise got
        a = {
            (f.entity, f.start, f.end)
            for f in found_spans(
                naive.analyze(text=text, language="en", entities=list(ENTITIES), score_threshold=SCORE_THRESHOLD), text
            )
        }
        b = {(f.entity, f.start, f.end) for f in got}
        counts["naive"].update(e for e, _, _ in a)
        counts["ours"].update(e for e, _, _ in b)
        if a == b:
            same += 1
        else:
            diffs.append({"only_naive": spans(a - b, text), "only_ours": spans(b - a, text)})
    return {
        "texts": len(sample),
        "identical": same,
        "differing": len(diffs),
        "examples": diffs[:6],
        "counts": {k: dict(sorted(v.items())) for k, v in counts.items()},
    }


def spans(found: set, text: str) -> list:
    return [(e, s, x, text[s:x]) for e, s, x in sorted(found, key=lambda v: v[1])]


CHILDREN = {"naive": child_naive, "pipeline": child_pipeline, "agree": child_agree}


# ---------------------------------------------------------------- parent


def run_child(kind: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="redaction-bench-") as tmp:
        out = Path(tmp) / "out.json"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            kind,
            "--out",
            str(out),
            "--sessions",
            str(args.sessions),
            "--turns-mean",
            str(args.turns_mean),
            "--seed",
            str(args.seed),
            "--agree-texts",
            str(args.agree_texts),
        ]
        if args.processes:
            cmd += ["--processes", str(args.processes)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        load_before = os.getloadavg()[0]
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            return {"failed": f"timed out after {args.timeout_s:g} s"}
        if proc.returncode != 0 or not out.exists():
            return {"failed": f"exit status {proc.returncode}"}
        res = json.loads(out.read_text())
        res["process_s"] = time.perf_counter() - t
        res["load"] = (load_before, os.getloadavg()[0])
        return res


def with_rates(r: dict, shape: dict) -> dict:
    if "failed" in r:
        return r
    return r | {"requests_per_s": r["requests"] / r["wall_s"], "mb_per_s": shape["text_bytes"] / 1e6 / r["wall_s"]}


def fmt(v, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def print_report(shape: dict, rows: dict, agree: dict | None, args: argparse.Namespace) -> None:
    print(
        f"corpus: {shape['sessions']} sessions (seed {args.seed}, turns mean {args.turns_mean:g}), "
        f"{shape['requests']} requests, {shape['mean_turns']:.2f} turns a session, "
        f"{shape['text_slots']} message texts ({shape['mean_slots']:.1f} a request), "
        f"{shape['distinct_texts']} distinct ({shape['distinct_with_answers']} with the answers), "
        f"{shape['text_bytes'] / 1e6:.2f} MB of message text"
    )
    print(
        "\n| pipeline | processes | requests | wall s | requests/s | MB/s | setup s (untimed) "
        "| peak RSS main MiB | peak RSS worker MiB | load before, after |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    names = {"naive": "(a) naive Presidio loop, all spaCy pipes", "pipeline": "(b) redact_trace"}
    for kind, r in rows.items():
        if "failed" in r:
            print(f"| {names[kind]} | failed: {r['failed']} |" + " |" * 8)
            continue
        print(
            f"| {names[kind]} | {r['processes']} | {r['requests']} | {r['wall_s']:.1f} "
            f"| {r['requests_per_s']:.1f} | {r['mb_per_s']:.3f} | {r['setup_s']:.1f} "
            f"| {r['peak_main_mib']:.0f} | {fmt(r['peak_worker_mib'], '.0f')} "
            f"| {r['load'][0]:.2f}, {r['load'][1]:.2f} |"
        )
    a, b = rows.get("naive", {}), rows.get("pipeline", {})
    if "requests_per_s" in a and "requests_per_s" in b:
        ratio = b["requests_per_s"] / a["requests_per_s"]
        print(
            f"\nratio (b)/(a), requests/s: {ratio:.2f}x (target >= {TARGET_RATIO:g}x: "
            f"{'met' if ratio >= TARGET_RATIO else 'NOT met'})"
        )
    if "report" in b:
        rep = b["report"]
        print(
            f"(b) analysed {rep['analysed']} distinct texts of {rep['texts']} strings "
            f"(prompts and answers); {rep['quarantined']} quarantined; entities replaced "
            f"{rep['entities']}; input trace built in {b['trace_s']:.1f} s (untimed)"
        )
        print(
            f"(b) CPU seconds in the timed part: main process {b['main_cpu_s']:.1f}, workers "
            f"{b['workers_cpu_s']:.1f} (all together), on {os.cpu_count()} CPUs"
        )
    if "results" in a:
        print(f"(a) results (every slot of every request): {a['results']}")
    if agree is None:
        return
    if "failed" in agree:
        print(f"\nagreement check failed: {agree['failed']}")
        return
    print(
        f"\nagreement on {agree['texts']} distinct texts (naive full pipeline vs NER-only "
        f"TextAnalyzer, both resolved): {agree['identical']}/{agree['texts']} identical "
        f"({agree['identical'] / max(agree['texts'], 1):.1%})"
    )
    types = sorted(set(agree["counts"]["naive"]) | set(agree["counts"]["ours"]))
    print("| entity | naive | ours |\n|---|---:|---:|")
    for e in types:
        print(f"| {e} | {agree['counts']['naive'].get(e, 0)} | {agree['counts']['ours'].get(e, 0)} |")
    for ex in agree["examples"]:
        print(f"  differs: only naive {ex['only_naive']}; only ours {ex['only_ours']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=None, help=f"chat sessions (default {DEFAULT_SESSIONS})")
    parser.add_argument("--turns-mean", type=float, default=6.0, help="mean requests a session")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=None, help="(b)'s workers (default: all CPUs, at most 8)")
    parser.add_argument("--agree-texts", type=int, default=150, help="texts in the agreement check (0: skip it)")
    parser.add_argument("--only", choices=("naive", "pipeline"), help="run one pipeline (and no agreement check)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run ({QUICK_SESSIONS} sessions, 20 texts checked)")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per subprocess")
    parser.add_argument("--child", choices=tuple(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sessions is None:
        args.sessions = QUICK_SESSIONS if args.quick else DEFAULT_SESSIONS
    if args.quick and args.agree_texts == 150:
        args.agree_texts = 20
    if args.sessions < 1:
        parser.error("--sessions: must be >= 1")
    if args.processes is not None and args.processes < 1:
        parser.error("--processes: must be >= 1")

    if args.child:
        Path(args.out).write_text(json.dumps(CHILDREN[args.child](args)))
        return 0

    shape = corpus_shape(corpus_of(args))
    log(f"corpus: {shape['requests']} requests, {shape['text_bytes'] / 1e6:.2f} MB of message text")
    rows = {}
    for kind in ("naive", "pipeline"):
        if args.only and kind != args.only:
            continue
        log(f"running ({'a' if kind == 'naive' else 'b'}) {kind} in a fresh process")
        rows[kind] = with_rates(run_child(kind, args), shape)
    agree = None
    if args.agree_texts > 0 and not args.only:
        log(f"agreement check on {args.agree_texts} texts")
        agree = run_child("agree", args)
    if args.json:
        out = {"corpus": shape, "seed": args.seed, "turns_mean": args.turns_mean, "pipelines": rows, "agreement": agree}
        if "requests_per_s" in rows.get("naive", {}) and "requests_per_s" in rows.get("pipeline", {}):
            out["ratio"] = rows["pipeline"]["requests_per_s"] / rows["naive"]["requests_per_s"]
        print(json.dumps(out, indent=1))
    else:
        print_report(shape, rows, agree, args)
    return 0 if all("failed" not in r for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
