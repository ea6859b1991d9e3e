"""The `--sync` policies and the periodic syncer.

    policy    append() hands the bytes to the OS    durable when
    always    yes, under the engine's write lock    wait_durable() returns: an fdatasync that
                                                    started after the append has completed;
                                                    on the server's loop, before the answer
                                                    is sent (its turn's fdatasync, below)
    <ms>      yes                                   the syncer's next fdatasync, <= ms later
    off       yes                                   close() (or whenever the OS writes back)

Because every policy hands the bytes to the OS inside `append`, a process kill (not a power
loss) loses nothing acknowledged under any policy; the policies differ only in what a power
loss or OS crash may take (server.md §3).

Group commit (`Log.wait_durable` under `always`, in threads: the in-process `Database`): the
fdatasync runs with no lock held. The first waiter whose record is not yet durable becomes
the leader: it notes how many records have been appended so far, fdatasyncs, and marks all
of those durable; waiters that arrive meanwhile sleep, and the next leader's fdatasync covers
all of them at once. N concurrent writers thus share one fdatasync instead of queueing for N.

One fdatasync a loop turn (the HTTP server, `http/durable.py`): its writes run on the event
loop inside `Log.deferred()`, where `wait_durable` notes the ticket instead of waiting; the
answer is kept pending, and once the turn's requests have run, one `Log.sync_upto` (the same leader
step) covers every record appended in the turn before any of their answers goes out. The scope
defers on the loop's thread alone: a write that runs in a thread meanwhile (a large request,
the sweeper) takes the leader step itself, even inside it; either covers the other's records.

The periodic syncer wakes every <ms>; when nothing is dirty it does nothing at all (reads two
counters, takes no lock); otherwise it runs the same leader step as a waiter would.

A sync is fdatasync where the OS has it: the file is preallocated (`log.py`), so an append
changes data only, and fdatasync leaves the inode's times alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Policy = str | int  # "always" | "off" | milliseconds


def parse_policy(sync: object) -> Policy:
    """`always`/`on`, `off`/`none`, or a positive number of milliseconds (int or digits)."""
    if isinstance(sync, str):
        word = sync.strip().lower()
        if word in ("always", "on"):
            return "always"
        if word in ("off", "none"):
            return "off"
        if word.isdigit():
            sync = int(word)
    if isinstance(sync, int) and not isinstance(sync, bool) and sync > 0:
        return sync
    raise ValueError("--sync expects off, always or <ms>")


def describe(policy: Policy) -> str:
    """The start-up line's words for a policy (server.md §4)."""
    if policy == "always":
        return "every write"
    if policy == "off":
        return "on shutdown"
    return f"{policy} ms"


class Syncer:
    """A daemon thread calling `sync()` every `interval_ms` while `dirty()` is true."""

    def __init__(self, interval_ms: int, dirty: Callable[[], bool], sync: Callable[[], None]) -> None:
        self._interval = interval_ms / 1000
        self._dirty = dirty
        self._sync = sync
        self._stop = threading.Event()
        self.rounds = 0  # wake-ups that found something dirty
        self._thread = threading.Thread(target=self._run, name="fenecdb-syncer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if self._dirty():
                self.rounds += 1
                self._sync()

    def stop(self) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()
