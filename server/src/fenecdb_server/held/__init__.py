"""Held claims: claims that wait for rows (`Fenec-Wait`, `Database.query(..., wait=ms)`), between
the engine and the HTTP app.

    lines.py       the waiting lines and their fairness contract (the rules, at its top)
    write_wakes.py what a committed write wakes, oldest head first
    row_checks.py  a written (or due) row checked against a line's filter, lines indexed for it
    looks.py       a look, and the gap after one that found nothing
    time_wakes.py  a line asleep until the clock alone may give it a row
    bidding.py     who gets the job when claims rank it each their own way
    written.py     the ids each write put, kept while claims bid (fed by the engine's write observer)
    port.py        what the package needs from the engine, a ready claim and a driver (Protocols)
    on_asyncio.py  the driver on an event loop (http/app.py holds requests on it)
    on_threads.py  the driver on a thread of its own
    in_process.py  `Database.query(..., wait=ms)`: a caller's thread blocked on its answer

The state is plain Python, driven by a clock and timers a driver gives it: the unit tests drive it
with a fake clock. The engine answers what a claim would take (`engine/holds.py`, `engine/bids.py`);
nothing here reads rows.
"""

from .lines import MAX_WAIT_MS, HeldClaim, HeldClaims, Line, Outcome

__all__ = ["MAX_WAIT_MS", "HeldClaim", "HeldClaims", "Line", "Outcome"]
