"""Chained block hashes: shared prefixes share hashes, a change breaks every later hash."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from replay.blocks import HASH_ALGO, block_hashes, chain_hash


def test_definition_matches_the_documented_chain():
    ids = list(range(10))
    parent = bytes(8)
    want = []
    for start in (0, 4):
        block = np.array(ids[start : start + 4], dtype="<u4").tobytes()
        parent = hashlib.blake2b(parent + block, digest_size=8).digest()
        want.append(int.from_bytes(parent, "little"))
    assert block_hashes(ids, 4) == want
    assert HASH_ALGO == "blake2b64-chain"


def _reference(ids: np.ndarray, block_size: int) -> list[int]:
    """The documented chain, spelled out with hashlib (the compiled core computes the real one)."""
    data, parent, out = np.asarray(ids, dtype="<u4").tobytes(), bytes(8), []
    for start in range(0, len(ids) // block_size * block_size * 4, block_size * 4):
        parent = hashlib.blake2b(parent + data[start : start + block_size * 4], digest_size=8).digest()
        out.append(int.from_bytes(parent, "little"))
    return out


@pytest.mark.parametrize("block_size", [1, 3, 16, 64, 65, 200])
def test_the_compiled_chain_is_hashlibs_for_any_length_and_block_size(block_size):
    rng = np.random.default_rng(block_size)
    for n in (0, block_size - 1, block_size, 5 * block_size + 2, 1_000):
        ids = rng.integers(0, 2**32, n, dtype=np.uint64)
        assert block_hashes(ids, block_size) == _reference(ids, block_size)
    # one block given its parent, a partial one included (the exporters hash a partial last block)
    ids = rng.integers(0, 2**32, 2 * block_size + 1, dtype=np.uint64).astype("<u4")
    first = chain_hash(None, ids[:block_size])
    assert first == _reference(ids, block_size)[0]
    tail = hashlib.blake2b(first.to_bytes(8, "little") + ids[block_size:].tobytes(), digest_size=8).digest()
    assert chain_hash(first, ids[block_size:]) == int.from_bytes(tail, "little")


def test_partial_blocks_get_no_hash():
    assert block_hashes([1, 2, 3], 4) == []
    assert block_hashes([], 4) == []
    assert block_hashes(list(range(11)), 4) == block_hashes(list(range(8)), 4)
    assert len(block_hashes(list(range(12)), 4)) == 3


def test_same_prefix_same_leading_hashes():
    rng = np.random.default_rng(1)
    prefix = rng.integers(0, 50_000, 64)
    a = block_hashes(np.concatenate([prefix, rng.integers(0, 50_000, 40)]), 16)
    b = block_hashes(np.concatenate([prefix, rng.integers(0, 50_000, 70)]), 16)
    assert a[:4] == b[:4]
    assert a[4] != b[4]


def test_a_changed_block_changes_every_later_hash():
    ids = np.random.default_rng(2).integers(0, 50_000, 160)
    changed = ids.copy()
    changed[40] += 1  # block 2 of 10
    a, b = block_hashes(ids, 16), block_hashes(changed, 16)
    assert a[:2] == b[:2]
    assert all(x != y for x, y in zip(a[2:], b[2:]))


def test_hash_depends_on_position_not_only_content():
    block = [7] * 16
    hashes = block_hashes(block * 3, 16)
    assert len(set(hashes)) == 3


def test_input_types_agree_and_bad_ids_are_refused():
    ids = [1, 2, 3, 4, 70_000, 6, 7, 8]
    want = block_hashes(ids, 4)
    assert block_hashes(np.array(ids, dtype=np.int64), 4) == want
    assert block_hashes(np.array(ids, dtype=np.uint32), 4) == want
    assert all(0 <= h < 2**64 for h in want)
    with pytest.raises(ValueError):
        block_hashes([-1, 2, 3, 4], 4)
    with pytest.raises(ValueError):
        block_hashes([1, 2], 0)
