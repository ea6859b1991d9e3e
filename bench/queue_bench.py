"""`make queue-bench`: the job-queue costs, measured, with the machine they ran on.

Sections (each prints a table of medians over --rounds runs, and the run's spread):

  inproc      over --jobs jobs (default 1 000 000), in process, no log:
              one worker claiming 10 with @sorted run_at (p50, p99 of single claims),
              the same without an index, a queue of --jobs leased or delayed jobs with 3 ready,
              16 threads claiming and acking (jobs/s), and the three-statement variant
              (read the ready page, set where still ready, read back) with how many jobs it lost
  capped      a claim of 10 on a queue with caps or a rate limit (docs/queues.md, "Caps and rate
              limits") beside the same queue with none, over --jobs jobs of 100 tenants, in process
  text        statements written with literals beside the same with `$1` (medians of a different
              text each time, so no cache answers): one small put, and a put of 1 000 documents
              (89 KB of text, with the rate it is read at)
  durable     writes a second, 1 and 8 threads, under --sync always / 250 / off; the claim's p50
              with the log on; start-up time of a file of --jobs jobs; file size before and after
              compaction
  http        the HTTP rows (bench/http_bench.py), when that module is there
  bidding     who gets the job among held nearest-job claims (bench/bidding_bench.py)
  held        a put's time against the number of held claims that match nothing, over 100 000
              ready jobs, and puts a second beside 1 000 of them (bench/held_bench.py): flat

Speed is measured here, never in timed tests. Results are printed and written as JSON to
bench/results/queue-bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from compare.machine import machine  # bench/compare/machine.py: the script's folder is on sys.path
from fenecdb_server import Database, FenecError, gc_policy

SCHEMA = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"
SCHEMA_NO_INDEX = "create collection jobs (payload json, run_at timestamp, owner text, attempts int, error text)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning *")
ACK = "del jobs where id = $1 and owner = $2 require 1"
READ_PAGE = "get jobs select id where run_at <= now() order run_at limit 10"
def CAS(n: int) -> str:
    ids = ", ".join(f"${i + 2}" for i in range(n))
    return f"set jobs {{owner: $1, run_at: now() + 30000, attempts: attempts + 1}} where id in [{ids}] and run_at <= now()"


def READ_BACK(n: int) -> str:
    ids = ", ".join(f"${i + 2}" for i in range(n))
    return f"get jobs select id where owner = $1 and id in [{ids}]"


def pct(sorted_ns: list[int], p: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(len(sorted_ns) * p))] / 1000.0


def load(db: Database, n: int, run_at_offset_ms: int = -1000, owner: str | None = None, chunk: int = 10_000) -> None:
    now = db.now()
    for start in range(0, n, chunk):
        docs = [{"payload": {"to": f"user{i}@example.com"}, "run_at": now + run_at_offset_ms,
                 "attempts": 0, **({"owner": owner} if owner else {})}
                for i in range(start, min(n, start + chunk))]
        db.query("put jobs $1", [docs])


def claims_latency(db: Database, count: int) -> dict:
    lat = []
    for i in range(count):
        t0 = time.perf_counter_ns()
        db.query(CLAIM, [f"w1:{i}"])
        lat.append(time.perf_counter_ns() - t0)
    lat.sort()
    return {"p50_us": pct(lat, 0.5), "p99_us": pct(lat, 0.99)}


def on_threads(worker: Callable[[int], None], threads: int) -> float:
    """`worker(0)` to `worker(threads - 1)`, each on a thread of its own, to their end: the seconds taken."""
    ts = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def bench_claim_sorted(jobs: int) -> dict:
    db = Database()
    db.query(SCHEMA)
    load(db, jobs)
    return claims_latency(db, 2000)


def bench_claim_no_index(jobs: int) -> dict:
    db = Database()
    db.query(SCHEMA_NO_INDEX)
    load(db, jobs)
    return claims_latency(db, 5)


def bench_mostly_leased(jobs: int) -> dict:
    """`jobs` leased or delayed jobs and 3 ready: the claim should cost about a ready page."""
    db = Database()
    db.query(SCHEMA)
    load(db, jobs // 2, run_at_offset_ms=3_600_000)              # delayed an hour
    load(db, jobs - jobs // 2, run_at_offset_ms=30_000, owner="w0")  # leased
    lat = []
    for i in range(2000):
        db.query("put jobs [{run_at: now(), attempts: 0}, {run_at: now(), attempts: 0}, {run_at: now(), attempts: 0}]")
        t0 = time.perf_counter_ns()
        got = db.query(CLAIM, [f"w1:{i}"])
        lat.append(time.perf_counter_ns() - t0)
        assert len(got) == 3, got
    lat.sort()
    return {"p50_us": pct(lat, 0.5), "p99_us": pct(lat, 0.99)}


SCHEMA_TENANTS = ("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, "
                  "error text, tenant text, queue text)")
TENANTS = 100


def bench_claim_capped(jobs: int, control: str | None) -> dict:
    """2 000 claims of 10 (20 000 jobs leased by the end) on --jobs ready jobs of TENANTS tenants,
    under `control` (None: no control, the same schema), its limits never reached, so every claim
    takes its 10 and pays for each limit's count. The collector runs as the server runs it
    (gc_policy.py), so a p99 is not a full collection's walk over the stored jobs."""
    db = Database()
    db.query(SCHEMA_TENANTS)
    now = db.now()
    for start in range(0, jobs, 10_000):
        docs = [{"payload": {"to": f"user{i}@example.com"}, "run_at": now - 1000, "attempts": 0,
                 "tenant": f"t{i % TENANTS}"} for i in range(start, min(jobs, start + 10_000))]
        db.query("put jobs $1", [docs])
    if control is not None:
        db.query(control)
    gc_policy.apply()  # as the server runs: the stored jobs out of the collector's sight
    out = claims_latency(db, 2000)
    assert db.query("get jobs where owner != null count")[0]["count"] == 20_000
    return out


CAPPED = {
    "claim 10, no control (the same queue)": None,
    "claim 10, to 1 000 000 leased": "limit queue jobs to 1000000 leased",
    "claim 10, to 10 000 leased per tenant": "limit queue jobs to 10000 leased per tenant",
    "claim 10, to 1 000 000 claimed per 1h per tenant": "limit queue jobs to 1000000 claimed per 1h per tenant",
    "claim 10, a paused queue name beside it": 'pause queue jobs "other"',
}


def bench_threads(jobs: int, threads: int = 16) -> dict:
    db = Database()
    db.query(SCHEMA)
    load(db, jobs)
    done = [0] * threads
    stop = time.perf_counter() + 3.0

    def worker(w: int) -> None:
        n = 0
        while time.perf_counter() < stop:
            n += 1
            owner = f"w{w}:{n}"
            rows = db.query(CLAIM, [owner])
            if not rows:
                return
            for r in rows:
                db.query(ACK, [r["id"], owner])
            done[w] += len(rows)

    took = on_threads(worker, threads)
    return {"jobs_per_s": sum(done) / took}


def bench_three_statements(jobs: int, threads: int = 16) -> dict:
    """Read the page, set where still ready, read back: how many jobs a worker read that another took."""
    db = Database()
    db.query(SCHEMA)
    load(db, jobs)
    done = [0] * threads
    read = [0] * threads
    stop = time.perf_counter() + 3.0

    def worker(w: int) -> None:
        n = 0
        while time.perf_counter() < stop:
            n += 1
            owner = f"w{w}:{n}"
            page = [r["id"] for r in db.query(READ_PAGE)]
            if not page:
                return
            read[w] += len(page)
            db.query(CAS(len(page)), [owner, *page])
            won = db.query(READ_BACK(len(page)), [owner, *page])
            for r in won:
                db.query(ACK, [r["id"], owner])
            done[w] += len(won)

    took = on_threads(worker, threads)
    lost = 1 - sum(done) / max(1, sum(read))
    return {"jobs_per_s": sum(done) / took, "lost_share": lost}


# ---------------------------------------------------------------- statements written with literals


def _small_put(i: int) -> str:
    return f'put jobs {{payload: {{to: "user{i}@example.com", n: {i}}}, run_at: now(), attempts: 0}}'


def _big_put(i: int, n: int = 1000) -> str:
    docs = ", ".join(f'{{payload: {{to: "user{j}@example.com", n: {j}, tag: "r{i}"}}, run_at: now(), attempts: 0}}'
                     for j in range(n))
    return f"put jobs [{docs}]"


def _median_us(run, args: list) -> float:
    lat = []
    for a in args:
        t0 = time.perf_counter_ns()
        run(a)
        lat.append(time.perf_counter_ns() - t0)
    return statistics.median(lat) / 1000.0


def bench_literal_small(count: int = 3000) -> dict:
    """One small put as a user writes it, a different text each time (no cache holds it), beside
    the same put with its document as `$1`, as the SDKs send it."""
    db = Database()
    db.query(SCHEMA)
    literal = _median_us(db.query, [_small_put(i) for i in range(count)])
    param = _median_us(lambda i: db.query("put jobs {payload: $1, run_at: now(), attempts: 0}",
                                          [{"to": f"user{i}@example.com", "n": i}]), list(range(count)))
    return {"literal_us": literal, "param_us": param, "ratio": literal / param}


def bench_literal_big(count: int = 7) -> dict:
    """A put of 1 000 documents written out (89 KB of text), each time a different text, beside
    the same documents as `$1`."""
    db = Database()
    db.query(SCHEMA)
    texts = [_big_put(i) for i in range(count)]
    literal = _median_us(db.query, texts)
    now = db.now()
    docs = [{"payload": {"to": f"user{j}@example.com", "n": j, "tag": "r"}, "run_at": now, "attempts": 0}
            for j in range(1000)]
    param = _median_us(lambda _: db.query("put jobs $1", [docs]), list(range(count)))
    return {"literal_ms": literal / 1000, "param_ms": param / 1000, "ratio": literal / param,
            "literal_mb_per_s": len(texts[0]) / literal}


# ---------------------------------------------------------------- durability


def bench_durable_writes(sync: str | int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        db = Database(os.path.join(d, "w.fenec"), sync=sync)
        db.query(SCHEMA)
        count = [0] * threads
        stop = time.perf_counter() + 2.0

        def worker(w: int) -> None:
            while time.perf_counter() < stop:
                db.query("put jobs {payload: $1, run_at: now(), attempts: 0}", [{"w": w}])
                count[w] += 1

        took = on_threads(worker, threads)
        rate = sum(count) / took
        db.close()
        return {"writes_per_s": rate}


def bench_claim_with_log(jobs: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        db = Database(os.path.join(d, "c.fenec"), sync=250)
        db.query(SCHEMA)
        load(db, jobs)
        out = claims_latency(db, 2000)
        db.close()
        return out


def bench_startup_and_compaction(jobs: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.fenec")
        db = Database(path, sync="off")
        db.query(SCHEMA)
        load(db, jobs)
        # A queue's life: every job claimed once and half of them acked, so the file holds dead versions.
        for i in range(jobs // 10):
            rows = db.query(CLAIM, [f"w:{i}"])
            for r in rows[:5]:
                db.query(ACK, [r["id"], f"w:{i}"])
        db.close()
        before = os.path.getsize(path)
        t0 = time.perf_counter()
        db = Database(path, sync="off")
        startup = time.perf_counter() - t0
        t0 = time.perf_counter()
        db.compact()
        compact_s = time.perf_counter() - t0
        db.close()
        after = os.path.getsize(path)
        t0 = time.perf_counter()
        db = Database(path, sync="off")
        startup_after = time.perf_counter() - t0
        db.close()
        return {"startup_s": startup, "file_mb_before": before / 1e6, "compact_s": compact_s,
                "file_mb_after": after / 1e6, "startup_after_compaction_s": startup_after}


# ---------------------------------------------------------------- running


def median_of(fn, rounds: int, *args) -> dict:
    runs = [fn(*args) for _ in range(rounds)]
    out = {}
    for k in runs[0]:
        vals = [r[k] for r in runs]
        out[k] = statistics.median(vals)
        out[k + "_spread"] = [min(vals), max(vals)]
    return out


def show(title: str, rows: dict) -> None:
    print(f"\n{title}")
    for name, res in rows.items():
        parts = []
        for k, v in res.items():
            if k.endswith("_spread"):
                continue
            spread = res.get(k + "_spread")
            fmt = f"{v:,.1f}" if isinstance(v, float) else str(v)
            if spread and isinstance(v, float):
                fmt += f" ({spread[0]:,.1f}–{spread[1]:,.1f})"
            parts.append(f"{k} {fmt}")
        print(f"  {name:<48} " + ", ".join(parts), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=["inproc", "capped", "text", "durable", "http", "bidding", "held"],
                    action="append")
    args = ap.parse_args()
    only = set(args.only or ["inproc", "capped", "text", "durable", "http", "bidding", "held"])
    info = machine()
    print(f"queue-bench: {info['cpu']}, {info['cores']} cores, Python {info['python']}; "
          f"{args.jobs:,} jobs, medians of {args.rounds} rounds (min–max in brackets)", flush=True)
    results: dict = {"machine": info, "jobs": args.jobs, "rounds": args.rounds}
    if "inproc" in only:
        rows = {
            "claim 10, @sorted run_at": median_of(bench_claim_sorted, args.rounds, args.jobs),
            "claim 10, no index (scan and sort)": median_of(bench_claim_no_index, 1, args.jobs),
            "claim 3 ready among N leased/delayed": median_of(bench_mostly_leased, args.rounds, args.jobs),
            "16 threads claim 10 + ack each": median_of(bench_threads, args.rounds, args.jobs),
            "16 threads read / set-if-ready / read back": median_of(bench_three_statements, args.rounds, args.jobs),
        }
        show("in process, no log", rows)
        results["inproc"] = rows
    if "capped" in only:
        rows = {name: median_of(bench_claim_capped, args.rounds, args.jobs, control)
                for name, control in CAPPED.items()}
        show("caps and rate limits, in process, no log (p50, p99 of single claims)", rows)
        results["capped"] = rows
    if "text" in only:
        rows = {
            "one small put, literals vs $1": median_of(bench_literal_small, args.rounds),
            "a put of 1 000 documents (89 KB), literals vs $1": median_of(bench_literal_big, args.rounds),
        }
        show("statements written with literals, in process", rows)
        results["text"] = rows
    if "durable" in only:
        rows = {}
        for sync in ("always", 250, "off"):
            for threads in (1, 8):
                rows[f"puts/s, --sync {sync}, {threads} thread(s)"] = median_of(
                    bench_durable_writes, args.rounds, sync, threads)
        rows["claim 10 with the log on (--sync 250)"] = median_of(bench_claim_with_log, 1, args.jobs)
        rows["start-up and compaction"] = median_of(bench_startup_and_compaction, 1, args.jobs)
        show("durability", rows)
        results["durable"] = rows
    if "http" in only:
        here = Path(__file__).resolve().parent
        if (here / "http_bench.py").exists():
            sys.path.insert(0, str(here))
            import http_bench

            results["http"] = http_bench.run(rounds=args.rounds)
        else:
            print("\nSKIP http: bench/http_bench.py is not there")
    if "bidding" in only:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import bidding_bench

        results["bidding"] = bidding_bench.run()
    if "held" in only:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import held_bench

        results["held"] = held_bench.run()
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / "queue-bench.json").write_text(json.dumps(results, indent=2, default=str))
    print("\nwritten: bench/results/queue-bench.json")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FenecError as e:
        print(f"queue-bench: {e.status} {e.message}", file=sys.stderr)
        sys.exit(1)
