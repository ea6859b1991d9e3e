"""The --sync policies: group commit under `always`, the periodic syncer, `off`."""

from __future__ import annotations

import threading
import time

from fenecdb_server.storage import Log
from fenecdb_server.storage.files import FaultyFiles


def open_log(tmp_path, sync: object) -> tuple[Log, FaultyFiles]:
    files = FaultyFiles()
    lg = Log(str(tmp_path / "db.fenec"), sync=sync, files=files)
    lg.open()
    return lg, files


def writers(lg: Log, threads: int, each: int) -> float:
    """`threads` clients each writing `each` records as the engine does: append under the
    write lock, wait for durability after releasing it. Returns the seconds taken."""
    write_lock = threading.Lock()
    start = threading.Barrier(threads)

    def client(k: int) -> None:
        start.wait()
        for i in range(each):
            with write_lock:
                ticket = lg.append(f"client {k} write {i}".encode())
            lg.wait_durable(ticket)

    pool = [threading.Thread(target=client, args=(k,)) for k in range(threads)]
    began = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - began


def test_always_one_client_gets_one_fsync_per_write(tmp_path) -> None:
    lg, files = open_log(tmp_path, "always")
    before = files.calls["datasync"]
    writers(lg, 1, 50)
    assert files.calls["datasync"] - before == 50
    assert not lg.dirty
    assert lg.close() is False


def test_always_many_clients_share_fsyncs(tmp_path) -> None:
    lg, files = open_log(tmp_path, "always")
    before = files.calls["datasync"]
    writers(lg, 8, 100)
    fsyncs = files.calls["datasync"] - before
    # every one of the 800 writes waited for an fsync, yet far fewer fsyncs ran
    assert fsyncs * 2 < 800, fsyncs
    lg.close()
    _, records = Log(str(tmp_path / "db.fenec"), sync="off").open()
    assert len(records) == 800 and len(set(records)) == 800


def test_always_a_ticket_is_durable_only_after_an_fsync_that_started_after_it(tmp_path) -> None:
    lg, files = open_log(tmp_path, "always")
    release = threading.Event()
    entered = threading.Event()
    real_fsync = files.datasync
    slow = {"on": True}

    def fsync(fd: int) -> None:
        if slow["on"]:
            slow["on"] = False
            entered.set()
            release.wait(5)
        real_fsync(fd)

    files.datasync = fsync  # type: ignore[method-assign]
    first = lg.append(b"first")
    leader = threading.Thread(target=lg.wait_durable, args=(first,))
    leader.start()
    assert entered.wait(5)
    second = lg.append(b"second, appended while the first fsync runs")
    done = threading.Event()

    def follower() -> None:
        lg.wait_durable(second)
        done.set()

    threading.Thread(target=follower).start()
    time.sleep(0.05)
    assert not done.is_set()  # the running fsync may not cover it
    release.set()
    leader.join(5)
    assert done.wait(5)
    assert files.calls["datasync"] >= 2  # the first, one more for the second
    lg.close()


def test_the_periodic_syncer_does_nothing_while_nothing_is_dirty(tmp_path) -> None:
    lg, files = open_log(tmp_path, 10)
    syncer = lg._syncer
    assert syncer is not None
    before = dict(files.calls)
    time.sleep(0.15)  # about 15 intervals
    assert dict(files.calls) == before and syncer.rounds == 0
    lg.wait_durable(lg.append(b"one"))  # returns at once under <ms>
    assert lg.dirty
    deadline = time.monotonic() + 5
    while lg.dirty and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not lg.dirty
    assert files.calls["datasync"] == before.get("datasync", 0) + 1
    time.sleep(0.1)  # clean again: no more fsyncs
    assert files.calls["datasync"] == before.get("datasync", 0) + 1 and syncer.rounds == 1
    assert lg.close() is False


def test_interval_bounds_how_long_a_write_stays_dirty(tmp_path) -> None:
    lg, files = open_log(tmp_path, 20)
    worst = 0.0
    for i in range(10):
        lg.append(b"w%d" % i)
        t = time.monotonic()
        while lg.dirty:
            time.sleep(0.001)
        worst = max(worst, time.monotonic() - t)
    assert worst < 0.5  # 20 ms interval, with slack for a loaded machine
    lg.close()


def test_off_never_fsyncs_until_close(tmp_path) -> None:
    lg, files = open_log(tmp_path, "off")
    before = files.calls["datasync"]
    for i in range(100):
        lg.wait_durable(lg.append(b"w%d" % i))
    assert files.calls["datasync"] == before and lg.dirty
    assert lg.close() is True  # it was dirty: the final sync ran
    assert files.calls["datasync"] == before + 1


def test_every_policy_hands_the_bytes_to_the_os_at_append(tmp_path) -> None:
    # a process kill loses nothing acknowledged under any policy: the bytes are in the OS
    for policy in ("off", 1000, "always"):
        path = tmp_path / f"{policy}.fenec"
        lg = Log(str(path), sync=policy)
        lg.open()
        lg.append(b"acknowledged")
        with open(path, "rb") as f:  # (then the preallocated zeros)
            assert f.read().rstrip(b"\0").endswith(b"acknowledged")
        lg.close()


def test_the_syncer_covers_many_writes_with_one_fsync_per_interval(tmp_path) -> None:
    lg, files = open_log(tmp_path, 50)
    before = files.calls["datasync"]
    began = time.monotonic()
    for i in range(2000):
        lg.wait_durable(lg.append(b"w%d" % i))
        if i % 200 == 0:
            time.sleep(0.01)
    while lg.dirty:
        time.sleep(0.005)
    intervals = (time.monotonic() - began) / 0.05
    fsyncs = files.calls["datasync"] - before
    assert 1 <= fsyncs <= intervals + 2, (fsyncs, intervals)
    lg.close()


def test_always_an_idempotent_replay_answers_only_once_its_write_is_synced(tmp_path) -> None:
    """In process, two threads: the first runs a keyed write and waits in its fdatasync; a retry
    with the same key (another thread) is answered the stored answer, but not before that
    fdatasync: its answer says the write happened, which under `always` means on disk."""
    from fenecdb_server import Database
    from fenecdb_server.engine.idempotency import Idem

    files = FaultyFiles()
    db = Database(str(tmp_path / "db.fenec"), sync="always", files=files)
    db.query("create collection jobs (n int)")
    entered = threading.Event()
    release = threading.Event()
    real = files.datasync

    def datasync(fd: int) -> None:
        entered.set()
        release.wait(30)
        real(fd)

    files.datasync = datasync  # type: ignore[method-assign]
    key = Idem("*:order-1", b"the same request", 60_000)
    put = [("put jobs {n: 1}", None)]
    first = threading.Thread(target=db.execute, args=(put,), kwargs={"idempotency": key})
    first.start()
    assert entered.wait(30)  # appended, and in its fdatasync
    seen: list[tuple[object, int]] = []

    def retry() -> None:
        result = db.execute(put, idempotency=key)
        seen.append((result.replayed is not None, db.log.durable))

    again = threading.Thread(target=retry)
    again.start()
    again.join(2)  # given time to answer early, were it to
    release.set()
    first.join(30)
    again.join(30)
    assert seen == [(True, db.log.appended)]  # a replay, answered with its write durable
    db.close()
