"""What held claims need from the engine, from a ready claim and from whoever drives them.

The held package never holds the database: it talks to three small interfaces, typed here.

* `EnginePort`: the change counter, the clock in ms, a run under the shared read lock, the write
  announcements, and a write observer (each committed write's ops) while claims bid. `Database` (and the
  engine behind it) answers these; a unit test answers them with a dict and a fake clock.
* `Claim`: a claim's statements made ready by the engine (`prepare_hold`: `engine/holds.py`'s
  `HeldStatements`): its line, the collections whose writes concern it, and two reads made under the
  read lock the caller holds (`would_take`, `next_moment`), plus what it bids with, and what a
  written row is checked with (`wakes`, `takes`, `moment_of`: lines.py rule 2). A claim whose
  `wakes()` is None is woken by every write to its collections, as a line that must look.
* `Queries`: the engine with `execute` and `prepare_hold`, for claims held in process.
* `Driver`: where the state runs. It gives the clock the look gaps and deadlines are read on
  (seconds), timers, a hop onto its own thread of control from any thread (an announcement
  comes from the writer's thread, under the write lock), a short settling pause (the client
  that left is seen gone before a head runs), and the run of a held claim, which may take
  time (asyncio: a task; threads: the driver's thread). `on_asyncio.py` and `on_threads.py`
  are the two drivers; the unit tests drive the state with a fake one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from ..engine.bids import Profile
    from .lines import HeldClaim, Outcome

T = TypeVar("T")
A = TypeVar("A")

Announce = Callable[[frozenset[str], int], None]


class EnginePort(Protocol):
    @property
    def seq(self) -> int:
        """The number of the last committed change."""
        ...

    def now(self) -> int:
        """The clock rows are compared with, in ms (`now()`)."""
        ...

    def until(self, moment: int) -> float:
        """Seconds from now to `moment` on that clock, as precisely as it can tell."""
        ...

    def look(self, fn: Callable[[], T]) -> T:
        """`fn()` under the shared read lock."""
        ...

    def listen(self, callback: Announce) -> None:
        """Call `callback(collections written, seq)` after each committed write, in the
        writer's thread and under its lock: it must only note, never read or write."""
        ...

    def unlisten(self, callback: Announce) -> None:
        ...

    def observe(self, note: Callable[[int, list], None]) -> int:
        """Call `note(seq, ops)` after each committed write, under the write lock (it only
        notes); returns the change it starts after. Bidding keeps the ids written with it."""
        ...

    def unobserve(self, note: Callable[[int, list], None]) -> None:
        ...


class Claim(Protocol):
    @property
    def line_key(self) -> Hashable:
        """Claims with one key would take the same rows: they wait in one line."""
        ...

    @property
    def collections(self) -> frozenset[str]:
        """The collections a write to which may give the claim something."""
        ...

    def would_take(self) -> bool:
        """Under the read lock: would the claim take a row now?"""
        ...

    def next_moment(self) -> int | None:
        """Under the read lock: the next ms at which the clock alone may give it a row."""
        ...

    def bid_profile(self) -> Profile | None:
        """What its line bids with (engine/bids.py), None for a claim that cannot bid."""
        ...

    @property
    def plain(self) -> bool:
        """One set/del and nothing else: a run that took nothing saw no row pass its filter."""
        ...

    def wakes(self) -> list[tuple[str, tuple[str, ...], tuple[Hashable, ...]]] | None:
        """Per set/del: (collection, fields, values) of the equality terms every row it could
        take carries, in field order (both empty: none); None: it cannot say (every write wakes
        it)."""
        ...

    def takes(self, collection: str, rid: int) -> bool:
        """Under the read lock: would some set/del take the row of id `rid` in `collection` (one
        just written), as it is now? False when it is gone."""
        ...

    def moment_of(self, collection: str, rid: int) -> int | None:
        """Under the read lock: the next ms at which the clock alone may change that for the row."""
        ...

    def came_due(self, since: int) -> tuple[int, list[tuple[str, int]]] | None:
        """Under the read lock: the clock now, and the rows the clock alone brought into the
        set/dels' filters after the moment `since`; None when it cannot say (a look must read)."""
        ...


class HeldStatements(Claim, Protocol):
    @property
    def held(self) -> bool:
        """Whether the claim may wait at all (it holds a `set` or `del`)."""
        ...


class Result(Protocol):
    @property
    def answers(self) -> Sequence[object]:
        ...

    @property
    def taken(self) -> int:
        """How many rows its `set`s and `del`s took."""
        ...


class Queries(EnginePort, Protocol):
    """The engine as an in-process caller's held claim uses it (in_process.py)."""

    def execute(self, statements: list[tuple[str, object]], *, block: bool = False) -> Result:
        ...

    def prepare_hold(self, statements: list[tuple[str, object]]) -> HeldStatements:
        """The claim made ready to wait; raises the error a held claim of it is refused with."""
        ...


class Timer(Protocol):
    def cancel(self) -> None:
        ...


class Driver(Protocol[A]):
    def time(self) -> float:
        """The driver's monotonic clock in seconds (look gaps, deadlines)."""
        ...

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        ...

    def soon(self, fn: Callable[[], None]) -> None:
        """Run `fn` in the driver's own thread of control, soon; callable from any thread."""
        ...

    def settle(self, fn: Callable[[], None]) -> None:
        """Let what is already on its way land (a client's close), then run `fn`."""
        ...

    def run(self, held: HeldClaim[A], done: Callable[[Outcome[A]], None]) -> None:
        """Run the held claim once; `done(outcome)` in the driver's thread of control."""
        ...
