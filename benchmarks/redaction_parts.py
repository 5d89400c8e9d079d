"""Where redaction's time goes: its parts, each timed apart on the benchmark corpus.

The breakdown behind docs/redaction.md's Speed section (benchmarks/redaction.py times the whole
pipeline against a naive loop). On the distinct texts of ``examples.pii_corpus.make_corpus(250,
seed=0)`` (prompts and answers), in this one process:

* ``ner``: spaCy's NER (the only pipe :class:`redact.analyzer.TextAnalyzer` runs), ``nlp.pipe``;
* ``recognizers``: Presidio's recognizers and our post-processing (``TextAnalyzer.analyze`` on
  the NER's output), and within it each shape recognizer (:mod:`redact.shapes`: email, phone,
  card, IBAN, IP) on its own;
* ``surrogates``: :meth:`redact.surrogates.Surrogates.make` once for each distinct labelled value
  of the corpus, per entity type, with the token exceptions (values whose surrogate is off in
  token count).

Seconds are wall time in one process; peak RSS (MiB) is printed at the end. Not a pass/fail test.

usage: PYTHONPATH=<checkout> python benchmarks/redaction_parts.py [--sessions 250] [--seed 0]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/pii_corpus.py


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from examples.pii_corpus import make_corpus
    from redact.analyzer import TextAnalyzer
    from redact.key import RedactionKey
    from redact.surrogates import Surrogates
    from replay.bodies import text_slots
    from replay.tokenizer import load_tokenizer

    corpus = make_corpus(args.sessions, seed=args.seed)
    texts = list(dict.fromkeys([s.text for b in corpus.requests for s in text_slots(b)] + [r for r in corpus.responses if r]))
    print(f"{len(texts)} distinct texts (prompts and answers), {sum(map(len, texts)) / 1e6:.2f} M chars")

    analyzer = TextAnalyzer()
    t = time.perf_counter()
    artifacts = [a for _, a in analyzer.analyzer.nlp_engine.process_batch(texts, language="en", batch_size=32)]
    print(f"ner: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    for text, art in zip(texts, artifacts):
        analyzer.analyze(text, art)
    print(f"recognizers and post-processing: {time.perf_counter() - t:.2f} s")

    shapes = [r for r in analyzer.analyzer.registry.recognizers if r.name.endswith("_shape")]
    for recognizer in shapes:
        t = time.perf_counter()
        for text in texts:
            recognizer.analyze(text, recognizer.supported_entities)
        print(f"  {recognizer.name}: {time.perf_counter() - t:.3f} s")

    values = defaultdict(set)
    for labels in corpus.labels.values():
        for span in labels.spans:
            values[span.entity].add(span.value)
    tok = load_tokenizer("gpt2")
    sur = Surrogates(RedactionKey(b"redaction-benchmark-key-0123456789abcdef"), tok)
    print("\n| entity | values | seconds | ms a value | token exceptions |\n|---|---:|---:|---:|---:|")
    total = 0.0
    for entity, vs in sorted(values.items()):
        t = time.perf_counter()
        off = sum(sur.make(entity, v)[1] for v in sorted(vs))
        dt = time.perf_counter() - t
        total += dt
        print(f"| {entity} | {len(vs)} | {dt:.3f} | {dt / len(vs) * 1e3:.2f} | {off} |")
    print(f"surrogates: {total:.2f} s, {sum(sur.exceptions.values())} token exceptions")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
