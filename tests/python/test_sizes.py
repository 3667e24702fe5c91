"""opt4store.parse_size: text goes to the C++ ParseSize (the CLI's parser),
checked against the same cases as tests/sizes_test.cc and the CLI test
(tests/size_cases.json); ints pass through after range checks."""

import json
import os

import numpy as np
import pytest

import opt4store
from opt4store import _core

_CASES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                           "size_cases.json")
with open(_CASES_FILE, encoding="utf-8") as _f:
    CASES = json.load(_f)["cases"]
GOOD = [(c[0], c[1]) for c in CASES if c[1] is not None]
BAD = [(c[0], c[2]) for c in CASES if c[1] is None]


def test_the_table_has_both_kinds():
    assert len(GOOD) >= 25 and len(BAD) >= 40


@pytest.mark.parametrize("text,expected", GOOD)
def test_good_size_strings(text, expected):
    assert opt4store.parse_size(text) == expected
    assert _core.parse_size(text) == expected


@pytest.mark.parametrize("text,phrase", BAD)
def test_bad_size_strings(text, phrase):
    with pytest.raises(opt4store.InvalidArgumentError) as e:
        opt4store.parse_size(text, "disk")
    message = str(e.value)
    assert phrase in message
    assert f"disk: '{text}'" in message
    assert isinstance(e.value, ValueError)
    with pytest.raises(opt4store.InvalidArgumentError):
        _core.parse_size(text)


@pytest.mark.parametrize("value", [0, 4096, 2**64 - 1, np.int64(7), np.uint64(2**63)])
def test_ints_pass_through(value):
    assert opt4store.parse_size(value) == int(value)


@pytest.mark.parametrize("value,phrase", [
    (-5, "negative"), (np.int32(-1), "negative"), (2**64, "too large"),
    (True, "expected a size"), (np.bool_(True), "expected a size"), (1.5, "expected a byte count"), (2e9, "expected a byte count"),
    (float("nan"), "expected a byte count"), (b"2GiB", "expected a byte count"),
])
def test_other_values_are_refused(value, phrase):
    with pytest.raises(opt4store.InvalidArgumentError) as e:
        opt4store.parse_size(value, "ram")
    assert phrase in str(e.value) and "ram" in str(e.value)


def test_none_means_not_given():
    assert opt4store.parse_size(None) is None
