"""The workloads, the same for every system: each drives a system only through its `Session`
(claim, ack, put, wait_claim), so what differs between the rows is the system.

Workers are processes (forked from a fork server, each with its own connection), not threads: the client
libraries are Python, and under the GIL a load generator of threads would be the bottleneck, and would put
the producer's client and the waiting worker's in each other's way."""

from __future__ import annotations

import importlib
import multiprocessing as mp
import queue
import threading
import time
from typing import Any

from .stats import pct


def open_session(spec: tuple[str, tuple]) -> Any:
    module, args = spec
    return importlib.import_module("." + module, __package__).Session(*args)


# ---------------------------------------------------------------- one connection


def claim_latency(session: Any, count: int) -> dict:
    """`count` claims of 10 from a full queue, one after another, each acked before the next (the ack not
    timed), so the queue is as full at the end as at the start less the jobs done: p50 and p99 in ms."""
    lat = []
    for i in range(count):
        owner = f"w1:{i}"
        t0 = time.perf_counter()
        jobs = session.claim(10, owner)
        lat.append(time.perf_counter() - t0)
        if len(jobs) != 10:
            raise RuntimeError(f"a claim of 10 from a full queue took {len(jobs)}")
        session.ack(jobs, owner)
    return {"p50": pct(lat, 0.5) * 1e3, "p99": pct(lat, 0.99) * 1e3}


def few_ready_latency(session: Any, count: int) -> dict:
    """Among many leased or delayed jobs, 3 put ready, then one claim of 10 (timed) that must take exactly
    those 3 (checked by their payloads), then their acks: p50 and p99 of the claim in ms."""
    lat = []
    for i in range(count):
        owner = f"w1:{i}"
        for k in range(3):
            session.put({"i": i, "k": k})
        t0 = time.perf_counter()
        jobs = session.claim(10, owner)
        lat.append(time.perf_counter() - t0)
        took = sorted((p.get("i"), p.get("k")) for p in map(session.payload, jobs))
        if took != [(i, 0), (i, 1), (i, 2)]:
            raise RuntimeError(f"3 jobs were put ready and the claim took {len(jobs)}: {took[:5]}")
        session.ack(jobs, owner)
    return {"p50": pct(lat, 0.5) * 1e3, "p99": pct(lat, 0.99) * 1e3}


WAKE_PAUSE = 0.01  # how long a blocked worker has been waiting when the job is put


def _waiter(spec: tuple[str, tuple], count: int, poll_every: float | None, events: Any) -> None:
    """The waiting worker of `wake_latency`, in a process of its own. It sends ("start", t, cycle) as it
    begins to wait (or poll) for each job, ("got", t, payload, claims) with the job in hand, ("error", text)."""
    try:
        worker = open_session(spec)
        empty: list[float] = []  # how long an empty claim takes, for the length of the polling cycle
        if poll_every is not None:
            for _ in range(5):
                t = time.perf_counter()
                if worker.claim(1, "w:warm"):
                    raise RuntimeError("the queue was not empty")
                empty.append(time.perf_counter() - t)
        for i in range(count):
            owner = f"w:{i}"
            claims = 0
            while True:
                t = time.perf_counter()
                if claims == 0:
                    cycle = poll_every + sum(empty[-20:]) / len(empty[-20:]) if poll_every is not None else 0.0
                    events.put(("start", t, cycle))
                claims += 1
                if poll_every is None:
                    job = worker.wait_claim(30, owner)
                    if job is not None:
                        break
                else:
                    jobs = worker.claim(1, owner)
                    if jobs:
                        job = jobs[0]
                        break
                    empty.append(time.perf_counter() - t)
                    time.sleep(poll_every)
            t = time.perf_counter()
            worker.ack([job], owner)
            events.put(("got", t, worker.payload(job), claims))
        worker.close()
    except BaseException as e:
        events.put(("error", repr(e)))


def wake_latency(system: Any, count: int, poll_every: float | None) -> dict:
    """A worker waits for a job on an empty queue, blocking (poll_every None) or claiming every `poll_every`
    seconds; the producer, on a connection of its own, puts one: the time from the put's start to the job in
    the worker's hand (claimed, its lease written), ms. The worker is a process of its own, as every worker of
    the harness is, so the producer's client does not share its interpreter (time.perf_counter is the
    system's monotonic clock, the same in both processes).

    Blocking: the put comes WAKE_PAUSE after the worker sent its waiting claim, so the worker is blocked at the
    server when it lands, and the job it is handed must be the one just put. Polling: the put lands at a point
    of the worker's cycle (an empty claim and the sleep) spread evenly over the runs, from the cycle's start.
    Also the claims the worker sent for each job."""
    ctx = context()
    events = ctx.Queue()
    # one more job than is timed: the first, untimed, warms every system alike (a first statement's
    # parse, a first command's connection work), so a cold start is not one of the samples
    proc = ctx.Process(target=_waiter, args=(system.spec(), count + 1, poll_every, events), daemon=True)
    producer = system.session()
    proc.start()

    def event(kind: str) -> tuple:
        end = time.monotonic() + 60
        while True:
            try:
                ev = events.get(timeout=0.5)
            except queue.Empty:
                if not proc.is_alive():
                    raise RuntimeError(f"the waiting worker exited ({proc.exitcode})") from None
                if time.monotonic() > end:
                    raise RuntimeError(f"the waiting worker sent no {kind!r} in 60 s") from None
                continue
            if ev[0] == "error":
                raise RuntimeError(f"the waiting worker failed: {ev[1]}")
            if ev[0] != kind:
                raise RuntimeError(f"the waiting worker sent {ev[0]!r}, not {kind!r}")
            return ev

    lat = []
    claims = 0
    done = False
    try:
        for i in range(count + 1):
            _, start_at, cycle = event("start")
            at = start_at + (WAKE_PAUSE if poll_every is None else cycle * ((i * 0.618034) % 1.0))
            time.sleep(max(0.0, at - time.perf_counter()))
            t0 = time.perf_counter()
            producer.put({"i": i})
            _, t1, payload, n = event("got")
            if payload.get("i") != i:
                raise RuntimeError(f"the worker was handed {payload!r}, not the job just put ({i})")
            if i:
                lat.append(t1 - t0)
                claims += n
        done = True
    finally:
        producer.close()
        proc.join(10 if done else 0)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    return {"p50": pct(lat, 0.5) * 1e3, "p99": pct(lat, 0.99) * 1e3, "claims_per_job": claims / count}


# ---------------------------------------------------------------- many processes


def _worker(spec: tuple[str, tuple], kind: str, seconds: float, barrier: Any, out: Any, wid: int) -> None:
    try:
        s = open_session(spec)
        barrier.wait()
        t0 = time.perf_counter()
        end = t0 + seconds
        n = k = 0
        dry = False
        while time.perf_counter() < end:
            k += 1
            if kind == "claim-ack":
                owner = f"w{wid}:{k}"
                jobs = s.claim(10, owner)
                if not jobs:
                    dry = True
                    break
                s.ack(jobs, owner)
                n += len(jobs)
            else:
                s.put({"w": wid, "k": k})
                n += 1
        out.put((n, time.perf_counter() - t0, dry, None))
        s.close()
    except BaseException as e:
        barrier.abort()  # the others, and the parent, stop waiting for this one
        out.put((0, 0.0, False, repr(e)))


_CONTEXT: Any = None


def context() -> Any:
    """Workers are forked from a fork server that imported the clients once, holding no connection of ours:
    as cheap to start as a fork, as clean as a spawn."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = mp.get_context("forkserver")
        _CONTEXT.set_forkserver_preload([__name__, "fenecdb", "psycopg", "redis"])
    return _CONTEXT


def _collect(out: Any, ps: list[Any], timeout: float) -> list[tuple]:
    """Every worker's answer, or an error as soon as a worker died without one."""
    res: list[tuple] = []
    end = time.monotonic() + timeout
    while len(res) < len(ps):
        try:
            res.append(out.get(timeout=0.5))
            continue
        except queue.Empty:
            pass
        if time.monotonic() > end:
            raise RuntimeError(f"{len(ps) - len(res)} worker(s) sent no answer in {timeout:.0f} s")
        if not any(p.is_alive() for p in ps):
            try:  # the last answers may be on their way still
                while len(res) < len(ps):
                    res.append(out.get(timeout=2))
            except queue.Empty:
                codes = sorted({p.exitcode for p in ps})
                raise RuntimeError(f"{len(ps) - len(res)} worker(s) exited without an answer "
                                   f"(exit codes {codes})") from None
    return res


def run_workers(system: Any, kind: str, workers: int, seconds: float) -> dict:
    """`workers` processes, each its own connection, for `seconds` after they all connected:
    kind "claim-ack" claims 10 and acks them; "put" writes one job a request. The rate over the window, the
    jobs done, and whether a worker found the queue empty (then it stopped early, and the rate is of a queue
    running dry)."""
    ctx = context()
    barrier = ctx.Barrier(workers + 1)
    out = ctx.Queue()
    ps = [ctx.Process(target=_worker, args=(system.spec(), kind, seconds, barrier, out, w), daemon=True)
          for w in range(workers)]
    for p in ps:
        p.start()
    done = False
    try:
        try:
            barrier.wait(timeout=120)
        except threading.BrokenBarrierError:
            pass  # a worker failed to connect; its error is in `out`
        res = _collect(out, ps, seconds + 120)
        done = True
    finally:  # on an error or a Ctrl-C the workers are killed at once, not waited for
        for p in ps:
            if done:
                p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
    errors = [r[3] for r in res if r[3]]
    if errors:
        raise RuntimeError(f"a worker failed: {errors[0]}")
    total = sum(r[0] for r in res)
    return {"rate": total / max(r[1] for r in res), "done": total, "dry": any(r[2] for r in res)}
