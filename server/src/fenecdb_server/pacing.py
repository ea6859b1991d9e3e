"""How a statement run in a worker thread shares the interpreter with the server's event loop.

The interpreter hands the GIL from a thread to another one waiting for it at its switch points
(every `sys.getswitchinterval()`), which only bytecode passes. The modules compiled with mypyc
(setup.py) run no bytecode: a statement of a hundred thousand rows run in a worker thread would
hold the GIL from its first row to its last, and the loop answer no `/_health` meanwhile. So every loop
of the engine over a statement's rows, documents or lines that may pass PACE_ROWS works PACE_ROWS
of them at a time and calls `hand_over` between two such chunks: the event loop waits for the GIL
at most one chunk's work and the switch interval. It is counted in rows, not time, and the event
loop's own statements never reach it: they stop at as many rows (http/app.py, LOOP_ROWS), and a
hand-over comes only between two chunks.

`hand_over` lets the GIL go with `os.sched_yield()`: a thread that asked for it past the switch
interval takes it then (the interpreter switches by force when asked), and this thread takes it
back after it. With nobody waiting it costs one system call, where `time.sleep(0)` (database.py's
`_hand_over`, for a snapshot's encoding) costs its timer's slack, which at every chunk of every
loop of a large claim would have cost a large share of its run (bench/README.md, "Numbers the
code's comments used to carry").
"""

from __future__ import annotations

import os
import threading
from typing import Final

# Rows, documents or statements worked between two hand-overs: the event loop's own ceiling
# (http/app.py LOOP_ROWS), so a statement run there never hands over. `Final`: the compiled loops read
# it at every row (server/README.md, Compiled modules, rule 5).
PACE_ROWS: Final = 1_000


def hand_over() -> None:
    """The GIL to a thread waiting for it, if there is another thread (none in a plain process)."""
    if threading.active_count() > 1:
        os.sched_yield()
