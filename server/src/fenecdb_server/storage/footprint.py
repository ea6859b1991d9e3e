"""How many bytes of the data file are dead: what a compaction would give back (server.md §1.2, §9).

The estimate, and why it is cheap:

    live  = what a snapshot of the current state would take, estimated as
            fixed part (file header, snapshot framing, each schema)
            + Σ over collections  documents × mean bytes of one row in that collection
            + Idempotency-Keys held × mean bytes of one key and its stored answer
    dead  = file bytes − live          (never below 0)

The means are measured, never guessed. A compaction (and an open that loads a snapshot)
sets them exactly: the snapshot writes each collection's row bytes and its key bytes beside
its data, so `bytes / documents` is the true mean at that moment. Every record appended or
replayed since then moves the means: a record's bytes, less its framing and the small fixed
parts of its ops, are shared out among the row versions it holds, and each version moves its
collection's mean by 1/W, W growing to the collection's document count. The row mean is
thus a mean over about the last "documents" versions written, which in a queue (every
claim rewrites its job) are close to the rows alive now: it follows jobs that grow as they
are claimed and failed, where a mean over all history would lag. It costs a few additions
per record; nothing is re-encoded and no row's size is kept.

What counts as dead: every superseded version of a row (a claim, an extend, a failure rewrite
the job), every tombstone and the version it buried, every stored answer of a key since
swept or replaced, and all of each record's framing. Rows past their @ttl that the sweeper
has not deleted yet are still live: a compaction now would copy them.

It is an estimate: a collection whose rows vary widely in size and whose recent writes
differ from its average is off by that difference, and the few bytes of a tombstone or of
a schema change are approximated. After a compaction it reads close to zero, and on a file
full of rewrites it reads close to what the compaction then gives back (tests check both).

This module knows collection names and byte counts only; the engine's rows never reach it.
"""

from __future__ import annotations

from collections.abc import Callable

from .format import FILE_HEADER_SIZE, RECORD_HEADER_SIZE

_RECORD_ENVELOPE = len('{"s":,"o":[]}')  # plus the digits of the seq, and a comma between ops
_SNAPSHOT_FIXED = FILE_HEADER_SIZE + RECORD_HEADER_SIZE + len('{"s":,"colls":[],"queues":[],"idem":[]}') + 12
_COLL_FIXED = len('{"schema":,"next":,"bytes":,"rows":},') + 12
_KEY_OP_FIXED = 64 + 40  # the request hash in hex, status, time, ttl, quotes and commas
_P_OP_EXTRA = len('"p","",')  # a version in a record, beyond its snapshot form, plus the name
_OTHER_OP = 24  # a tombstone, a dropped key, a next id: a few bytes plus a name


class Footprint:
    """Running means of a row's bytes per collection and of a key's bytes (see the module doc)."""

    __slots__ = ("_mean", "_weight", "_key_bytes", "_keys")

    def __init__(self) -> None:
        self._mean: dict[str, float] = {}  # bytes of one row, per collection
        self._weight: dict[str, int] = {}  # versions behind that mean, at most the documents
        self._key_bytes = 0.0
        self._keys = 0

    def calibrate(self, rows: dict[str, tuple[int, int]], keys: tuple[int, int]) -> None:
        """Set the means from a snapshot: per collection (row bytes, rows), and (key bytes, keys)."""
        self._mean = {name: b / n for name, (b, n) in rows.items() if n}
        self._weight = {name: n for name, (_, n) in rows.items() if n}
        self._key_bytes, self._keys = float(keys[0]), keys[1]

    def record(self, size: int, seq: int, ops: list, documents: Callable[[str], int]) -> None:
        """Account one write record of `size` payload bytes whose ops are in the log's JSON form
        (engine/records.py: `["p", coll, id, row]`, `["k", key, hash, at, ttl, answers]`, ...);
        `documents(name)` is the collection's row count (the window of its mean)."""
        rest = size - _RECORD_ENVELOPE - len(str(seq))
        first: list = ops[0] if len(ops) == 1 else []
        if first and first[0] == "p":  # a put, a claim of one, an update: one row, no tally
            name: str = first[1]
            self._move(name, float(max(rest - _P_OP_EXTRA - len(name), 0)), 1, max(documents(name), 1))
            return
        single = ""  # the collection of every row so far, while they are of one (a claim's, a bulk put's)
        rows: dict[str, int] = {}  # rows written per collection, once they are of more than one
        n = 0
        op: list  # an op is a list and its kind a str: the compiled loop indexes and compares them so
        kind: str
        for op in ops:
            kind = op[0]
            if kind == "p":
                name = op[1]
                n += 1
                rest -= _P_OP_EXTRA + len(name)
                if n == 1:
                    single = name
                elif single and name != single:
                    rows[single] = n - 1
                    single = ""
                if not single:
                    rows[name] = rows.get(name, 0) + 1
            elif kind == "d":  # a tombstone (an ack's): counted as `else` counts the rarer kinds, tested before them
                rest -= _OTHER_OP + len(op[1])
            elif kind == "k":
                kept = op[5] if len(op) == 6 else op[4]  # the answers; an older file's body text
                key = len(op[1]) + len(kept if type(kept) is str else str(kept)) + _KEY_OP_FIXED
                self._key_bytes += key
                self._keys += 1
                rest -= key
            elif kind == "c" or kind == "i" or kind == "T":  # T: a failover term, a number (records.py)
                rest -= len(str(op))
            else:
                rest -= _OTHER_OP + len(op[1])
        if not n:
            return
        share = max(rest, 0) / n
        if single:
            self._move(single, share, n, max(documents(single), 1))
            return
        for name, k in rows.items():
            # a collection's updates depend on its own alone, so they are made one collection at a
            # time, in the order of its rows, as one row at a time would
            self._move(name, share, k, max(documents(name), 1))

    def _move(self, name: str, share: float, k: int, cap: int) -> None:
        """`k` rows of `name` move its mean toward `share`, each weighted by the rows seen (at most
        `cap`, the collection's documents)."""
        w = self._weight.get(name, 0)
        m = self._mean.get(name, share)
        for _ in range(k):
            w = min(w + 1, cap)
            m += (share - m) / w
        self._weight[name] = w
        self._mean[name] = m

    def row_bytes(self, name: str) -> float:
        """The estimated bytes of one of the collection's rows in a snapshot."""
        return self._mean.get(name, 0.0)

    def live(self, documents: dict[str, int], schema_bytes: dict[str, int], keys: int) -> dict[str, int | dict[str, int]]:
        """Estimated live bytes: the whole snapshot (`"total"`) and each collection's rows."""
        per = {name: int(docs * self.row_bytes(name)) for name, docs in documents.items()}
        key_mean = self._key_bytes / self._keys if self._keys else 0.0
        total = (_SNAPSHOT_FIXED + sum(per.values()) + int(keys * key_mean)
                 + sum(b + _COLL_FIXED for b in schema_bytes.values()))
        return {"total": total, "collections": per}
