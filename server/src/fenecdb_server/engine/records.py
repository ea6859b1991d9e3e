"""The log's payload vocabulary: what a record and a snapshot say, encoded and replayed here only.

`storage/log.py` frames and checksums payloads and knows nothing of what they say; this module
is the other half. A write statement or block (with its Idempotency-Key) is one record; a
compaction or a backup writes one snapshot. Both are UTF-8 JSON. A file's records are replayed
one at a time (`replay`); a replica applies a block of its primary's records as their net effect
(`replay_all`), to the same state.

Record: `{"s": S, "o": [op, ...]}`, S the change number once the record is applied (`Engine.seq`:
each write statement of a block counts one; a record of only `k`/`K` ops counts one), and the ops
in the order they were made. Each op is a JSON array, its code first:

    op                                      written by                       replayed as
    ["p", coll, id, row]                    put, insert, upsert, set         the row of that id replaced,
                                            (execute.py, puts.py, scoped.py) or inserted
    ["d", coll, id]                         del (execute.py), the TTL sweep  the row of that id deleted
    ["c", coll, schema]                     create collection                the collection created
    ["x", coll]                             drop collection                  the collection dropped
    ["i", coll, target, kind, ttl_ms]       create index                     the index built
    ["k", key, hash, at, ttl_ms, answers]   a keyed write (engine.py)        the key kept, with the answers
    ["K", key]                              the sweep of expired keys        the key forgotten
    ["h", name, state]                      a schedule created, paused,      the schedule set to
                                            resumed, fired or dropped        `state`, or dropped
                                            (engine/schedules.py)            (state null)
    ["q", coll, queue, state]               pause, resume, limit, unlimit    the queue's controls set
                                            (controls.py)                    to `state`
    ["T", term]                             a server elected primary in a    the catalog's term raised
                                            cluster (replication/cluster.py) to `term`

Fields:
* `coll`: the collection's name. `id`: the row's id, a positive integer.
* `row`: the row's fields but `id`, a field holding null left out (so absent and null read back
  alike); a `timestamp` as epoch ms, `bytes` as lowercase hex, `geo` as `[lon, lat]`, a list of
  bytes as a list of hex (`encode_row`); the schema types each value back (`decode_row`).
* `schema`: `Schema.to_json()`: `{"name", "fields": [{"name", "type", "index", "required"}, ...],
  "indexes": {path: kind}}` (a `@ttl` field carries `ttl_ms`).
* `target`: a field name, or a dotted path into a json field (`payload.n`); `kind`: `sorted`,
  `hash`, `unique`, `geo` or `ttl`; `ttl_ms`: the @ttl duration, null for other kinds.
* `state` (a schedule's): `{"text": the creating statement, "paused", "due": the first due time
  not fired (epoch ms), "fired": the due time of the last fire or null, "fired_at": when it ran,
  "fires": how many, "error": the last fire's refusal or null}`. A fire is the put's `p` ops and
  this op in one record, so a record says both "rows put" and "fired for due time T", or neither.
* `queue`: a queue's name, or null for every job of the collection; `state`: its controls after
  the statement, `{"paused": bool, "limits": [[kind, n, per_ms, by], ...]}` (kind `leased` or
  `claimed`; `per_ms` the window of a `claimed` limit, else null; `by` a field or null), or null
  when none is left (engine/controls.py). An `x` op forgets the collection's controls too.
* `term`: the failover term (a positive integer) whose primary wrote the records after this one,
  until the next `T` op: the first record of each term, so that a replica knows the term of what
  it applies and refuses a stream of a lower one.
* `key`: the Idempotency-Key, already namespaced (http/idempotency.py); `hash`: the request's hash
  in hex; `at`: epoch ms it was stored; `ttl_ms`: how long it is kept; `answers`: the engine's
  answers, one per statement (a list of rows, or an object such as `{"affected": 1}`).
  A file written by a server from before the answers were kept holds
  `["k", key, hash, status, body, at, ttl_ms]`: the HTTP status and body (its bytes decoded with
  `surrogateescape`), replayed as they were (`Stored.raw`). The 7-element form is read, never
  written.

Snapshot: `{"s": S, "colls": [coll, ...], "queues": [[coll, queue, state], ...], "idem": [key, ...],
"idem_bytes": n, "schedules": [[name, state], ...], "term": n}` (`queues` absent in snapshots written
before queue controls; `schedules` left out when there are none, `term` when it is 0), each coll
`{"schema": schema, "next": next_id, "rows": [[id, row], ...], "bytes": n}` (rows in id order,
`bytes` the size of its `rows` array; a row of a collection with no bytes field and no null is
written as it is stored, so it also holds `"id": id`, which reading skips), each key
`[key, hash, at, ttl_ms, answers]` (or, in a file from before the answers were kept,
`[key, hash, status, body, at, ttl_ms]`, as the `k` op's old form); `bytes` and `idem_bytes`
calibrate the dead-bytes estimate (storage/footprint.py) and are absent in the oldest snapshots.

Text: a lone surrogate (an in-process caller's text, a token's claim pinned into a row) is stored
as it is and read back as it was: orjson, which encodes and reads the records, refuses one, and
such a record is encoded by `json` with `surrogatepass` instead, and read back by `json.loads`
(which decodes those bytes the same way). An op code other than these is refused as a corrupt record would be (op `n` was
replayed once but never written by any version).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from ..errors import FenecError
from ..pacing import PACE_ROWS, hand_over
from ..plan.schema import FieldInfo, Schema
from . import schedules
from .collection import Collection
from .execute import decode_row, encode_row
from .idempotency import Keys, Stored

if TYPE_CHECKING:
    from .catalog import Catalog


class State(Protocol):
    """What a record is applied to and a snapshot taken of: the collections (and the schema's
    version, which a record's schema change bumps), the Idempotency-Keys and the change number."""

    catalog: Catalog
    keys: Keys
    seq: int

SNAPSHOT_CHUNK = 100  # rows an encoder call takes (`_rows_json`)


def dumps(value: Any) -> bytes:
    """`value` as UTF-8 JSON: orjson's, or where it refuses (a lone surrogate) json's with
    `surrogatepass`, which reads back the same."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return _slow_dumps(value).encode("utf-8", "surrogatepass")


def _slow_dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loads(payload: bytes) -> Any:
    """A record or snapshot read back: orjson's reading, or json's where orjson refuses the bytes
    (a lone surrogate, written with `surrogatepass`)."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return json.loads(payload)


_CHANGE = re.compile(rb'\{"s":(\d+)[,}]')


def change_of(payload: bytes) -> int:
    """The change number a record or snapshot payload stands at, read off its start (`s` comes
    first) without reading the rest: what a replica acks before it replays the record, and what
    the primary's feed keeps each kept record by."""
    m = _CHANGE.match(payload)
    return int(m.group(1)) if m is not None else int(loads(payload)["s"])


def encode(seq: int, ops: list, collections: dict[str, Collection]) -> tuple[bytes, list]:
    """A block's record payload, and its ops as written (for the footprint, once appended)."""
    out = []
    for i, op in enumerate(ops):
        if i % PACE_ROWS == 0 and i:
            hand_over()  # a statement of many rows, in a worker thread (pacing.py)
        kind = op[0]
        if kind == "p":
            coll = collections.get(op[1])
            out.append(["p", op[1], op[2], encode_row(coll.schema if coll is not None else None, op[3])])
        elif kind == "k":
            s: Stored = op[2]
            out.append(["k", op[1], s.request_hash.hex(), s.at, s.ttl_ms, s.answers])
        else:
            out.append(list(op))
    return dumps({"s": seq, "o": out}), out


def _stored(h: str, at: int, ttl: int, answers: list) -> Stored:
    return Stored(bytes.fromhex(h), answers, None, at, ttl)


def _stored_v1(h: str, status: int, body: str, at: int, ttl: int) -> Stored:
    return Stored(bytes.fromhex(h), None, (status, body.encode("utf-8", "surrogateescape")), at, ttl)


def replay(eng: State, payload: bytes) -> tuple[int, list]:
    """Apply one record to `eng` (opening a file: no lock, no listeners); answer its change
    number and ops."""
    rec = loads(payload)
    _apply(eng, rec)
    return rec["s"], rec["o"]


def _apply(eng: State, rec: dict) -> None:
    """Apply the record `rec`, read, op by op (`replay`)."""
    for op in rec["o"]:
        kind = op[0]
        if kind == "p":
            coll = eng.catalog.collections[op[1]]
            row = decode_row(coll.schema, op[2], op[3])
            old = coll.rows.get(op[2])
            if old is None:
                coll.insert(row, None)
            else:
                coll.replace(old, row, None)
        elif kind == "d":
            coll = eng.catalog.collections[op[1]]
            old = coll.rows.get(op[2])
            if old is not None:
                coll.delete(old, None)
        elif kind == "c":
            eng.catalog.add_collection(Collection(Schema.from_json(op[2])))
        elif kind == "x":
            eng.catalog.remove_collection(op[1])
            eng.catalog.controls.forget(eng.catalog, op[1])
        elif kind == "q":
            eng.catalog.controls.replay(op[1], op[2], op[3])
            eng.catalog.schema_changed()
        elif kind == "i":
            coll = eng.catalog.collections[op[1]]
            target, idx_kind, ttl = op[2], op[3], op[4]
            if "." in target:
                coll.schema.indexes[target] = idx_kind
            else:
                f = coll.schema.fields[target]
                coll.schema.fields[target] = FieldInfo(f.name, f.type, f.required, idx_kind, ttl)
            coll.build_index(target, idx_kind)
            eng.catalog.schema_changed()
        elif kind == "k":
            _put_key(eng, op)
        elif kind == "K":
            eng.keys.forget(op[1])
        elif kind == "h":
            schedules.replay(eng.catalog, op[1], op[2])
        elif kind == "T":
            eng.catalog.term = max(eng.catalog.term, int(op[1]))
        else:
            raise FenecError("io", f"a record of change {rec['s']} holds an unknown op {kind!r}")
    eng.seq = rec["s"]


def _put_key(eng: State, op: list) -> None:
    """A `k` op: an Idempotency-Key and its stored answer (this version's six fields, or v1's)."""
    eng.keys.put(op[1], _stored(*op[2:]) if len(op) == 6 else _stored_v1(*op[2:]))


class _Change:
    """A row's net change over the records read so far: `old` the row before them (None: there
    was none), `data` its last image as the record holds it (None: deleted since)."""

    __slots__ = ("old", "data")

    def __init__(self, old: dict | None, data: dict | None) -> None:
        self.old = old
        self.data = data


class _Net:
    """The row changes of records read and not applied yet, per collection in the order each
    row was first changed (`replay_all`), and the records they came from."""

    __slots__ = ("eng", "colls", "changes", "waiting")

    def __init__(self, eng: State) -> None:
        self.eng = eng
        self.colls: dict[str, Collection] = {}
        self.changes: dict[str, dict[int, _Change]] = {}
        self.waiting: list[tuple[bytes, int, list]] = []

    def of(self, name: str) -> dict[int, _Change]:
        got = self.changes.get(name)
        if got is None:
            self.colls[name] = self.eng.catalog.collections[name]  # KeyError: no such collection, as `replay`
            got = self.changes[name] = {}
        return got

    def put(self, name: str, rid: int, data: dict) -> None:
        changes = self.of(name)
        ch = changes.get(rid)
        if ch is None:
            changes[rid] = _Change(self.colls[name].rows.get(rid), data)
        elif ch.data is not None:
            ch.data = data  # only the last image counts
        else:  # put back after its delete: it goes in after the rows put before, so those go in first
            self.flush(None)
            changes = self.of(name)
            changes[rid] = _Change(self.colls[name].rows.get(rid), data)  # None: deleted by the flush

    def delete(self, name: str, rid: int) -> None:
        changes = self.of(name)
        ch = changes.get(rid)
        if ch is not None:
            ch.data = None
            return
        old = self.colls[name].rows.get(rid)
        if old is not None:
            changes[rid] = _Change(old, None)

    def flush(self, done: list[tuple[bytes, int, list]] | None) -> None:
        """Apply the changes kept; the records waiting are then applied (and go to `done`, the
        change number with them), unless `done` is None (a flush inside a record: they wait on)."""
        for name, changes in self.changes.items():
            if not changes:
                continue
            coll = self.colls[name]
            schema = coll.schema
            rids = list(changes)
            olds: list[dict | None] = []
            news: list[dict | None] = []
            for rid, ch in changes.items():
                olds.append(ch.old)
                data = ch.data
                news.append(None if data is None else decode_row(schema, rid, data))
            coll.apply_net(rids, olds, news)
        self.changes.clear()
        self.colls.clear()
        if done is not None and self.waiting:
            self.eng.seq = self.waiting[-1][1]
            done.extend(self.waiting)
            self.waiting.clear()


def replay_all(eng: State, payloads: list[bytes], done: list[tuple[bytes, int, list]]) -> None:
    """Apply records in order (a replica's block of them, replication/follower.py), leaving `eng` as
    `replay` of each in turn would: the same rows, in the same order of ids in each collection,
    the same index entries, id counters, Idempotency-Keys and change number. Each applied record
    goes to `done` as (payload, change, ops), in order.

    Their net effect is applied, not each record: a row's puts and delete over a run of records are
    taken to its last state first (a job claimed and then acked: one delete of the row as it was
    before), and that state is applied once per row (`Collection.apply_net`), each row's image
    decoded once. A record with any op but `p`, `d`, `k` and `K` (a schema's change, a queue's
    controls, a schedule, a term) is applied alone, after the net effect of those before it, as
    `replay` applies it; so is a row put again after its delete, after the changes before it
    (so that it comes after them in its collection's order of rows, as an insert then would).
    Keys are applied as their records are read: no row op reads them.

    A record that fails to apply (an unknown collection or op: never on a primary's stream) raises,
    with the records before it applied and in `done`, and the change number theirs; its own ops
    that were read may have been applied, as `replay` leaves a record that fails halfway."""
    net = _Net(eng)
    op: list  # an op is a list and its kind a str: the compiled loops index and compare them so
    kind: str
    try:
        for payload in payloads:
            rec: dict = loads(payload)
            ops: list = rec["o"]
            seq: int = rec["s"]
            for op in ops:
                kind = op[0]
                if kind != "p" and kind != "d" and kind != "k" and kind != "K":
                    net.flush(done)
                    _apply(eng, rec)
                    done.append((payload, seq, ops))
                    break
            else:
                for op in ops:
                    kind = op[0]
                    if kind == "p":
                        net.put(op[1], op[2], op[3])
                    elif kind == "d":
                        net.delete(op[1], op[2])
                    elif kind == "k":
                        _put_key(eng, op)
                    else:
                        eng.keys.forget(op[1])
                net.waiting.append((payload, seq, ops))
    finally:  # the failing record, if one failed, is not among those waiting
        net.flush(done)


# ---------------------------------------------------------------- snapshots


def snapshot_state(eng: State) -> dict:
    """Under a lock: a consistent copy (rows are immutable, so a shallow one)."""
    return {
        "s": eng.seq,
        "colls": [(c.schema.to_json(), c.next_id, dict(c.rows)) for c in eng.catalog.collections.values()],
        "idem": list(eng.keys.items()),
        "schedules": schedules.snapshot(eng.catalog),
        "queues": eng.catalog.controls.to_json(),
        "term": eng.catalog.term,
    }


def _key_json(key: str, s: Stored) -> list:
    if s.raw is not None:  # read from an older file: kept as it was
        status, body = s.raw
        return [key, s.request_hash.hex(), status, body.decode("utf-8", "surrogateescape"), s.at, s.ttl_ms]
    return [key, s.request_hash.hex(), s.at, s.ttl_ms, s.answers]


def encode_snapshot(state: dict, pause: Callable[[], None] | None = None) -> tuple[list[bytes], dict]:
    """The snapshot payload as its parts, to be written one after another (their concatenation is
    the payload), and the sizes it measured on the way (for `Footprint.calibrate`). Never joined
    here: a million rows are tens of MB, and each whole copy held the interpreter lock for tens of
    ms, with the server's requests waiting (storage/compaction.py joins them a MiB at a time)."""
    sizes: dict = {}
    parts = list(snapshot_pieces(state, pause, sizes))
    return parts, sizes


def snapshot_pieces(state: dict, pause: Callable[[], None] | None = None,
                    sizes: dict | None = None) -> Iterator[bytes]:
    """The snapshot payload of `state` (`snapshot_state`), a piece at a time: no piece holds more
    than SNAPSHOT_CHUNK rows, so a caller that writes each piece where it goes (a backup's
    temporary file) holds one chunk at a time, whatever the size of the database. Each
    collection's `bytes` follows its `rows`, counted as they went by. `sizes`, when given, gets
    what `encode_snapshot` answers besides the parts."""
    rows_sizes: dict[str, tuple[int, int]] = {}
    yield b'{"s":%d,"colls":[' % int(state["s"])
    for n, (schema_json, next_id, rows) in enumerate(state["colls"]):
        schema = Schema.from_json(schema_json)
        yield b'%b{"schema":%b,"next":%d,"rows":' % (b"," if n else b"", dumps(schema_json), int(next_id))
        nbytes = 0
        for piece in _rows_pieces(schema, rows, pause):
            nbytes += len(piece)
            yield piece
        rows_sizes[schema_json["name"]] = (nbytes, len(rows))
        yield b',"bytes":%d}' % nbytes
    idem_json = dumps([_key_json(k, s) for k, s in state["idem"]])
    idem_bytes = len(idem_json)
    yield b'],"queues":%b,"idem":%b,"idem_bytes":%d' % (dumps(state.get("queues") or []), idem_json, idem_bytes)
    scheduled = state.get("schedules")
    if scheduled:
        yield b',"schedules":%b' % dumps(scheduled)
    term = int(state.get("term") or 0)
    yield b',"term":%d}' % term if term else b"}"
    if sizes is not None:
        sizes["rows"] = rows_sizes
        sizes["keys"] = (idem_bytes, len(state["idem"]))


def _rows_json(schema: Schema, rows: dict, pause: Callable[[], None] | None = None) -> bytes:
    """A collection's rows as the snapshot's JSON array (`_rows_pieces` joined)."""
    return b"".join(_rows_pieces(schema, rows, pause))


def _snapshot_row(schema: Schema, row: dict) -> dict:
    """A row as a snapshot holds it: where no field holds bytes (`Schema.plain`) and no value is
    null, the row as it is stored, its id included (the id is not a field, so reading skips it;
    orjson writes every other value as `encode_row` would have made it, a geo tuple as an array),
    without the copy `encode_row` makes: a snapshot encodes faster, for some more bytes (each id
    written twice; bench/README.md, "A compaction's snapshot without copies")."""
    if schema.plain:
        for v in row.values():
            if v is None:
                return encode_row(schema, row)
        return row
    return encode_row(schema, row)


def _rows_pieces(schema: Schema, rows: dict, pause: Callable[[], None] | None = None) -> Iterator[bytes]:
    """A collection's rows as the pieces of the snapshot's JSON array, encoded SNAPSHOT_CHUNK rows
    per call, `pause()` after each: one encoder call holds the GIL for its whole run, so over a
    whole collection at once it kept every other thread (the event loop, in the server) waiting
    for all of it; between chunks they run. The server's compaction pauses with `time.sleep(0)`,
    which hands the GIL to a thread waiting for it (`Database.compact`). A small chunk is also the
    faster one (bench/README.md, "Numbers the code's comments used to carry").
    scripts/compaction_pause.py measures what a writer waits during a compaction."""
    ids = sorted(rows)
    yield b"["
    for at in range(0, len(ids), SNAPSHOT_CHUNK):
        chunk = dumps([[rid, _snapshot_row(schema, rows[rid])] for rid in ids[at:at + SNAPSHOT_CHUNK]])
        yield chunk[1:-1] if at == 0 else b"," + chunk[1:-1]
        if pause is not None:
            pause()
    yield b"]"


def load_snapshot(eng: State, payload: bytes) -> tuple[dict[str, tuple[int, int]], tuple[int, int]]:
    """Load a snapshot into an empty `eng`; answer the sizes it carries (rows per collection,
    and the keys'), for `Footprint.calibrate`."""
    snap = loads(payload)
    sizes: dict[str, tuple[int, int]] = {}
    for c in snap["colls"]:
        coll = Collection(Schema.from_json(c["schema"]))
        for rid, data in c["rows"]:
            coll.insert(decode_row(coll.schema, rid, data), None)
        coll.next_id = max(coll.next_id, c["next"])
        eng.catalog.collections[coll.name] = coll
        nbytes = c.get("bytes")
        if nbytes is None:  # a snapshot written before the sizes were
            nbytes = len(_slow_dumps(c["rows"]).encode("utf-8", "surrogatepass"))
        sizes[coll.name] = (nbytes, len(c["rows"]))
    eng.catalog.controls.load(snap.get("queues") or [])
    for k in snap["idem"]:
        eng.keys.put(k[0], _stored(*k[1:]) if len(k) == 5 else _stored_v1(*k[1:]))
    for name, sched in snap.get("schedules", ()):
        schedules.replay(eng.catalog, name, sched)
    idem_bytes = snap.get("idem_bytes")
    if idem_bytes is None:
        idem_bytes = len(_slow_dumps(snap["idem"]).encode("utf-8", "surrogatepass"))
    eng.catalog.term = max(eng.catalog.term, int(snap.get("term", 0)))
    eng.seq = snap["s"]
    eng.catalog.schema_changed()
    return sizes, (idem_bytes, len(snap["idem"]))


def schema_bytes(coll: Collection) -> int:
    return len(dumps(coll.schema.to_json()))

