"""Looks (fairness rules 2 and 3 of lines.py): what a woken line spends before its head may run.

A look is one read under the engine's shared lock (`Claim.would_take`, or for lines that bid,
`engine/bids.py`'s `look_all` over them all): whether some row is there for the line, without
writing. One look stands for the whole line. A look that found nothing opens a gap of
LOOK_THROTTLE_S in which writes do not make that line look again; they are remembered and
answered by one look at the gap's end. The gap is read on the driver's clock, which may count
in steps of CLOCK_GRAIN_S: a timer can fire while the clock still reads up to that much before
its time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .port import Claim, EnginePort

LOOK_THROTTLE_S = 0.001
CLOCK_GRAIN_S = 0.001  # uvloop's clock counts whole milliseconds


def would_take(engine: EnginePort, claim: Claim) -> bool:
    """One look; one that raises counts as finding a row (the head's run answers the error)."""
    try:
        return engine.look(claim.would_take)
    except Exception:
        return True
