"""Reading the rows a statement picks: the run-time half of the planner (fenecql.md §14).

`pick` answers exactly what the naive evaluation answers — live rows in ascending id, those
the filter keeps, sorted stably by the order keys (ties by ascending id), then offset and
limit — but reads as few rows as it can:

1. an equality on `id`, `@hash` or `@unique` is a lookup;
2. `order f limit N` over an `@sorted` field walks the index in order, a range on the same
   field starting and ending the walk, and stops at the page; a walk that has not filled its
   page within an eighth of the collection gives up and reads the matches instead (rule 4);
3. a range on another `@sorted` field that holds at most a few thousand rows is read and
   sorted instead of walking (rule 5: the smaller set wins); a range over more than half the
   collection is scanned;
4. `order distance(f, p) limit N` over `@geo` walks cells nearest first; radius and box
   filters read the cells covering them;
5. otherwise a scan in id order, stopping at offset + limit when there is no order.

Every row an index yields is still tested against the whole filter.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from typing import Any

from .. import convert as C
from .. import values as V
from ..errors import FenecError
from ..pacing import PACE_ROWS, hand_over
from ..plan.compile import Env
from ..plan.planner import Access, RangeTerm
from .collection import Collection
from .geo_index import GiveUp
from .sorted_index import PackedIndex

SMALL_RANGE = 4096


class Query:
    """A compiled read: the filter (expiry folded in), the access terms, order and page."""

    __slots__ = ("filter", "access", "order", "limit", "offset", "walk_filter", "head", "by_id")

    def __init__(self, filt: Callable[[dict, Env], Any] | None, access: Access,
                 order: list[tuple[Callable, bool]], limit: int | None, offset: int,
                 walk_filter: Callable[[dict, Env], Any] | None) -> None:
        self.filter = filt
        # What a bounded walk of the `walk` index still tests per row: None when the filter is
        # nothing but the range the walk is bounded by (`run_at <= now()`), else the filter.
        self.walk_filter = walk_filter
        self.access = access
        self.order = order
        self.limit = limit
        self.offset = offset
        # The walked field when the answer is the head of one range on it, nothing else to
        # test: `where run_at <= now() order run_at limit 10`, a claim. `pick` then reads the
        # page straight off the index, past the general plan (rule 2 gives the same rows).
        self.head = access.walk if (
            walk_filter is None and access.walk not in (None, "id") and not access.walk_desc
            and not access.eqs and not access.geos and access.geo_walk is None
            and list(access.ranges) == [access.walk] and len(order) == 1 and offset == 0) else None
        # The one bound of `id = <bound>` when that is the only equality the index can answer:
        # an ack, an extension or a failure (`where id = $1 and owner = $2`). `pick` then looks
        # the row up at once, where the general plan reaches the same row through `_eq_ids`.
        eqs = access.eqs
        self.by_id = eqs[0].bounds[0] if (
            len(eqs) == 1 and eqs[0].target == "id" and len(eqs[0].bounds) == 1) else None


class _Empty(Exception):
    """A bound made the range empty (a null bound, or lo above hi)."""


def _bound_value(coll: Collection, target: str, v: Any) -> tuple[bool, Any]:
    """Make a bound comparable with the index's keys: (usable, value). Null empties the range."""
    if v is None:
        raise _Empty()
    if "." in target:
        if type(v) is V.Ts:
            return False, None
        return True, V.sort_key(v)
    if target == "id":
        return False, None
    ftype = coll.schema.fields[target].type
    t = type(v)
    if ftype in ("int", "float", "timestamp"):
        if t is int or t is float or t is V.Ts:
            return True, v
        if t is str and ftype == "timestamp":
            ms = V.parse_time(v)
            if ms is not None:
                return True, ms
        return False, None
    if ftype == "text":
        if t is str:
            return True, v
        return False, None
    return False, None


def _range_bounds(coll: Collection, terms: list[RangeTerm], env: Env) -> tuple[Any, bool, Any, bool] | None:
    lo = hi = None
    lo_incl = hi_incl = True
    for t in terms:
        try:
            raw = t.bound(None, env)
        except Exception:
            return None  # the scan meets the bound in the filter's own order (see _bounds)
        if raw is None and t.op == "=":
            return None  # `f = null` holds for null rows, which no range holds
        ok, b = _bound_value(coll, t.target, raw)
        if not ok:
            return None
        op = t.op
        if op in (">", ">=", "="):
            incl = op != ">"
            if lo is None or b > lo or (b == lo and not incl):
                lo, lo_incl = b, incl
        if op in ("<", "<=", "="):
            incl = op != "<"
            if hi is None or b < hi or (b == hi and not incl):
                hi, hi_incl = b, incl
    if lo is not None and hi is not None and (lo > hi or (lo == hi and not (lo_incl and hi_incl))):
        raise _Empty()
    return lo, lo_incl, hi, hi_incl


def _bounds(fns: list[Callable], env: Env) -> list[Any] | None:
    """The values of a term's bounds, or None when one raises. A bound is worked out before any
    row is read, while the filter meets it only after the terms on its left hold for some row:
    `j = 5 and n >= timestamp($1)` never reads a bad $1 when no row has j = 5 (§9.5). So a bound
    that raises (or reads a claim the token lacks) is no plan: the scan raises if, and only if,
    the plain evaluation does."""
    try:
        return [b(None, env) for b in fns]
    except Exception:
        return None


def _eq_ids(coll: Collection, target: str, values: Iterable[Any]) -> list[int] | None:
    """The ids an equality lookup finds, or None when the index cannot answer it alone."""
    if target == "id":
        out = []
        for v in values:
            if type(v) in (int, float, V.Ts) and math.isfinite(v) and v == int(v) and int(v) in coll.rows:
                out.append(int(v))
        return sorted(set(out))
    kind, idx, _ = coll.indexes[target]
    keyed = "." in target
    out_set: set[int] = set()
    ftype = None if keyed else coll.schema.fields[target].type
    for v in values:
        if v is None:
            return None  # `f = null` holds for rows no index entry names
        key = _lookup_key(ftype, v) if not keyed else _path_key(v)
        if key is _SCAN:
            return None
        if key is not _NONE:
            out_set.update(idx.lookup(key))
    return sorted(out_set)


_FIELD_RANK = {"bool": 1, "int": 2, "float": 2, "timestamp": 2, "text": 3, "bytes": 3}
_NONE = object()  # no row of the field can equal the value
_SECOND = operator.itemgetter(1)  # the id of a (distance, id) pair
_SCAN = object()  # rows may equal the value under keys the index cannot name: scan instead


def _lookup_key(ftype: Any, v: Any) -> Any:
    """The index key under which a typed field holds the values `=` finds equal to `v` (§3.4)."""
    t = type(v)
    if ftype == "timestamp" and t is str:
        ms = V.parse_time(v)  # rule 4: the text is read as a time, or compares by kind
        return _NONE if ms is None else ms
    if ftype == "text":
        if t is V.Ts:
            return _SCAN  # rule 4: every text that reads as this time is equal, in any spelling
        if t is bytes:  # rule 5: bytes equal text by their UTF-8
            try:
                return v.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                return _NONE
    if ftype == "bytes" and t is str:
        return v.encode("utf-8", "surrogatepass")
    if V.rank(v) != _FIELD_RANK.get(ftype):
        return _NONE
    return v


def _path_key(v: Any) -> Any:
    """The key for a lookup on a path index: json holds a time as text and never holds bytes,
    and text reads as a time in any spelling, so such values are left to the scan."""
    if type(v) is V.Ts or _holds_bytes(v):
        return _SCAN
    return v


def _holds_bytes(v: Any) -> bool:
    t = type(v)
    if t is bytes:
        return True
    if t is list or t is tuple:
        return any(_holds_bytes(x) for x in v)
    if t is dict:
        return any(_holds_bytes(x) for x in v.values())
    return False


def pick(coll: Collection, q: Query, env: Env, need_override: int | None = None) -> list[dict]:
    """The rows the statement answers, in answer order (offset and limit applied)."""
    rows = coll.rows
    if not rows:
        return []
    acc = q.access
    limit = q.limit if need_override is None else need_override
    need = None if limit is None else q.offset + limit
    if need == 0:
        return []
    head = q.head
    if head is not None and need is not None:
        # `run_at <= now()`: its one bound read as _range_bounds reads an int or a time, and the
        # page taken off the index past the plan below. Any other bound goes the general way,
        # which ends at the same page read (`_walk`).
        idx = coll.indexes[head][1]
        terms = acc.ranges[head]
        t = terms[0]
        if type(idx) is PackedIndex and len(terms) == 1 and (t.op == "<=" or t.op == "<"):
            try:
                raw = t.bound(None, env)
            except Exception:
                raw = None
            if type(raw) is V.Ts or type(raw) is int:
                return idx.page(None, True, raw, t.op == "<=", need, rows)
    by_id = q.by_id
    if by_id is not None:
        # the general plan below with one candidate: a bound that raises, or that is not an int,
        # goes that way and meets the same end
        try:
            v = by_id(None, env)
        except Exception:
            v = None
        if type(v) is int:
            row = rows.get(v)
            if row is None:
                return []
            return _finish(coll, q, env, (row,), need, sorted_by_id=True)
    n = len(rows)
    try:
        cands: list[int] | None = None
        for eqt in acc.eqs:
            vals = _bounds(eqt.bounds, env)
            ids = None if vals is None else _eq_ids(coll, eqt.target, vals)
            if ids is not None and (cands is None or len(ids) < len(cands)):
                cands = ids
        if cands is not None:
            return _finish(coll, q, env, (rows[i] for i in cands if i in rows), need, sorted_by_id=True)

        ranges: dict[str, tuple] = {}
        for tgt, terms in acc.ranges.items():
            if tgt == "id":
                continue
            b = _range_bounds(coll, terms, env)
            if b is not None:
                ranges[tgt] = b

        if acc.walk is not None and need is not None and not q.order[1:]:
            # A smaller range on another field beats the walk (rule 5).
            other = _smallest_range(coll, ranges, exclude=acc.walk)
            if other is None or other[1] > SMALL_RANGE:
                got = _walk(coll, q, env, need, ranges.get(acc.walk), acc.walk)
                if got is not None:
                    return got[q.offset:need]
            else:
                return _finish_range(coll, q, env, other[0], ranges[other[0]], need)

        if acc.geo_walk is not None and need is not None:
            got = _geo_walk(coll, q, env, need, acc.geo_walk)
            if got is not None:
                return got[q.offset:need]

        for g in acc.geos:
            ids = _geo_ids(coll, g, env)
            if ids is not None:
                return _finish(coll, q, env, (rows[i] for i in sorted(ids) if i in rows), need,
                               sorted_by_id=True)

        best = _smallest_range(coll, ranges)
        if best is not None and best[1] <= n // 2:
            return _finish_range(coll, q, env, best[0], ranges[best[0]], need)
    except _Empty:
        return []
    return _finish(coll, q, env, coll.ids_in_order().values(), need, sorted_by_id=True)


def _smallest_range(coll: Collection, ranges: dict[str, tuple], exclude: str | None = None) -> tuple[str, int] | None:
    best = None
    for tgt, (lo, li, hi, hi_incl) in ranges.items():
        if tgt == exclude:
            continue
        cnt = coll.index(tgt).count(lo, li, hi, hi_incl)
        if best is None or cnt < best[1]:
            best = (tgt, cnt)
    return best


def _finish_range(coll: Collection, q: Query, env: Env, tgt: str, bounds: tuple, need: int | None) -> list[dict]:
    idx = coll.index(tgt)
    lo, li, hi, hi_incl = bounds
    ids = sorted(idx.walk(lo, li, hi, hi_incl, False, False))
    rows = coll.rows
    return _finish(coll, q, env, (rows[i] for i in ids), need, sorted_by_id=True)


def _finish(coll: Collection, q: Query, env: Env, rows: Iterable[dict], need: int | None,
            sorted_by_id: bool) -> list[dict]:
    """Filter, order, page. `rows` come in ascending id."""
    filt = q.filter
    if not q.order:
        out = []
        read = 0
        if filt is None:
            for r in rows:
                out.append(r)
                if need is not None and len(out) >= need:
                    break
                read += 1
                if read % PACE_ROWS == 0:
                    hand_over()  # a scan of many rows: in a worker thread (pacing.py)
        else:
            for r in rows:
                if filt(r, env):
                    out.append(r)
                    if need is not None and len(out) >= need:
                        break
                read += 1
                if read % PACE_ROWS == 0:
                    hand_over()
        return out[q.offset:]
    matched = [r for r in rows if filt is None or filt(r, env)]
    return sort_rows(matched, q.order, env)[q.offset:need]


def sort_rows(rows: list[dict], order: list[tuple[Callable, bool]], env: Env) -> list[dict]:
    """Stable sort by each key from the last to the first; rows arrive in ascending id."""
    try:
        if len(order) == 1:
            fn, desc = order[0]
            dec = [(V.sort_key(fn(r, env)), r) for r in rows]
            dec.sort(key=lambda x: x[0], reverse=desc)
            return [r for _, r in dec]
        keyed = [([V.sort_key(fn(r, env)) for fn, _ in order], r) for r in rows]
    except FenecError as e:
        _blame(e, rows, order, env)
        raise
    for i in range(len(order) - 1, -1, -1):
        # a def, not a lambda with `i=i`: mypy cannot infer that lambda's type
        def key(x: tuple[list[Any], dict], i: int = i) -> Any:
            return x[0][i]
        keyed.sort(key=key, reverse=order[i][1])
    return [r for _, r in keyed]


def _blame(e: FenecError, rows: list[dict], order: list[tuple[Callable, bool]], env: Env) -> None:
    """Name the row whose order key raised `e` (`FenecError.row`, see compile.guard_missing):
    the keys are worked out again, row by row, until one raises. Only on the way out of an
    error, so the sort itself pays nothing for it."""
    if e.row is not None:
        return
    for r in rows:
        try:
            for fn, _ in order:
                fn(r, env)
        except FenecError:
            e.row = r
            return


def _walk(coll: Collection, q: Query, env: Env, need: int, bounds: tuple | None, tgt: str) -> list[dict] | None:
    # `tgt` is q.access.walk, passed by pick where it has seen it set: typed str with no test here
    rows = coll.rows
    filt = q.filter if bounds is None else q.walk_filter
    if tgt == "id":
        it: Iterable[int] = reversed(coll.ids_in_order()) if q.access.walk_desc else iter(coll.ids_in_order())
    else:
        idx = coll.index(tgt)
        if bounds is not None and filt is None and not q.access.walk_desc and type(idx) is PackedIndex:
            # Every entry of the range is a row the filter keeps: the page is the range's head,
            # read as one slice, a fraction of a walk's cost (bench/README.md, "Numbers the code's
            # comments used to carry").
            lo, li, hi, hi_incl = bounds
            return idx.page(lo, li, hi, hi_incl, need, rows)
        if bounds is None:
            it = idx.walk(None, True, None, True, q.access.walk_desc, True)
        else:
            lo, li, hi, hi_incl = bounds
            it = idx.walk(lo, li, hi, hi_incl, q.access.walk_desc, False)
    return _first_kept(it, rows, filt, env, need)


def _first_kept(ids: Iterable[int], rows: dict[int, dict], filt: Callable[[dict, Env], Any] | None, env: Env,
                need: int) -> list[dict] | None:
    """The first `need` rows of a walk that the filter keeps (fewer at the walk's end); None once
    the walk has read past an eighth of the rows (64 at least) without them: a scan costs less."""
    out: list[dict] = []
    budget = max(64, len(rows) >> 3)
    seen = 0
    for rid in ids:
        r = rows[rid]
        if filt is None or filt(r, env):
            out.append(r)
            if len(out) >= need:
                return out
        seen += 1
        if seen > budget:
            return None
    return out


def _geo_walk(coll: Collection, q: Query, env: Env, need: int, tgt: str) -> list[dict] | None:
    # `tgt` is q.access.geo_walk, passed by pick where it has seen it set. The planner sets the
    # point with it; the None test narrows for mypy (calling None would end in None too, below).
    point = q.access.geo_point
    if point is None:
        return None
    try:
        p = point(None, env)
        if p is None:
            return None
        pt = C.to_point(p)
    except Exception:
        return None
    idx = coll.index(tgt)
    rows = coll.rows

    def point_of(rid: int) -> Any:
        return rows[rid][tgt]
    nearest = idx.nearest(pt[0], pt[1], point_of, max_cells=max(400, len(rows) >> 2))
    try:
        return _first_kept(map(_SECOND, nearest), rows, q.filter, env, need)  # lazy: the walk stops early
    except GiveUp:
        return None


def _geo_ids(coll: Collection, g: Any, env: Env) -> list[int] | None:
    idx = coll.index(g.target)
    budget = max(400, len(coll.rows) >> 3)
    try:
        if g.kind == "box":
            box = g.box(None, env)
            if type(box) not in (list, tuple) or len(box) != 4:
                return None
            w, s, e, n = (float(x) for x in box)
            return idx.box_ids(w, s, e, n, budget)
        p = g.point(None, env)
        r = g.radius(None, env)
        if p is None or r is None:
            raise _Empty()
        if type(r) not in (int, float):
            return None
        pt = C.to_point(p)
        return idx.radius_ids(pt[0], pt[1], float(r), budget)
    except _Empty:
        raise
    except Exception:  # a bound that raises, or a bad point: the scan meets it in the filter's order
        return None
