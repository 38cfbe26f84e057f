"""The ListOps generator: labels, determinism, limits and the records round trip."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

from partf.errors import DataError, UsageError
from tests.benchmarks import load_benchmark

_listops = load_benchmark("listops_data")
NUM_CLASSES = _listops.NUM_CLASSES
VOCABULARY = _listops.VOCABULARY
ListOpsSettings = _listops.ListOpsSettings
apply_operator = _listops.apply_operator
decode = _listops.decode
generate_listops = _listops.generate_listops
read_listops = _listops.read_listops
write_listops = _listops.write_listops

SMALL = ListOpsSettings(max_depth=4, max_args=5, min_length=10, max_length=120)


def parse(text: str):
    """Expression text -> nested lists [operator, argument, ...] and ints, by a stack."""
    stack = [["root"]]
    for token in text.split():
        if token.startswith("["):
            stack.append([token[1:]])
        elif token == "]":
            node = stack.pop()
            stack[-1].append(node)
        else:
            stack[-1].append(int(token))
    (root,) = stack[0][1:]
    assert len(stack) == 1
    return root


def evaluate(node) -> int:
    """The value of a parsed expression, written out from the task's definition."""
    if isinstance(node, int):
        return node
    operator, values = node[0], [evaluate(argument) for argument in node[1:]]
    if operator == "MAX":
        return max(values)
    if operator == "MIN":
        return min(values)
    if operator == "SM":
        return sum(values) % 10
    assert operator == "MED"
    return int(np.floor(statistics.median(values)))


def depth(node) -> int:
    if isinstance(node, int):
        return 0
    return 1 + max(depth(argument) for argument in node[1:])


@pytest.fixture(scope="module")
def examples():
    return generate_listops(300, seed=1, settings=SMALL)


def test_labels_equal_a_recursive_evaluator(examples):
    for tokens, label in examples:
        assert label == evaluate(parse(decode(tokens)))
    # Every class and every operator occurs.
    assert {label for _, label in examples} == set(range(NUM_CLASSES))
    text = " ".join(decode(tokens) for tokens, _ in examples)
    assert all(operator in text for operator in ("[MAX", "[MIN", "[MED", "[SM"))


def test_limits_are_respected(examples):
    depths = set()
    for tokens, _ in examples:
        assert tokens.dtype == np.int32 and SMALL.min_length <= len(tokens) <= SMALL.max_length
        assert tokens.min() >= 1 and tokens.max() < len(VOCABULARY)
        tree = parse(decode(tokens))
        depths.add(depth(tree))
        stack = [tree]
        while stack:
            node = stack.pop()
            if not isinstance(node, int):
                assert 2 <= len(node) - 1 <= SMALL.max_args
                stack.extend(node[1:])
    assert max(depths) == SMALL.max_depth and min(depths) >= 1


def test_depth_one_and_a_median_of_an_even_count():
    settings = ListOpsSettings(max_depth=1, min_length=4, max_length=12)
    for tokens, _ in generate_listops(50, seed=0, settings=settings):
        assert depth(parse(decode(tokens))) == 1
    assert evaluate(parse("[MED 1 4 ]")) == 2  # (1 + 4) / 2 rounded down
    assert apply_operator("[MED", [1, 4]) == 2 and apply_operator("[MED", [7, 1, 3]) == 3


def test_deterministic_by_seed(examples):
    again = generate_listops(300, seed=1, settings=SMALL)
    assert all(
        np.array_equal(a, b) and la == lb for (a, la), (b, lb) in zip(examples, again, strict=True)
    )
    other = generate_listops(20, seed=2, settings=SMALL)
    assert any(not np.array_equal(a, b) for (a, _), (b, _) in zip(examples, other, strict=False))


def test_lra_defaults_give_long_sequences():
    settings = ListOpsSettings()
    assert (settings.max_depth, settings.max_args) == (10, 10)
    assert (settings.min_length, settings.max_length) == (500, 2000)
    for tokens, _ in generate_listops(3, seed=0):
        assert 500 <= len(tokens) <= 2000


def test_bad_settings_are_refused():
    with pytest.raises(UsageError, match="min_length <= max_length"):
        ListOpsSettings(min_length=50, max_length=40)
    with pytest.raises(UsageError, match="max_args >= 2"):
        ListOpsSettings(max_args=1)


def test_records_round_trip(tmp_path, examples):
    counts = {"train": 12, "valid": 5, "test": 4}
    metadata = write_listops(tmp_path, counts, seed=3, settings=SMALL)
    assert json.loads((tmp_path / "listops.json").read_text()) == metadata
    train = generate_listops(12, seed=[3, 0], settings=SMALL)
    read = list(read_listops(tmp_path, "train").as_numpy_iterator())
    assert len(read) == 12
    for (tokens, mask, label), (want, want_label) in zip(read, train, strict=True):
        assert tokens.shape == (SMALL.max_length,) and tokens.dtype == np.int32
        assert mask.sum() == len(want) and mask[: len(want)].all()
        np.testing.assert_array_equal(tokens[: len(want)], want)
        assert label == want_label
    tokens, mask, labels = next(iter(read_listops(tmp_path, "test", batch_size=3)))
    assert tuple(tokens.shape) == (3, SMALL.max_length) and tuple(labels.shape) == (3,)
    valid = [t for t, _, _ in read_listops(tmp_path, "valid").as_numpy_iterator()]
    assert not np.array_equal(valid[0], read[0][0])  # the splits draw apart
    with pytest.raises(DataError, match="listops.json is missing"):
        read_listops(tmp_path / "nowhere", "train")
