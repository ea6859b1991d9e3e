"""Statements run one after another on the catalog, under the lock the engine holds: the reads
of a read-only block, the statements of a write block, one statement, and what a failure among
them is answered.

A write block is all or nothing: a statement that fails rolls the whole block back (execute.py's
`Block`) before its error goes on up, with the index of the statement that failed.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import values as V
from ..errors import FenecError
from ..pacing import PACE_ROWS, hand_over
from ..plan.compile import Env
from ..policy import Scope
from ..ql import ast as A
from .catalog import Catalog
from .controls import run_control, show_queues
from .execute import Block, run_del, run_get, run_set, too_many_rows, too_many_writes
from .parse_cache import Parsed
from .puts import run_put
from .schedules import run as run_schedule
from .schema_changes import run_create, run_create_index, run_drop
from .scoped import run as run_scoped

log = logging.getLogger("fenecdb.engine")


def run_reads(catalog: Catalog, parsed: list[Parsed], block: bool, scope: Scope | None, ready: dict | None,
              rows: int = 0, pieces: int = 0) -> list:
    answers = []
    for i, (text, stmt, params) in enumerate(parsed):
        env = Env(params, V.Ts(catalog.now()))
        env.rows = rows
        try:
            if type(stmt) is A.ShowSchedules:
                answers.append(run_schedule(catalog, text, stmt, Block(), scope))
                continue
            if scope is not None:
                env.claims = scope.claims
                answers.append(run_scoped(catalog, text, stmt, env, None, scope))
                continue
            if type(stmt) is A.ShowQueues:
                answers.append(show_queues(catalog))
                continue
            answers.append(run_get(catalog, catalog.prepared(text, stmt, ready), env, pieces))
        except BaseException as e:
            raise answered(e, block, i, text, "reading") from None
    return answers

def run_block(catalog: Catalog, parsed: list[Parsed], blk: Block, scope: Scope | None, ready: dict | None,
               rows: int = 0, writes: int = 0) -> list:
    answers = []
    for i, (text, stmt, params) in enumerate(parsed):
        if i % PACE_ROWS == 0 and i:
            hand_over()
        try:
            answers.append(run_one(catalog, text, stmt, params, blk, scope, ready, rows, writes))
        except BaseException as e:
            # A fault in the engine (a bug, a MemoryError) must never leave a half-applied
            # block behind: put back, logged, and answered as a fault; KeyboardInterrupt,
            # SystemExit: put back, then on their way.
            blk.rollback()
            raise answered(e, True, i, text, "running") from None
    return answers

def run_one(catalog: Catalog, text: str, stmt: A.Statement, params: list, blk: Block, scope: Scope | None,
             ready: dict | None, rows: int = 0, writes: int = 0) -> Any:
    """One statement of a write block (a set or del adds the rows it took to `blk.taken`)."""
    env = Env(params, V.Ts(catalog.clock()))
    if rows or writes:
        env.rows = rows
        env.writes = writes
    t = type(stmt)
    if scope is not None:
        env.claims = scope.claims
        if isinstance(stmt, A.SCHEDULE_STATEMENTS):
            return run_schedule(catalog, text, stmt, blk, scope)
        ans = run_scoped(catalog, text, stmt, env, blk, scope)
    elif t is A.Set:
        ans = run_set(catalog, catalog.plans.get((text, 0)) or catalog.prepared(text, stmt, ready), env, blk)
    elif t is A.Del:
        ans = run_del(catalog, catalog.prepared(text, stmt, ready), env, blk)
    elif t is A.Get:
        ans = run_get(catalog, catalog.prepared(text, stmt, ready), env)
    elif t is A.Put:
        ans = run_put(catalog, catalog.prepared(text, stmt, ready), env, blk)
    elif isinstance(stmt, A.CreateCollection):
        ans = run_create(catalog, stmt, blk)
    elif isinstance(stmt, A.DropCollection):
        ans = run_drop(catalog, stmt, blk)
    elif isinstance(stmt, A.CreateIndex):
        ans = run_create_index(catalog, stmt, blk)
    elif isinstance(stmt, A.SCHEDULE_STATEMENTS):
        ans = run_schedule(catalog, text, stmt, blk, None)
    elif isinstance(stmt, A.QueueControl):
        ans = run_control(catalog, stmt, blk)
    elif isinstance(stmt, A.ShowQueues):
        ans = show_queues(catalog)
    else:
        raise FenecError("query", f"cannot run {t.__name__}")
    return ans


def bounded(answers: list, rows: int, writes: int, written: int) -> None:
    """Refuse answers past `rows` a statement, or `written` rows past `writes`, as the statements
    themselves refuse (execute.py), for the paths that pick on their own (a token's: scoped.py)."""
    if writes and written > writes:
        raise too_many_writes(writes)
    if rows:
        for answer in answers:
            if type(answer) is list and len(answer) > rows:
                raise too_many_rows(rows)


def answered(e: BaseException, block: bool, i: int, text: str, doing: str) -> BaseException:
    """What a statement's failure is answered: a `FenecError` with the block's index (`unmet:`
    prefixed in a block), too deep as 400, any other fault logged and answered 500."""
    at = i if block else None
    if isinstance(e, FenecError):
        if block:
            e.at = i
            if e.kind == "unmet" and not e.message.startswith("unmet: "):
                e.message = "unmet: " + e.message
                e.args = (e.message,)
        return e
    if isinstance(e, RecursionError):
        return FenecError("query", "expression too deep", at=at)
    if isinstance(e, Exception):
        log.exception("internal error %s %r", doing, text[:200])
        return FenecError("io", f"internal error: {type(e).__name__}", at=at)
    return e
