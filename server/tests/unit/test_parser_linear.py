"""Hostile statements cost time and memory linear in their size (issue 18, items 2 and 3).

Nothing here reads a clock. Time is counted as work: every Python and C function call made
while a statement is parsed, planned and run (`sys.setprofile` sees both), compared at sizes n
and 4n. Memory is tracemalloc's peak, which sees every allocation of the regex engine too (its
backtracking stack was the 665x of a text literal). The two hostile inputs of the issue failed
here before: the quote attack's pre-check regex kept ~130 bytes per escape (13 MB for 100 KB)
and a text literal took ~800 bytes per byte in the lexer.
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from fenecdb_server import Database, FenecError
from fenecdb_server.plan import compile as C
from fenecdb_server.ql import parser as P

GROWTH = 4.4  # 4x the text may cost 4x the work, and a little for constants


def calls(fn: Callable[[], Any]) -> int:
    """The function calls (Python and C) made while fn runs."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call" or event == "c_call":
            count += 1

    sys.setprofile(profile)
    try:
        fn()
    except FenecError:
        pass
    finally:
        sys.setprofile(None)
    return count


def peak(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
    except FenecError:
        pass
    finally:
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return top


# Each builds a statement whose size grows with n, in the shapes that cost the most per byte.
SHAPES: dict[str, Callable[[int], str]] = {
    "in list": lambda n: "get t where a in [" + ",".join(["1"] * n) + "]",
    "text list": lambda n: "get t where s in [" + ",".join(['"x"'] * n) + "]",
    "escapes": lambda n: 'put t {s: "' + '\\"' * n + '"}',
    "documents": lambda n: "put t [" + ",".join(["{a: 1, s: 'x'}"] * n) + "]",
    "statements": lambda n: "get t;" * n,
    "comment": lambda n: "get t -- " + "(" * n + "\n",
    "case": lambda n: "get t select case " + " ".join(["when a = 1 then 2"] * n) + " end as c",
    "unterminated": lambda n: 'get t where s = "' + '\\"' * n,
    "quote attack": lambda n: "(" * 600 + '"' + '\\"' * n,
    "quote attack in a where": lambda n: "get t where " + "(" * 600 + '"' + '\\"' * n,
    "deep": lambda n: "get t where " + "(" * n + "a" + ")" * n,
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_parse_work_is_linear(shape: str) -> None:
    build = SHAPES[shape]
    small = calls(lambda: P.parse(build(500)))
    large = calls(lambda: P.parse(build(2000)))
    assert large <= GROWTH * small + 200, (shape, small, large)


def test_a_refusal_for_depth_reads_no_further_than_the_limit() -> None:
    """The 513th open bracket stops the lexer: what follows it is never read, however long."""
    seen: list[int] = []
    original = P._Guard.process

    def counting(self: Any, stream: Any) -> Any:
        def counted() -> Any:
            for tok in stream:
                seen[-1] += 1
                yield tok
        return original(self, counted())

    P._Guard.process = counting  # type: ignore[method-assign]
    try:
        for n in (10_000, 40_000):
            seen.append(0)
            with pytest.raises(FenecError, match="too deep"):
                P.parse("get t where " + "(" * 600 + '"' + '\\"' * n)
    finally:
        P._Guard.process = original  # type: ignore[method-assign]
    assert seen == [3 + P.MAX_DEPTH + 1] * 2  # `get`, `t`, `where`, then the brackets


def test_the_quote_attack_holds_no_memory_per_escape() -> None:
    # 100 KB: the old pre-check's regex held 13 MB here, and rescanned to the end at every quote
    for text in ("(" * 600 + '"' + '\\"' * 50_000, "get t where " + "(" * 600 + '"' + '\\"' * 50_000):
        assert peak(partial(P.parse, text)) < 1_000_000


def test_an_unterminated_text_is_refused_in_constant_memory() -> None:
    for n in (50_000, 200_000):
        text = 'get t where s = "' + '\\"' * n
        assert peak(partial(P.parse, text)) < 1_000_000, n  # was ~130 bytes an escape


@pytest.mark.parametrize("body", ["a" * 400_000, '\\"' * 200_000, "\\n" * 200_000, "é" * 200_000])
def test_a_text_literal_costs_a_small_multiple_of_its_size(body: str) -> None:
    text = 'put jobs {payload: "' + body + '"}'
    size = len(text.encode())
    assert peak(partial(P.parse, text)) < 6 * size  # was ~800x: 3.4 GB for 5 MB


def test_in_a_list_of_literals_a_row_is_one_lookup() -> None:
    """`x in [1, 1, ...]` compared each row with every item; now with none of them."""
    db = Database()
    db.query("create collection t (a int, s text, f float)")
    db.query("put t [{a: 5, s: 'q', f: 0.5}, {a: 7, s: 'r', f: 1.0}, {a: null}]")
    compared = 0
    original = C.eq

    def counting(a: Any, b: Any) -> bool:
        nonlocal compared
        compared += 1
        return original(a, b)

    C.eq = counting
    try:
        for n in (1_000, 4_000):
            ints = ",".join(str(i) for i in range(10, 10 + n))
            texts = ",".join(f"'x{i}'" for i in range(n))
            compared = 0
            assert db.query(f"get t where a in [{ints}, 7] select a") == [{"a": 7}]
            assert db.query(f"get t where s in [{texts}, 'q'] select s") == [{"s": "q"}]
            assert compared == 0, (n, compared)
    finally:
        C.eq = original
    # kinds still meet as `=` says: an int list finds a float row, null finds nothing but null
    assert db.query("get t where f in [1, 2] select f") == [{"f": 1.0}]
    assert db.query("get t where a in [null] select id") == [{"id": 3}]
    assert db.query("get t where a in [true, 5.0] select a") == [{"a": 5}]


def test_planning_and_running_a_long_list_is_linear() -> None:
    db = Database()
    db.query("create collection t (a int @hash, b int)")
    db.query("put t [" + ",".join(f"{{a: {i}, b: {i}}}" for i in range(50)) + "]")

    def run(n: int) -> None:
        items = ",".join(str(i % 100) for i in range(n))
        db.query(f"get t where a in [{items}] and b in [{items}] count")

    small, large = calls(lambda: run(500)), calls(lambda: run(2000))
    assert large <= GROWTH * small + 200, (small, large)


def test_the_statement_cache_is_bounded_by_characters() -> None:
    """20 distinct 10 MB statements stayed in the cache (450 MB held); a long text is now parsed
    each time it comes, and the cache as a whole keeps at most CACHE_CHARS of text."""
    from fenecdb_server.engine import catalog as D

    db = Database()
    db.query("create collection t (s text)")
    tracemalloc.start()
    try:
        for i in range(20):
            db.query(f'get t where s = "{i}' + "x" * 200_000 + '"')
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 1_000_000  # was 20 x (the text as the key + its literal in the AST): 8 MB
    for i in range(200):  # texts under CACHE_TEXT_MAX are kept, within the characters budget
        db.query(f'get t where s = "{i}' + "y" * 60_000 + '"')
    assert db.engine.texts.chars <= D.CACHE_CHARS and db.engine.catalog.plan_chars <= D.CACHE_CHARS
    assert sum(len(t) for t in db.engine.texts.texts()) == db.engine.texts.chars


# -- a run of literals in a list is read in tokens of at most 1 024 items (grammar.lark CONST_OPEN) --

def _items_as_written(n: int) -> list[str]:
    kinds = ["7", "-3", "2.5", "1_000", "-  4", "1e3", '"a\\"b"', "'c'", "true", "FALSE", "null", '"9"']
    return [kinds[i % len(kinds)] for i in range(n)]


@pytest.mark.parametrize("n", [1, 2, 1023, 1024, 1025, 2048, 2049, 3000])
@pytest.mark.parametrize("odd_at", [None, 0, 1023, 1024, -1])
def test_a_list_of_literals_reads_as_the_same_list_read_item_by_item(n: int, odd_at: int | None) -> None:
    """The fast tokens give the values the expression rules give (each item in parentheses takes
    the slow road), across the seams between tokens, with a non-literal anywhere in the list."""
    items = _items_as_written(n)
    if odd_at is not None and -n <= odd_at < n:
        items[odd_at] = "b + 1"
    fast = P.parse("get t where a in [" + ", ".join(items) + "]")[0]
    slow = P.parse("get t where a in [" + ", ".join(f"({i})" for i in items) + "]")[0]
    assert fast == slow
    assert len(fast.where.items) == n  # type: ignore[union-attr]


def test_no_token_of_a_long_list_holds_more_than_1024_items() -> None:
    """One regex pass over a megabyte of list held the interpreter 38 ms (nothing else answered)."""
    text = "get t where a in [" + ",".join(["1"] * 500_000) + "]"
    longest = max(len(t) for t in P._LARK.lex(text))
    assert longest <= 2 * 1024 + 2


def test_equal_literals_of_a_long_list_share_one_node() -> None:
    where = P.parse("get t where a in [" + ",".join(["1", "1.0", "true"] * 10_000) + "]")[0].where
    assert len({id(i) for i in where.items if type(i.value) is not float}) == 2  # type: ignore[union-attr]
    assert [type(i.value) for i in where.items[:3]] == [int, float, bool]  # type: ignore[union-attr]


@pytest.mark.parametrize("text, alone, message", [
    ("[1, 99999999999999999999]", "99999999999999999999", "integer 99999999999999999999 is out of range (64-bit)"),
    ("[1, -9223372036854775809]", "-9223372036854775809", "integer -9223372036854775809 is out of range (64-bit)"),
    ("[1e999, 1]", "1e999", "number 1e999 is out of range"),
])
def test_a_long_list_refuses_what_a_literal_refuses(text: str, alone: str, message: str) -> None:
    with pytest.raises(FenecError) as got:
        P.parse(f"get t where a in {text}")
    with pytest.raises(FenecError) as one:
        P.parse(f"get t where a = {alone}")
    assert got.value.message == message == one.value.message


def test_closed_lists_of_literals_do_not_lend_depth_to_what_follows() -> None:
    """A list read as one token still opens a bracket for the nesting limit: 600 closed `[1]` before
    600 `(` must not let the parens through (the `]` of each would have been counted alone)."""
    text = "get t where a = " + "[1] + " * 600 + "(" * 600 + "1" + ")" * 600
    with pytest.raises(FenecError) as e:
        P.parse(text)
    assert "too deep" in e.value.message
