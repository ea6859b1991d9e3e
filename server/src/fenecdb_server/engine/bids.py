"""Who gets the job: the engine half of held claims that bid (http.md §8.7, seed "Who gets the job").

A held claim whose `order` depends on the request itself — `order distance(pickup, $1) limit 1`,
each courier its own point, or any order key reading a parameter or a token claim — ranks a job
its own way, so it is a line of its own and the job goes to the claim that ranks it first. To
know which, every such line looks when a row is written, and bids the rank of the best row it
would take. This module makes those looks:

* `profile(hold)`: what a line needs to bid — its one `set`/`del`, the collection it picks from
  (`home`), whether its order is its own (`own`), and whether it may look among the rows written
  since it last looked instead of reading the collection (`incremental`: one `set`/`del`; reads
  beside it in a batch do not change what it takes).
* `look_all(asks)`: one pass, under one read lock (its caller's), over many lines. Each line examines the
  ids written since the change it last looked at (`written_since`: held/written.py, shared by the lines
  that last looked at the same change) plus the rows it matched last time and did not get, runs
  its filter on just those rows and ranks the matches by its order; a line that cannot look
  that way (no history that old, a look due to the clock) reads the collection as its claim
  would (`pick`, one row). The cost is what was written, not what each claim would read.

Who bids, when, and who wins is the held package's (`held/bidding.py`); this module only reads rows.

Ranks compare key by key in FenecQL's total order (a `desc` key reversed); among one line's
rows, equal ranks go to the lowest id, as the claim's own run orders them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import total_ordering
from typing import TYPE_CHECKING, Any

from .. import values as V
from ..plan.compile import Env
from ..ql import ast as A
from ..ql.ast import mentions
from . import scoped
from .access import pick

if TYPE_CHECKING:
    from .catalog import Catalog
    from .holds import HeldStatements


@total_ordering
class Desc:
    """A sort key compared the other way round (an order key with `desc`)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Desc) and self.key == other.key

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Desc):
            return NotImplemented
        return bool(other.key < self.key)

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Desc({self.key!r})"


def _own_key(e: A.Expr) -> bool:
    return mentions(e, lambda n: isinstance(n, (A.Param, A.Claim)))


class Profile:
    """What a held line needs in order to bid."""

    __slots__ = ("db", "home", "own", "incremental", "text", "stmt", "params", "scope", "filter_key",
                 "filter_id")

    def __init__(self, db: Catalog, home: str, own: bool, incremental: bool, text: str, stmt: Any, params: list,
                 scope: Any) -> None:
        self.db = db  # the engine whose rows it ranks
        self.home = home
        self.own = own
        self.incremental = incremental
        self.text = text
        self.stmt = stmt
        self.params = params
        self.scope = scope  # a token's scope: its rules are part of the filter, its claims bound
        # lines whose filters are one (parameters and rules bound) share its verdict on a row in
        # a pass: `filter_id` names that filter, set by whoever keeps the lines (None: not shared)
        self.filter_key: Any = None
        self.filter_id: int | None = None


def profile(hold: HeldStatements) -> Profile | None:
    """The bidding profile of a `HeldStatements` (holds.py), or None for one this module cannot read."""
    writes = getattr(hold, "_writes", None)
    if not writes:
        return None
    text, stmt, params = writes[0]
    single = len(writes) == 1
    own = single and any(_own_key(k.expr) for k in stmt.order)
    prof = Profile(hold.db, stmt.collection, own, single, text, stmt, params, getattr(hold, "scope", None))
    key = getattr(hold, "line_key", None)
    if single and type(key) is tuple and len(key) == 1 and type(key[0]) is tuple:
        k = key[0]
        prof.filter_key = (type(stmt).__name__, k[0], k[1], *k[3:])  # all but the order
    return prof


class Look:
    """One line's look: the best row it would take and its rank, or nothing (`rid` None).
    `matched` is every row it matched among those it examined (None after a whole look)."""

    __slots__ = ("rank", "rid", "matched", "failed")

    def __init__(self, rank: Any = None, rid: int | None = None, matched: set[int] | None = None,
                 failed: bool = False) -> None:
        self.rank = rank
        self.rid = rid
        self.matched = matched
        self.failed = failed  # the look raised: the run will answer the client its error


def rank_of(order: list, row: dict, env: Env) -> tuple:
    out = []
    for fn, desc in order:
        k = V.sort_key(fn(row, env))
        out.append(Desc(k) if desc else k)
    return tuple(out)


class Ask:
    """A line asking to look: its profile, the change it last looked at (None: look at the
    whole collection) and the rows it matched then and did not get."""

    __slots__ = ("profile", "seen", "extra")

    def __init__(self, prof: Profile, seen: int | None, extra: set[int]) -> None:
        self.profile = prof
        self.seen = seen
        self.extra = extra


def look_all(asks: list[Ask], written_since: Callable[[str, int], set[int] | None]) -> list[Look]:
    """One pass, under the read lock its caller holds, of lines of one engine: each line's look
    (the caller reads the change the pass saw under the same lock)."""
    if not asks:
        return []
    db = asks[0].profile.db
    now = V.Ts(db.now())
    since: dict[tuple[str, int], set[int] | None] = {}
    verdicts: dict[tuple[int, int], bool] = {}
    out = []
    for ask in asks:
        prof = ask.profile
        ids: set[int] | None = None
        if ask.seen is not None and prof.incremental:
            key = (prof.home, ask.seen)
            if key in since:
                ids = since[key]
            else:
                ids = since[key] = written_since(prof.home, ask.seen)
        try:
            out.append(_look(db, prof, ids, ask.extra, now, verdicts))
        except Exception:
            out.append(Look(failed=True))
    return out


def _look(db: Catalog, prof: Profile, ids: set[int] | None, extra: set[int], now: V.Ts,
          verdicts: dict[tuple[int, int], bool]) -> Look:
    coll = db.collections.get(prof.home)
    if coll is None:
        return Look(failed=True)  # run it: the client is answered its 404
    if prof.scope is None:
        q = db.prepared(prof.text, prof.stmt).query
        env = Env(prof.params, now)
    else:  # the statement as the token runs it: its rules ANDed into the filter
        q = scoped.plan_for(db, prof.text, prof.stmt, prof.scope).p.query
        env = Env(prof.params, now, prof.scope.claims)
    if ids is None:
        got = pick(coll, q, env, need_override=1)
        if not got:
            return Look(matched=set())
        first = got[0]
        return Look(rank_of(q.order, first, env), first["id"], None)
    if extra:
        ids = ids | extra
    rows = coll.rows
    filt = q.filter
    order = q.order
    best: tuple | None = None
    matched: set[int] = set()
    fid = prof.filter_id
    for rid in ids:
        row = rows.get(rid)
        if row is None:
            continue
        if filt is not None:
            if fid is None:
                ok = filt(row, env)
            else:
                ok = verdicts.get((fid, rid))
                if ok is None:
                    ok = verdicts[(fid, rid)] = bool(filt(row, env))
            if not ok:
                continue
        matched.add(rid)
        key = (rank_of(order, row, env), rid)
        if best is None or key < best:
            best = key
    if best is None:
        return Look(matched=matched)
    return Look(best[0], best[1], matched)
