"""bench/server_cost.py's reading of a cache-simulating callgrind dump: `python -m pytest bench/test_server_cost.py`."""

from __future__ import annotations

from pathlib import Path

import pytest
from server_cost import cache_misses  # bench/ is the test's folder, on the path

# two libraries: the compiled engine (a hashed mypyc name) calls into the interpreter; the cost line after
# `calls=` is the call's inclusive cost, already counted where it was spent, and must not be counted again
DUMP = """\
version: 1
creator: callgrind-3.19.0
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
ob=(1) /x/server/src/0123456789abcdef0123__mypyc.cpython-311-x86_64-linux-gnu.so
fl=(1) native.c
fn=(1) CPyDef_engine___Engine___execute
10 100 0 0 4 2 0 3 1 1
cob=(2) /usr/lib/libpython3.11.so.1.0
cfl=(2) ceval.c
cfn=(2) _PyEval_EvalFrameDefault
calls=1 20
11 900 0 0 40 20 0 30 10 10
+1 50 0 0 2 1 0 1 1 0
ob=(2)
fl=(2)
fn=(2)
20 900 0 0 40 20 0 30 10 10
"""


def test_misses_are_counted_where_they_were_spent_and_named_by_library(tmp_path: Path) -> None:
    dump = tmp_path / "out"
    dump.write_text(DUMP)
    got = cache_misses(str(dump), 2)
    # the engine's own lines: 3+1+1 and 1+1+0; the interpreter's 30+10+10, once (not again from the call)
    assert got["ll_misses_by_library"] == {"libpython3.11": 25, "engine": 4}
    assert got["ll_misses"] == 28  # (7 + 50) / 2, rounded
    assert got["l1_code_misses"] == 23  # (4 + 2 + 40) / 2
    assert got["l1_data_misses"] == 12  # (2 + 1 + 20) / 2, rounded


def test_a_dump_without_the_simulation_is_refused(tmp_path: Path) -> None:
    dump = tmp_path / "out"
    dump.write_text("events: Ir\nob=(1) /usr/lib/libc.so.6\nfn=(1) f\n1 10\n")
    with pytest.raises(RuntimeError, match="no cache simulation"):
        cache_misses(str(dump), 1)
