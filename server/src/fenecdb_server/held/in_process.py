"""Held claims for callers in process: `Database.query(text, params, wait=ms)`.

It answers as a held claim over HTTP does (http.md §8): the claim runs once at once; if it took
nothing (no row, or a `require` not met) it waits in its line, and is answered by the first run
that takes rows, or at its deadline (at most MAX_WAIT_MS) with what its last run answered (`[]`,
`{"affected": 0}`, or the `require` miss raised again). Any other error is raised at once. A
statement that cannot take rows does not wait: a `get` is run once; a `put` or a schema
statement is refused (400 `writes otherwise`), as over HTTP.

The caller's thread blocks on its answer; the lines run on one thread of their own
(on_threads.py), which also makes the retries. A caller interrupted while it waits leaves its
line (a run already in flight still writes: the job it took stays leased until its lease lapses).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from ..errors import FenecError
from .lines import MAX_WAIT_MS, HeldClaim, HeldClaims, Outcome
from .on_threads import ThreadDriver
from .port import Queries

# the caller gives up on an answer this long past the longest wait: only a fault in the lines' thread
# could leave it unanswered, and a caller must never hang on one
SLACK_S = 60.0


@dataclass(frozen=True, slots=True)
class Answer:
    """A run's answer in process: its value, or the error raised."""

    value: object = None
    error: FenecError | None = None

    def give(self) -> object:
        if self.error is not None:
            raise self.error
        return self.value


FAULT = Answer(error=FenecError("io", "internal fault running a held claim"))

Statements = list[tuple[str, object]]


class InProcess:
    """The held claims of one database's in-process callers."""

    def __init__(self, engine: Queries) -> None:
        self.engine = engine
        self.driver: ThreadDriver[Answer] = ThreadDriver(self._run, FAULT)
        self.lines: HeldClaims[Answer] = HeldClaims(engine, self.driver)

    def query(self, text: str, params: object, wait_ms: int) -> object:
        if type(wait_ms) is not int or wait_ms < 0:
            raise FenecError("query", "`wait` is a whole number of ms, 0 or more")
        statements: Statements = [(text, params)]
        claim = self.engine.prepare_hold(statements)
        if not claim.held or wait_ms == 0:
            return self.engine.execute(statements).answers[0]
        seen = self.engine.seq
        first = self.once(statements)
        if first.final or self.lines.closing:
            return first.answer.give()
        got: list[Answer] = []
        answered = threading.Event()

        def on_answer(answer: Answer) -> None:
            got.append(answer)
            answered.set()

        run: Callable[[], Outcome[Answer]] = lambda: self.once(statements)  # noqa: E731
        held = HeldClaim(run, first.answer, on_answer)
        self.driver.soon(lambda: self.lines.hold(claim, held, wait_ms, seen))
        try:
            if not answered.wait(MAX_WAIT_MS / 1000 + SLACK_S):  # no line holds a claim longer
                raise FenecError("io", "a held claim was not answered by its deadline")
        except BaseException:
            self.driver.soon(lambda: self.lines.forget(held))
            raise
        return got[0].give()

    def once(self, statements: Statements) -> Outcome[Answer]:
        """Run the claim: final when it took rows or failed otherwise than a `require` miss."""
        try:
            result = self.engine.execute(statements)
        except FenecError as e:
            return Outcome(e.kind != "unmet", Answer(error=e))
        return Outcome(result.taken > 0, Answer(result.answers[0]))

    def _run(self, held: HeldClaim[Answer]) -> Outcome[Answer]:
        return cast(Callable[[], Outcome[Answer]], held.payload)()

    def close(self) -> None:
        """Answer every held claim with its last answer, stop listening, end the thread."""
        done = threading.Event()

        def shut() -> None:
            self.lines.close()
            done.set()

        self.driver.soon(shut)
        done.wait(SLACK_S)
        self.driver.stop()
