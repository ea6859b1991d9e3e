"""A request's `Work` run by the engine, and the answer made of what it did: on the loop when it
can, else in a worker thread (`OffLoop`); a held claim's runs again; a write's answer once its
loop turn's fdatasync made it durable (`--sync always`, durable.py).

A large request does not stop the others: a request whose statement text is not parsed yet and
over OFF_LOOP_TEXT, or whose run would pass LOOP_ROWS or wait for the lock, is parsed, prepared and
run in a worker thread while the loop goes on answering (server/README.md, Limits, has the stall
it costs the loop). A scoped token's requests run under its policy scope; the server token, or
anyone on an open server, runs with no scope (everything).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import gc_policy
from ..database import Busy, Deferred, Result, Rows
from ..errors import FenecError
from ..held import HeldClaim, Outcome
from ..held.port import Claim
from . import errors as E
from .auth import Auth
from .bodies import PIECE_ROWS, pieces, render
from .config import Config
from .durable import TurnSync
from .exchange import Answer
from .intake import Work
from .limits import LOOP_ROWS

if TYPE_CHECKING:
    from ..database import Database

log = logging.getLogger("fenec.http")

BEARER = [(b"www-authenticate", b"Bearer")]


class OffLoop(Exception):
    """A run on the loop put back before it wrote anything: it would pass LOOP_ROWS, or wait for
    the lock. Its caller runs it again in a worker thread (`run_off_loop`)."""


class Runner:
    """Runs `Work` against the database under the command line's ceilings."""

    def __init__(self, db: Database, config: Config, auth: Auth) -> None:
        self.db = db
        self.config = config
        self.auth = auth
        self.turns: TurnSync | None = None  # --sync always: set at start, on the loop
        # large requests (OFF_LOOP_*): two threads, as the GIL lets only one of them run at a time
        self.large = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fenec-large")

    def hold_of(self, work: Work) -> Claim | None:
        """The held claim of a request sent to wait (None: its statements are not a claim that
        waits); a scoped token's is held and woken under its scope (http.md §8.9)."""
        scoped = {"scope": work.caller.scope} if work.caller.scoped else {}
        claim = self.db.prepare_hold(work.statements, **scoped)
        if not claim.held:
            return None
        work.held_again()
        return claim

    def run_held(self, held: HeldClaim[Answer]) -> Outcome[Answer] | Awaitable[Outcome[Answer]]:
        """Run a held claim again: on the loop at once when it can (no task for the run), else
        in a worker thread."""
        work = held.payload
        assert isinstance(work, Work)
        expired = self.auth.recheck(work.caller)
        if expired is not None:  # every run asks the token again (http.md §8.9): nothing runs
            return Outcome(True, Answer(E.UNAUTHORIZED, E.body(expired), list(BEARER)))
        if work.large or work.bulk:
            return self._held_off_loop(work)
        try:
            outcome, kind, owed = self.run_here(work, held=True, loop=True)
        except OffLoop:
            return self._held_off_loop(work)
        if owed:
            return self._held_synced(owed, work, outcome, kind)
        return outcome

    async def _held_off_loop(self, work: Work) -> Outcome[Answer]:
        outcome, _kind = await self.run_off_loop(work, held=True)
        return outcome

    async def _held_synced(self, owed: int, work: Work, outcome: Outcome[Answer], kind: str) -> Outcome[Answer]:
        return (await self.synced(owed, work, outcome, kind))[0]

    async def run_off_loop(self, work: Work, *, held: bool) -> tuple[Outcome[Answer], str]:
        """`run_here` in a worker thread, for a long statement not parsed yet (OFF_LOOP_TEXT), a large
        body (OFF_LOOP_BODY) or a run the loop put back (`OffLoop`), under the command line's ceilings. A
        write there waits for its own fsync by group commit (storage/sync.py), not for the loop's:
        off the loop's thread `TurnSync.deferred` defers nothing, so it owes none."""
        def run() -> tuple[Outcome[Answer], str]:
            outcome, kind, _owed = self.run_here(work, held=held)
            return outcome, kind
        return await asyncio.get_running_loop().run_in_executor(self.large, partial(gc_policy.held_off, run))

    def run_here(self, work: Work, *, held: bool, loop: bool = False) -> tuple[Outcome[Answer], str, int]:
        """Run the work once, in this thread: (outcome, metrics kind, the log ticket its answer
        owes a sync, 0 for none). For a held claim a `require` miss is "took nothing" (http.md
        §8.3), not the end of the hold. It never awaits, so a held claim's run needs no task of
        its own; under --sync always on the loop its write's fdatasync is owed (`synced`) rather
        than waited for here: one per loop turn for all its writes (durable.py). On the `loop`, a
        run that would pass LOOP_ROWS or wait for the lock raises `OffLoop`, having written nothing."""
        # only a scoped token passes a scope: the server token runs as it always did
        scope = work.caller.scope if work.caller.scoped else None
        owed: Deferred | None = None
        try:
            if self.turns is not None:
                with self.turns.deferred() as owed:
                    result = self._execute(work, scope, loop)
            else:
                result = self._execute(work, scope, loop)
        except Busy:
            raise OffLoop() from None
        except FenecError as e:
            if loop and e.kind == "toolarge" and self._loop_tighter():
                raise OffLoop() from None
            status, body = E.answer(e, batch=work.block)
            kind = "write" if e.kind in ("unmet", "exists", "conflict", "io") else "read"
            return Outcome(not (held and e.kind == "unmet"), Answer(status, body)), kind, _ticket(owed)
        except RecursionError:
            return Outcome(True, Answer(E.BAD_REQUEST, E.body("expression too deep"))), "read", _ticket(owed)
        except Exception:
            log.exception("internal fault")
            return Outcome(True, Answer(E.FAULT, E.body(E.INTERNAL))), "read", _ticket(owed)
        outcome, kind = self._outcome(work, result, held)
        return outcome, kind, _ticket(owed)

    def _loop_tighter(self) -> bool:
        """Whether the loop's bound is below the command line's: a refusal there is not the last word."""
        config = self.config
        rows, writes = config.max_answer_rows, config.max_write_rows
        return not rows or rows > LOOP_ROWS or not writes or writes > LOOP_ROWS

    def _execute(self, work: Work, scope: Any, loop: bool = False) -> Result:
        """`db.execute` of the work (a direct call: its arguments named, no dict of them), bounded by
        the command line's ceilings, and on the `loop` by LOOP_ROWS too, without waiting for the
        lock. A body over OFF_LOOP_BODY (thousands of rows at once) runs with the cycle collector
        held off, and what it stored is frozen after (gc_policy.py)."""
        config = self.config
        rows, writes = config.max_answer_rows, config.max_write_rows
        if loop:
            rows = LOOP_ROWS if not rows or rows > LOOP_ROWS else rows
            writes = LOOP_ROWS if not writes or writes > LOOP_ROWS else writes
        if not work.bulk:
            return self.db.execute(work.statements, block=work.block, idempotency=work.idem, scope=scope,
                                   max_rows=rows, max_writes=writes, nowait=loop, pieces=PIECE_ROWS)
        result = gc_policy.held_off(partial(self.db.execute, work.statements, block=work.block,
                                             idempotency=work.idem, scope=scope, max_rows=rows,
                                             max_writes=writes, nowait=loop))
        if result.wrote:
            gc_policy.after_bulk()
        return result

    def _outcome(self, work: Work, result: Result, held: bool) -> tuple[Outcome[Answer], str]:
        kind = "write" if result.wrote else "read"
        stored = result.replayed
        if stored is not None:
            # the stored answers, rendered as the first answer was (an older file's key keeps the bytes)
            status, body = stored.raw if stored.raw is not None else render(work.block, stored.answers or [])
            return Outcome(True, Answer(status, body, [(b"idempotent-replayed", b"true")])), kind
        headers = []
        if result.wrote or work.block:
            headers.append((b"fenec-seq", str(result.seq).encode()))
        took = result.taken > 0
        answers = result.answers
        if not work.block and (type(answers[0]) is Rows or type(answers[0]) is list and len(answers[0]) > PIECE_ROWS):
            answer = Answer(E.OK, b"", headers)
            answer.parts = pieces(answers[0])
            return Outcome(took or not held, answer), kind
        status, body = render(work.block, answers)
        return Outcome(took or not held, Answer(status, body, headers)), kind

    async def synced(self, owed: int, work: Work, outcome: Outcome[Answer], kind: str) -> tuple[Outcome[Answer], str]:
        """The outcome once the record the request appended is durable: its loop turn's
        fdatasync (durable.py); the log's 500 if that fdatasync fails."""
        if self.turns is not None:
            try:
                await self.turns.durable(owed)
            except FenecError as e:
                status, body = E.answer(e, batch=work.block)
                return Outcome(True, Answer(status, body)), "write"
        return outcome, kind


def _ticket(owed: Deferred | None) -> int:
    return owed.ticket if owed is not None else 0
