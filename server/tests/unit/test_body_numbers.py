"""`http/numbers.py`: a body is read by orjson unless it holds a run of 19 or more digits (an integer
that may be past 64 bits), and a large body is searched a slice at a time so that no one search holds
the GIL for long. A run across the seam of two slices must be found like any other."""

from __future__ import annotations

import pytest
from fenecdb_server.http import numbers as N

S = N._SLICE


@pytest.mark.parametrize("at", [0, 1, S - 19, S - 18, S - 10, S - 1, S, 2 * S - 9, 3 * S + 7, 4 * S - 19])
def test_a_run_of_19_digits_is_found_wherever_it_stands(at: int) -> None:
    raw = bytearray(b"x" * (4 * S))
    raw[at:at + 19] = b"7" * 19
    assert N._long_digits(bytes(raw))


@pytest.mark.parametrize("at", list(range(S - 18, S + 1)) + [2 * S - 9, 4 * S - 18])
def test_a_run_of_18_digits_is_not_one_even_across_a_seam(at: int) -> None:
    raw = bytearray(b"x" * (4 * S))
    raw[at:at + 18] = b"7" * 18
    assert not N._long_digits(bytes(raw))


def test_a_large_body_with_a_long_integer_is_refused_and_without_one_is_read() -> None:
    pad = "x" * (3 * S)
    body = f'{{"query":"get jobs","params":["{pad}",9223372036854775808]}}'.encode()
    with pytest.raises(N.OutOfRange):
        N.loads(body, body.decode())
    ok = f'{{"query":"get jobs","params":["{pad}",9223372036854775807]}}'.encode()
    assert N.loads(ok, ok.decode())["params"][1] == 9223372036854775807


def test_the_run_is_found_exactly_where_a_regex_of_19_digits_finds_one() -> None:
    """Random bytes of digits, other ASCII, UTF-8 and the bytes around the digits ('/' and ':'):
    `_long_digits` says what `[0-9]{19}` says, for short bodies and for bodies read in slices."""
    import random
    import re

    rule = re.compile(rb"[0-9]{19}")
    rnd = random.Random(20)
    alphabet = list(b"0123456789/:x ,\"") + list("é".encode())
    for size in [0, 18, 19, 40, 200] * 200 + [S + 5, 2 * S + 30] * 3:
        raw = bytes(rnd.choice(alphabet) if rnd.random() < 0.3 else 0x30 + rnd.randrange(10) for _ in range(size))
        assert N._long_digits(raw) == (rule.search(raw) is not None), raw[:60]
