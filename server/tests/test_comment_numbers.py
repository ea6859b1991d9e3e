"""The code's comments state invariants and reasons, never measurements or their history.

A number measured on one machine on one day goes stale in the comment that quotes it, and the
history of a change (its session, its round of work, its commit, what it "was") is the commit
log's: both live in `bench/README.md`, with the command that measured them, and a comment that
needs one points there. This reads every comment and docstring of the server package (and the
grammar's `//` comments) for what only a measurement or its history says: a duration under a
millisecond, a count of instructions, a rate, what a run took or a thing was, a session or round
number, a commit id. A limit or a setting is not a measurement: `30 000 ms`, "the 5 ms switch
interval" and "1 MiB" stay.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_compiled_names import PACKAGE, comments

MEASURED = re.compile(r"""
    \d[\d.,\u202f]*\s?(?:µs|us|ns)\b                         # a duration under a millisecond
  | \d[\d.,]*\s?[kKM]?\s?instructions\b                      # a count of instructions
  | \d[\d.,\u202f]*\s?[kKM]?\s?(?:jobs|requests|writes|claims|rows|ops)/s\b   # a rate
  | \b(?:took|was|were|cost|costs)\s(?:about\s)?\d[\d.,]*\s?(?:µs|ms|s|%|[kKM]\b)  # what a run took, a thing was
  | \bsessions?\s\d+ | \brounds?\s(?:of\s)?\d+               # a session's or a round's number
  | (?<![\w.+-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w.+])   # a commit id
""", re.X)


def grammar_comments(path: Path) -> list[tuple[int, str]]:
    return [(n, line.strip()[2:]) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if line.strip().startswith("//")]


def measurements(parts: list[tuple[int, str]]) -> list[str]:
    found = []
    for line, text in parts:
        for i, row in enumerate(text.splitlines()):
            found += [f"{line + i}: {m.group(0)!r}" for m in MEASURED.finditer(row)]
    return found


def test_no_comment_quotes_a_measurement_or_its_history() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*")):
        parts = comments(path) if path.suffix == ".py" else grammar_comments(path) if path.suffix == ".lark" else []
        if measurements(parts):
            found[path.relative_to(PACKAGE).as_posix()] = measurements(parts)
    assert not found, f"measurements in comments (move them to bench/README.md): {found}"


def test_the_check_sees_a_measurement_and_lets_a_limit_be() -> None:
    said = [(1, "the head read saves 6 µs of about 100 µs"), (2, "callgrind: 120 k instructions a claim"),
            (3, "(one token of a megabyte took 38 ms)"), (4, "measured in session 18, round 3"),
            (5, "since commit 07b0b33"), (6, "it was 1.4 ms"), (7, "64 000 jobs/s at 8 workers")]
    assert {found.split(":")[0] for found in measurements(said)} == {str(n) for n in range(1, 8)}
    kept = [(1, "a Fenec-Wait past 30 000 waits 30 000 ms"), (2, "the interpreter's 5 ms switch interval"),
            (3, "a 1 MiB chunk, 0xdeadbeef, `1.2345678901234568e+22`"), (4, "at most 1024 items; 500 regex passes")]
    assert measurements(kept) == []
