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
