"""The bytecodes of one wake of a held claim, in process: a put that the claim matches, the wake
pass, the look (or the check that stands for it) and the run, to the claim's answer.

It drives `held/`'s lines with the unit tests' fake driver on a clock that stands still
(`server/tests/unit/test_held.py`'s `World`), holds one claim, and counts the opcode events
(`sys.settrace` with `f_trace_opcodes`) of `put` + the drain of the driver; the median of five
cycles after three to warm up. Run it on the sources (`FENECDB_PURE_PYTHON=1`): compiled modules
run no bytecodes. `bench/README.md` records the count.

    FENECDB_PURE_PYTHON=1 .venv/bin/python bench/wake_bytecodes.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from opcode_count import traced  # run as a script: bench/ is on the path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server" / "tests"))
from unit.test_held import World  # noqa: E402  (the unit tests' fake driver)


def main() -> int:
    w = World()
    got = []
    for i in range(8):
        w.hold(f"w{i}")
        got.append(traced(w.put)[1].ops)
        assert f"w{i}" in w.answers
    print(f"a wake cycle (put, wake, run): {statistics.median(got[3:]):.0f} bytecodes (median of 5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
