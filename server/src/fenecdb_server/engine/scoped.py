"""Statements run under a token's rules (access.md §4). The unscoped path (execute.py) never
tests a rule; a scoped statement comes here instead.

* `authorize` — before anything runs (a batch is authorized statement by statement first):
  `$jwt.` in the client's text (400), schema statements (403), a collection without a grant
  (404, as if it did not exist), a missing grant (403), append-only, a put naming `id`,
  `expired()` without the `expired` grant.
* Reads: the union of the token's read filters is ANDed into the statement's `where` (so into
  its `count` too), and the rewritten statement runs as any other; the claims bind through
  `Env(claims=...)`, so the prepared form is cached per (text, the rules applied), not per token.
* `set`: the rows it may touch are the statement's filter AND the union of its update rules'
  USING terms. Each candidate, in the statement's order, is rewritten and judged before anything
  is written: the changed fields, and one update rule that admits the row before (USING), across
  (its `new.` terms) and after (WITH CHECK) — else 403 for the whole statement. With `returning`,
  a candidate whose written form the token could not read is passed over and the pick goes on
  to the next row in order (§4.4).
* `del`: the filter AND the delete rules' filters (AND the read rules' when it returns rows).
* `put`: each document must fall inside an insert rule, the fields the rule pins filled in when
  left out; an upsert's existing row is judged as an update.
* A unique clash tells a scoped token the field only.
* An error never shows a row the token may not read: the rules' terms come before the
  statement's in every filter, so a get (and the read rules' rows) never works the statement's
  expressions out on such a row; a set, del or upsert works its filter, order and values out on
  the rows its update or delete rules admit, and an error raised on one the read rules keep out
  is answered with its status and a withheld message (`run`, `FenecError.row`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import convert as C
from .. import values as V
from ..errors import FenecError, Overflow
from ..plan.compile import Ctx, Env, compile_expr, guard_missing
from ..plan.planner import and_terms
from ..plan.schema import no_collection
from ..policy import Scope
from ..policy.rules import Rule
from ..ql import ast as A
from ..ql.ast import mentions
from .access import pick
from .collection import Collection
from .controls import run_control, show_queues
from .execute import Block, answer_of, apply_entries, check_required, run_del, run_get
from .prepare import Prepared, prepare
from .puts import PutRules, run_put
from .schedules import authorize as authorize_schedule

if TYPE_CHECKING:
    from .catalog import Catalog

Fn = Callable[[Any, Any], bool]
SCHEMA_STATEMENTS = (A.CreateCollection, A.DropCollection, A.CreateIndex)
_UNIQUE = re.compile(r"`([^`]*)` is @unique")


def denied(message: str) -> FenecError:
    return FenecError("denied", message)


def _is_expired(n: A.Expr) -> bool:
    return isinstance(n, A.Call) and n.name == "expired"


def _names_claim(node: Any) -> bool:
    return mentions(node, lambda n: isinstance(n, A.Claim))


# ---------------------------------------------------------------- before anything runs


def authorize(stmt: A.Statement, scope: Scope) -> None:
    """The refusals a statement's text and the token's grants decide alone."""
    if isinstance(stmt, A.ShowQueues):
        return  # answers only the collections the token sees
    if isinstance(stmt, SCHEMA_STATEMENTS):
        raise denied("a scoped token reads and writes documents; it changes no schema")
    if isinstance(stmt, A.SCHEDULE_STATEMENTS):
        return authorize_schedule(stmt, scope)
    if _names_claim(stmt):
        raise FenecError("query", "`$jwt.` claims are read only inside access rules")
    coll = stmt.collection  # type: ignore[attr-defined]
    g = scope.grants(coll)
    if not g.visible:  # a hint names only collections the token's own rules name (its whoami shows them)
        raise no_collection(coll, {r.collection for r in scope.rules if r.collection != "*"})
    if isinstance(stmt, A.QueueControl):
        if not g.has("control"):
            raise denied(f"this token may not {stmt.verb} queues of `{coll}`: that takes the `control` grant")
    elif isinstance(stmt, A.Get):
        if not g.has("read"):
            raise denied(f"this token may not read `{coll}`")
    elif isinstance(stmt, (A.Set, A.Del)):
        if g.append_only:
            raise denied(f"`{coll}` is append-only: a scoped token only inserts there")
        if isinstance(stmt, A.Set) and not g.has("update"):
            raise denied(f"this token may not update rows of `{coll}`")
        if isinstance(stmt, A.Del) and not g.has("delete"):
            raise denied(f"this token may not delete rows of `{coll}`")
        if not g.has("read"):
            raise denied(f"this token may not read `{coll}`")
    elif isinstance(stmt, A.Put):
        if not g.has("insert"):
            raise denied(f"this token may not insert into `{coll}`")
        if stmt.documents is not None and any(e.target.name == "id" and not e.target.keys
                                              for d in stmt.documents for e in d):
            raise _put_id()
        if stmt.else_patch is not None:
            if g.append_only:
                raise denied(f"`{coll}` is append-only: a scoped token only inserts there")
            if not g.has("update"):
                raise denied(f"this token may not update rows of `{coll}`")
    where = getattr(stmt, "where", None)
    if mentions(where, _is_expired) and not g.has("expired"):
        raise denied(f"reading rows past their @ttl with expired() takes the `expired` grant on `{coll}`")


def _put_id() -> FenecError:
    return denied("a scoped token puts new documents, without `id`: one with an `id` could overwrite a row "
                  "it cannot see")


# ---------------------------------------------------------------- compiled rules


def _union(rules: tuple[Rule, ...], attr: str = "filter") -> A.Expr | None:
    """The rows any of the rules admits; None = every row."""
    exprs = []
    for r in rules:
        e = getattr(r, attr)
        if e is None:
            return None
        exprs.append(e)
    if not exprs:
        return A.Lit(False)
    return exprs[0] if len(exprs) == 1 else A.Or(tuple(exprs))


def _and(*parts: A.Expr | None) -> A.Expr | None:
    terms: list[A.Expr] = []
    for p in parts:
        terms.extend(and_terms(p))
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else A.And(tuple(terms))


def _test(expr: A.Expr | None, schema: Any, new: bool = False) -> Fn | None:
    """A rule's condition as a test of one row (None = every row); a missing claim keeps none."""
    if expr is None:
        return None
    f = compile_expr(expr, Ctx(schema, where=True, claims=True, new=new))
    return guard_missing(lambda row, env: V.truthy(f(row, env)))


def _reads_clock(e: A.Expr) -> bool:
    return mentions(e, lambda n: isinstance(n, A.Call) and n.name == "now")


class UpdateRule:
    """One update rule, compiled against a schema: USING on the row as it was, its `new.` terms
    across the rewrite, and the after-image check on the row as written.

    A transition rule's terms that read the clock (`run_at <= now()`) say when a row may be
    taken, not what it must stay: the after-image check leaves them out (proposed), else a
    claim that moves `run_at` ahead could never pass its own rule."""

    __slots__ = ("rule", "using", "across", "after", "fields")

    def __init__(self, rule: Rule, schema: Any) -> None:
        self.rule = rule
        self.fields = frozenset(rule.fields) if rule.fields is not None else None
        self.using = _test(rule.using, schema)
        self.across = _test(_and(*rule.transition), schema, new=True) if rule.transition else None
        if rule.transition:
            kept = [t for t in and_terms(rule.using) if not _reads_clock(t)]
            self.after = _test(_and(*kept), schema)
        else:
            self.after = self.using


class InsertRule:
    __slots__ = ("admits", "pins")

    def __init__(self, rule: Rule, schema: Any) -> None:
        self.admits = _test(rule.filter, schema)
        self.pins = []
        for name, expr in rule.pins:
            f = schema.fields.get(name)
            if f is not None:
                self.pins.append((name, compile_expr(expr, Ctx(schema, row=False, claims=True)), f.type))


class Plan:
    """A scoped statement prepared for one set of rules: the rewritten statement and the
    rules it is judged by."""

    __slots__ = ("p", "updates", "readable", "inserts", "any_fields")

    def __init__(self, p: Prepared) -> None:
        self.p = p
        self.updates: list[UpdateRule] = []
        self.readable: Fn | None = None
        self.inserts: list[InsertRule] = []
        self.any_fields: frozenset[str] | None = None  # every field some update rule may change


def plan_for(db: Catalog, text: str, stmt: A.Statement, scope: Scope) -> Plan:
    g = scope.grants(stmt.collection)  # type: ignore[attr-defined]
    key = (text, ("scoped", g.key))
    plan = db.plan(key)
    if plan is not None:
        return plan
    schemas = {n: c.schema for n, c in db.collections.items() if scope.visible(n)}
    expired = mentions(getattr(stmt, "where", None), _is_expired)
    extra = _union(g.rules("expired")) if expired else None
    # The rules' terms come first in each filter, the statement's after them: `and` stops at
    # the first false term, so the statement's expressions are never worked out on a row the
    # rules keep out (`timestamp(payload.card)` quoting another queue's card in its error).
    if isinstance(stmt, A.Get):
        stmt2: A.Statement = dataclasses.replace(stmt, where=_and(_union(g.rules("read")), extra, stmt.where))
        plan = Plan(prepare(stmt2, schemas, allow_claims=True))
    elif isinstance(stmt, A.Del):
        returns = stmt.returning is not None or stmt.returning_all
        reads = _union(g.rules("read")) if returns else None
        stmt2 = dataclasses.replace(stmt, where=_and(_union(g.rules("delete")), reads, extra, stmt.where))
        plan = Plan(prepare(stmt2, schemas, allow_claims=True))
    elif isinstance(stmt, A.Set):
        stmt2 = dataclasses.replace(stmt, where=_and(_union(g.rules("update"), "using"), extra, stmt.where))
        plan = Plan(prepare(stmt2, schemas, allow_claims=True, controls=db.controls))
        _judges(plan, g, schemas[stmt.collection])
    else:
        plan = Plan(prepare(stmt, schemas))
        schema = schemas[stmt.collection]  # type: ignore[attr-defined]
        plan.inserts = [InsertRule(r, schema) for r in g.rules("insert")]
        if getattr(stmt, "else_patch", None) is not None:
            _judges(plan, g, schema)
    db.remember_plan(key, plan)
    return plan


def _judges(plan: Plan, g: Any, schema: Any) -> None:
    plan.updates = [UpdateRule(r, schema) for r in g.rules("update")]
    plan.readable = _test(_union(g.rules("read")), schema)
    if all(u.fields is not None for u in plan.updates):
        # every u.fields is a set here: the `if` only narrows it for mypy
        plan.any_fields = frozenset().union(*(u.fields for u in plan.updates if u.fields is not None))


# ---------------------------------------------------------------- judging one rewrite


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def judge_update(plan: Plan, coll: str, old: dict, new: dict, env: Env) -> None:
    """403 unless one update rule admits this rewrite (fields, before, across, after)."""
    changed = sorted(k for k in set(old) | set(new) if k != "id" and not _same(old.get(k), new.get(k)))
    if plan.any_fields is not None:
        outside = [f for f in changed if f not in plan.any_fields]
        if outside:
            raise denied(f"this token may not change {_names(outside)} in `{coll}`")
    across_env = Env(env.params, env.now, env.claims, new)
    admitted = []
    for u in plan.updates:
        if u.using is not None and not u.using(old, env):
            continue
        if u.across is not None and not u.across(old, across_env):
            continue
        if u.after is not None and not u.after(new, env):
            continue
        admitted.append(u)
    if not admitted:
        raise denied(f"the document is outside what this token may write to `{coll}`")
    if any(u.fields is None or u.fields.issuperset(changed) for u in admitted):
        return
    raise denied(f"this token may not change {_names(changed)} of that row of `{coll}`")


def _names(fields: list[str]) -> str:
    return ", ".join(f"`{f}`" for f in fields)


def _unique_check(coll: Any, row: dict, alive: Callable, undo: list) -> None:
    """A scoped token learns which field clashed, never the other row's id or value."""
    try:
        coll.unique_check(row, alive, undo)
    except FenecError as e:
        m = _UNIQUE.match(e.message) if e.kind == "exists" else None
        if m is None:
            raise
        raise FenecError("exists", f"`{m.group(1)}` is unique, and the value is taken") from None


# ---------------------------------------------------------------- running


def run(db: Catalog, text: str, stmt: A.Statement, env: Env, blk: Block | None, scope: Scope) -> Any:
    """One authorized statement under the token's rules (`env.claims` set to its claims)."""
    t = type(stmt)
    if t is A.ShowQueues:
        return show_queues(db, scope.visible)
    if t is A.QueueControl:
        assert blk is not None and isinstance(stmt, A.QueueControl)
        return run_control(db, stmt, blk)
    plan = plan_for(db, text, stmt, scope)
    try:
        if t is A.Get:
            return run_get(db, plan.p, env)
        assert blk is not None
        if t is A.Del:
            return run_del(db, plan.p, env, blk)
        if t is A.Set:
            return _run_set(db, plan, env, blk)
        return run_put(db, plan.p, env, blk, TokenPut(plan))
    except FenecError as e:
        if e.row is not None and not _may_read(db, stmt, scope, e.row, env):
            raise withheld(e, stmt) from None
        raise


def _may_read(db: Catalog, stmt: A.Statement, scope: Scope, row: dict, env: Env) -> bool:
    """Whether the token's read rules admit `row`. Asked only on the way out of an error, so
    the test is compiled here rather than kept with every plan; any doubt is a no."""
    name = stmt.collection  # type: ignore[attr-defined]
    try:
        test = _test(_union(scope.grants(name).rules("read")), db.collections[name].schema)
        return test is None or bool(test(row, env))
    except Exception:
        return False


def withheld(e: FenecError, stmt: A.Statement) -> FenecError:
    """An error raised on a row the token may not read: its status, never its message, which
    may quote the row (`timestamp() could not read '4111 1111 1111 1111' as a time`). A set or
    del works its filter, order and values out on the rows its update or delete rules admit,
    read or not; a get, and the read rules' own rows, never meet such a row (see plan_for)."""
    verb = {A.Get: "get", A.Set: "set", A.Del: "del"}.get(type(stmt), "put")
    coll = stmt.collection  # type: ignore[attr-defined]
    return FenecError(e.kind, f"`{verb} {coll}` failed on a row this token may not read; "
                              "the reason is withheld, since it would show the row")


def choose(db: Catalog, plan: Plan, env: Env, limit: int | None,
           blk: Block | None = None) -> tuple[list[dict], list[dict]]:
    """The rows a scoped set writes, in its order, and their written forms (§4.4): each
    candidate is judged (403 for the whole statement), then, with `returning`, passed over when
    the token could not read it as written; a claim on a queue with controls passes over what
    they stop (engine/limits.py; `blk` None: a look, which counts nothing). Candidates are read
    in pages that double."""
    p = plan.p
    coll = db.collection(p.coll)
    q = p.query
    budget = None
    if p.gate is not None:
        budget = p.gate.budget(db, coll, int(env.now), blk)
        if budget.stopped:
            return [], []
        q = budget.query(q)
    schema = coll.schema
    patch = p.patch
    fixed = [None if per_row else fn(None, env) for _, fn, _, per_row in patch]
    fns = [(fn if per_row else None) for _, fn, _, per_row in patch]
    readable = plan.readable if p.cols is not None else None
    olds: list[dict] = []
    news: list[dict] = []
    need = limit
    cands = pick(coll, q, env, need_override=need)
    i = 0
    while True:
        while i < len(cands) and (limit is None or len(olds) < limit):
            old = cands[i]
            i += 1
            try:
                vals = [f(old, env) if f is not None else c for f, c in zip(fns, fixed, strict=False)]
                new = apply_entries(schema, old, patch, vals)
            except Overflow as past:
                if limit is None:
                    past.row = old
                    raise
                continue  # a picking set passes over a row whose new values overflow (execute._pass_over)
            except FenecError as e:
                e.row = old  # a value worked out on this row: its error may quote it
                raise
            judge_update(plan, coll.name, old, new, env)
            if readable is not None and not readable(new, env):
                continue
            if budget is not None and not budget.admit(new):
                continue
            olds.append(old)
            news.append(new)
        # full at `limit` (`need` has doubled past it once a row was passed over), or read to the end
        if limit is None or need is None or len(olds) >= limit or len(cands) < need:
            return olds, news
        need *= 2
        cands = pick(coll, q, env, need_override=need)


def _run_set(db: Catalog, plan: Plan, env: Env, blk: Block) -> Any:
    p = plan.p
    coll = db.collection(p.coll)
    olds, news = choose(db, plan, env, p.query.limit, blk)
    if olds:
        schema = coll.schema
        blk.touch(coll)
        alive_fn = p.alive
        alive = (lambda r: alive_fn(r, env)) if alive_fn else (lambda r: True)
        for old, new in zip(olds, news, strict=False):
            if coll.required:
                check_required(schema, new)
            _unique_check(coll, new, alive, blk.undo)
            coll.replace(old, new, blk.undo)
            blk.ops.append(("p", coll.name, new["id"], new))
        blk.writes += 1
        blk.taken += len(olds)
    return answer_of("set", p, news, env)  # news[i] is olds[i] as written


class TokenPut(PutRules):
    """A put under a token's rules (the module doc): `run_put` with the token's judgements."""

    __slots__ = ("plan",)

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def check(self, docs: list[dict]) -> None:
        if any("id" in d for d in docs):
            raise _put_id()

    def admit(self, coll: Collection, doc: dict, rid: int, env: Env) -> dict:
        """The document as written under the first insert rule that admits it, with the fields
        that rule pins filled in where the document leaves them out; 403 when none admits it."""
        for ins in self.plan.inserts:
            filled = dict(doc)
            try:
                for name, fn, ftype in ins.pins:
                    if name not in filled:
                        filled[name] = C.coerce(fn(None, env), ftype)
            except Exception:  # a refused value, or a pin reading a claim the token lacks
                continue
            row = super().admit(coll, filled, rid, env)
            if ins.admits is None or ins.admits(row, env):
                return row
        raise denied(f"the document is outside what this token may write to `{coll.name}`")

    def judge_update(self, coll: Collection, old: dict, new: dict, env: Env) -> None:
        judge_update(self.plan, coll.name, old, new, env)

    def unique_check(self, coll: Collection, row: dict, alive: Callable[[dict], bool], undo: list) -> None:
        _unique_check(coll, row, alive, undo)


# ---------------------------------------------------------------- held claims


def look(db: Catalog, text: str, stmt: A.Statement, params: list, scope: Scope, now: Any) -> bool:
    """Under the read lock: would this scoped set/del take a row now? It reads only the rows
    the token could take; a rewrite its rules refuse, or an error, counts as taking (the run
    answers it: 403, or the error, withheld as `run` withholds it)."""
    plan = plan_for(db, text, stmt, scope)
    env = Env(params, now, scope.claims)
    coll = db.collections.get(plan.p.coll)
    if coll is None:
        return True
    try:
        if isinstance(stmt, A.Del):
            return bool(pick(coll, plan.p.query, env, need_override=1))
        olds, _ = choose(db, plan, env, 1)
    except FenecError:
        return True
    return bool(olds)


def rule_time_filter(stmt: A.Statement, scope: Scope) -> A.Expr | None:
    """The rules' part of a held set/del's filter, for the moments the clock changes it."""
    g = scope.grants(stmt.collection)  # type: ignore[attr-defined]
    if isinstance(stmt, A.Set):
        return _union(g.rules("update"), "using")
    return _union(g.rules("delete"))
