"""Schedules: a put the server runs at each due time, exactly once per due time.

    create schedule digest cron "0 9 * * 1-5" in "Europe/Istanbul" put jobs {payload: {"r": "daily"}, run_at: now(), attempts: 0}
    create schedule ping every 30s missed skip put jobs {payload: {"due": $1}, run_at: $1, attempts: 0}
    pause schedule digest / resume schedule digest / fire schedule digest / drop schedule digest
    show schedules

The put runs as the server token would run it, with `$1` bound to the due time it fires for
(a timestamp), `now()` the moment it runs.

Due times. `every d`: one `d` after the schedule was created, then every `d` (at least 1 s).
`cron "<expr>"`: the expression's times after it was created, in its zone (`in "<zone>"`, an IANA
name read through `zoneinfo`; UTC without one), five fields or six with seconds first; parsed
and stepped by cronsim, so a time a DST change skips fires at the first time after it and one
it repeats fires once.

Exactly once per due time. A fire is one log record: the put's rows and the schedule's state
(`["h", name, state]` in engine/records.py) saying it fired for due time T and is next due at
T'. A crash leaves both or neither, so after a restart the schedule's `due` is the first due
time whose fire is not in the log, and no due time is fired twice. Every fire runs under the
engine's one writer and rereads the state there, so two firers (a timer and a `fire_due`
call) cannot both fire one due time.

Late and missed. A due time T found due at `now` is on time while `now - T <= GRACE_MS`
(a minute): each such due time fires once, in order (a timer a few seconds late, or a restart
within the minute, makes every one of them up). Older due times were missed (the server was
down or the schedule's put kept failing): the schedule's policy says what happens, and either
way it goes on at its first due time not missed:

    missed once   (the default) one fire for all of them, for the first missed due time
    missed skip   no fire

A fire whose put fails (a dropped collection, a refused document) is recorded too, without rows
and with its error shown by `show schedules`: the schedule goes on at its next due time.

Paused: nothing fires. Resumed, it goes on at its first due time after the resume: what fell
due while it was paused is not made up. `fire schedule` fires now, by hand, for due time
`now`, paused or not, and leaves the next due time as it was.

Who fires: `fire_due(catalog, write)` through the engine's one writer (`Database.fire_due`),
and only while `Schedules.firing` holds (a replica, which must not
enqueue, turns it off with `stop_firing`). The HTTP server calls it from a timer task on its
event loop (cli.py `start_background`); an in-process `Database` on the wall clock from a
thread of its own, started with the first schedule; a `Database` on a clock of its own (a
test's) only when its caller calls `db.fire_due()` after moving the clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .. import values as V
from ..errors import FenecError
from ..plan.compile import Env
from ..ql import ast as A
from ..ql.parser import parse
from .execute import Block
from .prepare import Prepared, prepare
from .puts import run_put

if TYPE_CHECKING:
    from ..policy import Scope
    from .catalog import Catalog

GRACE_MS = 60_000  # a due time found later than this after it was missed (module doc)
MIN_EVERY_MS = 1000
GRANT = "schedule"  # the policy's grant on the collection a schedule puts into (docs/access.md)
_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))


class Schedule:
    """One schedule: what its creating statement said, and its state (the log's `state`)."""

    __slots__ = ("name", "text", "stmt", "zone", "paused", "due", "fired", "fired_at", "fires", "error",
                 "_plan", "_zone")

    def __init__(self, text: str, stmt: A.CreateSchedule, due: int) -> None:
        self.name = stmt.name
        self.text = text
        self.stmt = stmt
        self.zone = stmt.zone or "UTC"
        self.paused = False
        self.due = due  # the first due time not fired
        self.fired: int | None = None  # the due time of the last fire
        self.fired_at: int | None = None  # the moment of the last fire
        self.fires = 0
        self.error: str | None = None  # the last fire's put's refusal, until one succeeds
        self._plan: tuple[Any, Prepared] | None = None
        self._zone = _zone(self.zone) if stmt.cron is not None else None

    @property
    def collection(self) -> str:
        return self.stmt.put.collection

    def after(self, t: int) -> int:
        """The first due time strictly after `t` (ms), `t` itself a due time for `every`."""
        every = self.stmt.every_ms
        if every is not None:
            return t + every
        assert self.stmt.cron is not None and self._zone is not None
        start = datetime.fromtimestamp(t / 1000, self._zone)
        return int(next(CronSim(self.stmt.cron, start)).timestamp() * 1000)

    def at_or_after(self, x: int) -> int:
        """The first due time at `x` or later, going on from `due`."""
        if self.due >= x:
            return self.due
        every = self.stmt.every_ms
        if every is not None:
            return self.due + -(-(x - self.due) // every) * every
        return self.after(x - 1)

    def state(self) -> dict:
        return {"text": self.text, "paused": self.paused, "due": self.due, "fired": self.fired,
                "fired_at": self.fired_at, "fires": self.fires, "error": self.error}

    def load(self, state: dict) -> None:
        self.paused = bool(state.get("paused"))
        self.due = int(state["due"])
        self.fired = state.get("fired")
        self.fired_at = state.get("fired_at")
        self.fires = int(state.get("fires") or 0)
        self.error = state.get("error")

    def plan(self, catalog: Catalog) -> Prepared:
        """The put prepared against the schema now (kept until the schema changes)."""
        version = catalog.version
        got = self._plan
        if got is None or got[0] != version:
            p = prepare(self.stmt.put, {n: c.schema for n, c in catalog.collections.items()})
            self._plan = got = (version, p)
        return got[1]

    def spec(self) -> str:
        every = self.stmt.every_ms
        if every is not None:
            return "every " + duration_text(every)
        return f"cron {self.stmt.cron}"


class Schedules:
    """Every schedule by name, and whether this process fires them."""

    __slots__ = ("by_name", "firing", "fired", "changed")

    def __init__(self) -> None:
        self.by_name: dict[str, Schedule] = {}
        self.firing = True
        self.fired = 0  # fires made by this process (the metrics' counter)
        self.changed: Callable[[], None] | None = None  # told when a schedule is made or changed (a timer's wake)

    def stop_firing(self) -> None:
        """This process fires no schedule from now on (a replica: only a primary enqueues)."""
        self.firing = False

    def start_firing(self) -> None:
        self.firing = True

    def next_due(self) -> int | None:
        """The earliest due time of an unpaused schedule, or None."""
        best = None
        for s in list(self.by_name.values()):
            if not s.paused and (best is None or s.due < best):
                best = s.due
        return best


def duration_text(ms: int) -> str:
    for unit, size in _UNITS:
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise FenecError("query", f"unknown time zone {name!r}: give an IANA name such as \"Europe/Istanbul\"") \
            from None


def _checked(stmt: A.CreateSchedule) -> None:
    """Refuse (400) what the statement says wrong, before anything is kept."""
    if stmt.put.param is not None:
        raise FenecError("query", "a schedule's put writes its documents in the statement: `$1` is the due time")
    if stmt.every_ms is not None:
        if stmt.every_ms < MIN_EVERY_MS:
            raise FenecError("query", f"a schedule runs at most once a second: `every {duration_text(stmt.every_ms)}`"
                                      " is shorter")
        return
    assert stmt.cron is not None
    zone = _zone(stmt.zone or "UTC")
    try:
        next(CronSim(stmt.cron, datetime.now(zone)))
    except (CronSimError, StopIteration) as e:
        raise FenecError("query", f"bad cron expression {stmt.cron!r}: {e or 'it never comes due'}") from None


# ---------------------------------------------------------------- statements


def authorize(stmt: A.Statement, scope: Scope) -> None:
    """Before anything runs: a scoped token needs the `schedule` grant on the collection the
    schedule puts into (a control's collection is checked as it runs, `run`); its put may not
    read the token's claims, which no fire has."""
    if isinstance(stmt, A.ShowSchedules):
        return
    if A.mentions(stmt, lambda n: isinstance(n, A.Claim)):
        raise FenecError("query", "`$jwt.` claims are read only inside access rules")
    if isinstance(stmt, A.CreateSchedule):
        if not scope.grants(stmt.put.collection).has(GRANT):
            raise _denied(stmt.put.collection)
        return
    if not any(GRANT in r.grants for r in scope.rules):
        raise FenecError("denied", f"this token may not {stmt.verb} schedules: that takes the `schedule` grant")


def _denied(coll: str) -> FenecError:
    return FenecError("denied", f"this token may not manage schedules that put into `{coll}`: that takes the "
                                f"`schedule` grant on it")


def run(catalog: Catalog, text: str, stmt: A.Statement, blk: Block, scope: Scope | None) -> Any:
    """A schedule statement, under the write lock (`show schedules` under the read lock)."""
    if isinstance(stmt, A.ShowSchedules):
        return show(catalog, scope)
    if isinstance(stmt, A.CreateSchedule):
        return _create(catalog, text, stmt, blk)
    assert isinstance(stmt, A.ScheduleControl)
    s = catalog.schedules.by_name.get(stmt.name)
    if s is None:
        if stmt.if_exists:
            return {"message": f"schedule `{stmt.name}` does not exist"}
        raise FenecError("notfound", f"no schedule `{stmt.name}`")
    if scope is not None and not scope.grants(s.collection).has(GRANT):
        raise _denied(s.collection)
    now = catalog.now()
    verb = stmt.verb
    if verb == "drop":
        _keep(catalog, s, blk, None)
        return {"message": f"schedule `{s.name}` dropped"}
    if verb == "fire":
        written = _fire(catalog, s, blk, now, s.due, now, by_hand=True)
        return {"message": f"schedule `{s.name}` fired", "affected": written}
    paused = verb == "pause"
    if s.paused == paused:
        return {"message": f"schedule `{s.name}` is {'paused' if paused else 'running'} already"}
    state = s.state()
    state["paused"] = paused
    if not paused and s.due <= now:  # nothing made up for the pause: on at the first due time after now
        state["due"] = s.at_or_after(now + 1)
    _keep(catalog, s, blk, state)
    return {"message": f"schedule `{s.name}` {'paused' if paused else 'resumed'}"}


def _create(catalog: Catalog, text: str, stmt: A.CreateSchedule, blk: Block) -> Any:
    if stmt.name in catalog.schedules.by_name:
        if stmt.if_not_exists:
            return {"message": f"schedule `{stmt.name}` exists"}
        raise FenecError("exists", f"schedule `{stmt.name}` exists")
    if len(stmt.name) > A.MAX_NAME:
        raise FenecError("query", f"a name is at most {A.MAX_NAME} characters")
    _checked(stmt)
    if A.highest_param(stmt.put) > 1:
        raise FenecError("query", "a schedule's put reads one parameter, `$1`: the due time it fires for")
    now = catalog.now()
    s = Schedule(text, stmt, now)
    s.plan(catalog)  # the put's collection and fields checked now, not at its first due time
    s.due = s.after(now)
    _keep(catalog, s, blk, s.state(), created=True)
    return {"message": f"schedule `{stmt.name}` created"}


def _keep(catalog: Catalog, s: Schedule, blk: Block, state: dict | None, created: bool = False) -> None:
    """Set `s` to `state` (None: drop it) in memory and in the block's record, undone with the block."""
    by_name = catalog.schedules.by_name
    before = None if created else s.state()

    def undo() -> None:
        if before is None:
            by_name.pop(s.name, None)
        else:
            s.load(before)
            by_name[s.name] = s
    blk.schema_undo.append(undo)
    if state is None:
        by_name.pop(s.name, None)
    else:
        s.load(state)
        by_name[s.name] = s
    blk.ops.append(("h", s.name, state))
    changed = catalog.schedules.changed
    if changed is not None:
        try:
            changed()
        except Exception:  # a timer gone (its loop closed): the write stands, nothing to wake
            pass


def _fire(catalog: Catalog, s: Schedule, blk: Block, due: int, next_due: int, now: int,
          by_hand: bool = False) -> int:
    """Run the put for `due` and keep the state saying so (next due at `next_due`), in `blk`. A
    put refused by hand is raised; by the timer it is kept as the schedule's error."""
    error = None
    written = 0
    put = Block()  # the put's own part: put back alone when it is refused
    try:
        env = Env([V.Ts(due)], V.Ts(now))
        ans = run_put(catalog, s.plan(catalog), env, put)
        written = int(ans.get("affected", 0))
    except FenecError as e:
        put.rollback()
        if by_hand:
            raise
        error = e.message
    else:
        blk.undo.extend(put.undo)
        blk.ops.extend(put.ops)
        for coll, nid in put.ids.items():
            blk.ids.setdefault(coll, nid)
        blk.touched.update(put.touched)
        blk.writes += put.writes
    state = s.state()
    state.update(due=next_due, fired_at=now, fires=s.fires + 1, error=error)
    if error is None:
        state["fired"] = due
    _keep(catalog, s, blk, state)
    catalog.schedules.fired += 1
    return written


# ---------------------------------------------------------------- firing


Write = Callable[[Callable[[Block], Any]], Any]  # the engine's one writer: fn(blk) as a write of its own


def fire_due(catalog: Catalog, write: Write) -> int:
    """Fire every due time that has come (module doc), each fire its own record, made by `write`
    (engine.py `run_write`); answer how many fired. Nothing while `firing` is off; the caller
    fires nothing on a read-only, failed or closed database (`Database.fire_due`)."""
    sch = catalog.schedules
    if not sch.firing or not sch.by_name:
        return 0
    now = catalog.now()
    n = 0
    for name in [s.name for s in list(sch.by_name.values()) if not s.paused and s.due <= now]:
        while sch.firing:
            got = write(partial(_fire_next, catalog, name, now))
            if got is None:
                break
            n += got
    return n


def _fire_next(catalog: Catalog, name: str, now: int, blk: Block) -> int | None:
    """Under the write lock: the next step of one schedule due at `now` (None: none is due).
    Answers the fires it made (0 for a skip of missed due times)."""
    s = catalog.schedules.by_name.get(name)
    if s is None or s.paused or s.due > now:
        return None
    late = now - GRACE_MS
    if s.due < late:  # missed: the policy, then on at the first due time not missed
        going_on = s.at_or_after(late)
        if s.stmt.missed == "once":
            _fire(catalog, s, blk, s.due, going_on, now)
            return 1
        state = s.state()
        state["due"] = going_on
        _keep(catalog, s, blk, state)
        return 0
    _fire(catalog, s, blk, s.due, s.after(s.due), now)
    return 1


def show(catalog: Catalog, scope: Scope | None) -> list[dict]:
    """`show schedules`: a row per schedule, by name; under a token, those whose collection it may
    read or schedule into."""
    out = []
    for name in sorted(catalog.schedules.by_name):
        s = catalog.schedules.by_name[name]
        if scope is not None:
            g = scope.grants(s.collection)
            if not (g.has("read") or g.has(GRANT)):
                continue
        out.append({
            "name": s.name, "spec": s.spec(), "zone": s.zone if s.stmt.cron is not None else None,
            "next_due": V.format_time(s.due), "last_fired": None if s.fired is None else V.format_time(s.fired),
            "paused": s.paused, "missed": s.stmt.missed, "collection": s.collection, "fires": s.fires,
            "error": s.error,
        })
    return out


# ---------------------------------------------------------------- the log


def replay(catalog: Catalog, name: str, state: dict | None) -> None:
    """An `["h", name, state]` op read back (a record's, or a snapshot's entry)."""
    by_name = catalog.schedules.by_name
    if state is None:
        by_name.pop(name, None)
        return
    s = by_name.get(name)
    if s is None or s.text != state["text"]:
        stmt = parse(state["text"])[0]
        if not isinstance(stmt, A.CreateSchedule):
            raise FenecError("io", f"schedule `{name}` is kept with a statement that creates none")
        s = Schedule(state["text"], stmt, int(state["due"]))
    s.load(state)
    by_name[name] = s


def snapshot(catalog: Catalog) -> list:
    return [[name, s.state()] for name, s in catalog.schedules.by_name.items()]


# ---------------------------------------------------------------- an in-process timer


class Firer(Protocol):
    """What the timer needs of its database (database.py): its schedules, its clock, whether it is
    closed or failed, and `fire_due`."""

    @property
    def schedules(self) -> Schedules: ...

    @property
    def closed(self) -> bool: ...

    @property
    def failed(self) -> str | None: ...

    def until(self, moment: int) -> float: ...

    def fire_due(self) -> int: ...


RECHECK_S = 60.0  # a firer looks at the schedules again at least this often


def sleep_s(db: Firer) -> float:
    """How long a firer (the timer below, the HTTP server's task: cli.py `fire_schedules`) sleeps:
    until the earliest due time, at most RECHECK_S."""
    nxt = db.schedules.next_due()
    return RECHECK_S if nxt is None else max(0.0, min(RECHECK_S, db.until(nxt)))


class Timer:
    """A thread firing `db`'s schedules at their due times, for an in-process database on the
    wall clock: it sleeps `sleep_s` (woken sooner when a schedule is made or changed), then calls
    `fire_due`."""

    def __init__(self, db: Firer) -> None:
        import threading

        self._db = db
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="fenecdb-schedules", daemon=True)
        self._started = False
        self._mutex = threading.Lock()

    def poke(self) -> None:
        """A schedule was made or changed: start the thread the first time, else wake it."""
        with self._mutex:
            if not self._started and not self._stop:
                self._started = True
                self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._started:
            self._thread.join(5)

    def _run(self) -> None:
        import logging

        db = self._db
        while not self._stop:
            self._wake.wait(sleep_s(db))
            self._wake.clear()
            if self._stop or db.closed:
                return
            try:
                db.fire_due()
            except FenecError as e:
                logging.getLogger("fenecdb.schedules").warning("firing schedules: %s", e.message)
                if db.failed is not None:
                    return
