"""Bodies as sent, written in Rust (``_engine.send_bodies``, rust/core/src/body.rs): byte for byte
what Python's rewrite (``replay.plan._rewrite_body``: parse, set, ``body_json``) writes, for every
body a trace stores, with Python's rewrite taking the bodies whose text is not ``body_json``'s."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import polars as pl
import pytest

from replay import _engine
from replay.bodies import body_json
from replay.config import RunConfig
from replay.plan import API_PATHS, _rewrite_body, build_plan, send_limits
from replay.synth import Synthesizer
from replay.trace import Trace, TraceMeta, validate

APIS = list(API_PATHS)
HARD_FLOAT = re.compile(r"\d[eE][-+]|\d\.\d{15,}")
# floats CPython writes back as they are parsed, and ones it does not (1e-05, 1e+16, 0.1 + 0.2)
FLOATS = [0.5, -2.25, 1.0, 100.0, 0.0001, 1e-05, 1e16, 0.1 + 0.2, 123456789012345.0, -0.0, 3.14159]
TEXTS = [
    "plain",
    'a "quote", a \\ and a /',
    "caf\u00e9 \u4e2d\u6587 \U0001f600",
    "tab\t nl\n bell\x07 nul\x00 del\x7f",
    "\\u0041",
    "",
]
KEYS = ["role", "content", "k\u00e9y", 'q"k', "name"]


def _value(rng: random.Random, depth: int):
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.choice(TEXTS) + str(rng.randrange(100))
    if kind == 1:
        return rng.choice([0, -1, 7, 10**20, rng.randrange(-(10**6), 10**6)])
    if kind == 2:
        return rng.choice(FLOATS)
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return rng.choice(TEXTS)
    if kind == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(KEYS) + str(i): _value(rng, depth + 1) for i in range(rng.randrange(4))}


def _body(rng: random.Random) -> dict:
    body: dict = {}
    # the members the replay sets, present or not, anywhere among the others
    keys = ["model", "messages", "stream", "max_tokens", "max_completion_tokens", "stream_options", "ignore_eos", "temperature"]
    rng.shuffle(keys)
    for key in keys[: rng.randrange(len(keys) + 1)]:
        body[key] = _value(rng, 1) if key != "messages" else [{"role": "user", "content": rng.choice(TEXTS)}]
    body["extra"] = _value(rng, 1)
    return body


def _stored_texts(rng: random.Random, n: int) -> list[str]:
    """Bodies as traces store them (``body_json``) and, one in four, as other writers do."""
    out = []
    for _ in range(n):
        obj = _body(rng)
        r = rng.random()
        if r < 0.75:
            out.append(body_json(obj))
        elif r < 0.85:
            out.append(json.dumps(obj))  # spaces after separators
        elif r < 0.9:
            out.append(json.dumps(obj, separators=(",", ":")))  # \u-escaped non-ASCII
        elif r < 0.95:
            text = body_json(obj)
            out.append(text[:-1] + ',"extra":1}')  # a repeated key: Python keeps one
        else:
            out.append(body_json(obj).replace("{", '{"a":1e5,', 1))  # a number Python writes otherwise
    return out


def _reference(texts, apis, limits, model, ignore_eos) -> list[bytes]:
    return [
        _rewrite_body(t, i, model=model, max_tokens=mt, ignore_eos=ignore_eos, api=api)[0]
        for i, (t, api, mt) in enumerate(zip(texts, apis, limits))
    ]


@pytest.mark.parametrize("seed", range(6))
def test_stored_bodies_are_sent_exactly_as_python_rewrites_them(seed):
    rng = random.Random(seed)
    n = 300
    texts = _stored_texts(rng, n)
    apis = [rng.choice(APIS) for _ in range(n)]
    limits = [rng.choice([None, 1, 4096]) for _ in range(n)]
    model, ignore_eos = rng.choice([None, "m", 'we"ird\u00e9']), seed % 2 == 0
    data, offsets, left = _engine.send_bodies(
        texts,
        np.array([APIS.index(a) for a in apis], dtype=np.uint8),
        np.array([-1 if mt is None else mt for mt in limits], dtype=np.int64),
        model=model,
        ignore_eos=ignore_eos,
    )
    want = _reference(texts, apis, limits, model, ignore_eos)
    made = [i for i in range(n) if i not in set(left.tolist())]
    # every body made in Rust is the same bytes as Python's
    for i in made:
        assert data[offsets[i] : offsets[i + 1]] == want[i], texts[i]
    # the others are left to Python (an empty span each)...
    assert all(offsets[i] == offsets[i + 1] for i in left.tolist())
    assert len(left) > 0
    # ...but none stored as body_json writes it, unless a float that CPython writes in exponent
    # form or with 16-17 digits (left to Python: a conservative check)
    canonical = [i for i, t in enumerate(texts) if body_json(json.loads(t)) == t and not HARD_FLOAT.search(t)]
    assert set(left.tolist()).isdisjoint(canonical)
    assert len(canonical) > n // 3


def test_token_only_bodies_are_built_as_python_builds_them():
    texts = TEXTS + ["x" * 5000]
    rows = [(t, m, mt) for t in texts for m in (None, "m\u00e9") for mt in (None, 9)]
    apis = [APIS[i % 4] for i in range(len(rows))]
    limits = [None if i % 3 == 0 else 5 for i in range(len(rows))]
    data, offsets, left = _engine.send_bodies(
        rows,
        np.array([APIS.index(a) for a in apis], dtype=np.uint8),
        np.array([-1 if mt is None else mt for mt in limits], dtype=np.int64),
        model="m",
        ignore_eos=True,
    )
    assert len(left) == 0
    for i, ((text, m, mt), api, limit) in enumerate(zip(rows, apis, limits)):
        obj = Synthesizer.body(api, m, mt, text)
        want, _ = _rewrite_body(obj, i, model="m", max_tokens=limit, ignore_eos=True, api=api)
        assert data[offsets[i] : offsets[i + 1]] == want


def test_texts_drawn_in_rust_are_the_texts_python_synthesizes():
    from replay.synth import BodyBuilder, request_key

    meta = TraceMeta(source_format="test", tokenizer="gpt2", synthesis='{"block_tokens":512,"rule":"prompt-vocab-1","seed":3}')
    builder = BodyBuilder(meta)
    ids, lengths = [f"r{i}" for i in range(20)], [0, 1, 2, 50, 1155] * 4
    texts = builder.synth.texts(ids, lengths)
    apis = [APIS[i % 4] for i in range(20)]
    rows_drawn = [(request_key(r), n, "a" if i % 2 else None, 7) for i, (r, n) in enumerate(zip(ids, lengths))]
    rows_text = [(t, m, mt) for t, (_, _, m, mt) in zip(texts, rows_drawn)]
    args = (np.array([APIS.index(a) for a in apis], dtype=np.uint8), np.full(20, 9, dtype=np.int64))
    drawn = _engine.send_bodies(rows_drawn, *args, model="m", ignore_eos=True, prompts=builder.prompts())
    made = _engine.send_bodies(rows_text, *args, model="m", ignore_eos=True)
    assert drawn[0] == made[0] and (drawn[1] == made[1]).all() and len(drawn[2]) == 0
    with pytest.raises(Exception, match="prompts"):
        _engine.send_bodies(rows_drawn, *args)


def test_a_plan_s_windows_mix_both_paths_in_order():
    rng = random.Random(7)
    texts = _stored_texts(rng, 50) + [body_json({"messages": [{"role": "user", "content": "hi"}]})]
    n = len(texts)
    meta = TraceMeta(source_format="test", tokenizer="none")
    df = pl.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "api": ["chat"] * n,
            "model": ["a"] * n,
            "arrival_us": [i * 1000 for i in range(n)],
            "body": texts,
            "input_tokens": [5] * n,
            "output_tokens": [3] * n,
            "max_tokens": [4] * n,
        }
    )
    trace = Trace(validate(df, meta, source="<test>"), meta)
    plan = build_plan(trace, RunConfig(url="http://127.0.0.1:9"), model="m")
    got = [data[a:b] for data, offsets in plan.body_windows(size=16) for a, b in zip(offsets[:-1], offsets[1:])]
    limits = send_limits(plan.rows, plan.ignore_eos).to_list()
    assert got == _reference(texts, ["chat"] * n, limits, "m", plan.ignore_eos)


def test_a_body_that_is_not_an_object_is_still_a_one_line_error():
    from replay.errors import TraceError

    with pytest.raises(TraceError, match="row 1: not a JSON object"):
        _reference(['{"a":1}', "[1]"], ["chat", "chat"], [None, None], None, False)
    data, offsets, left = _engine.send_bodies(['{"a":1}', "[1]", None], np.zeros(3, np.uint8), np.full(3, -1, np.int64))
    assert left.tolist() == [1, 2]
