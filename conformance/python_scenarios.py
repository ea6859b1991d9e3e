"""The Python SDK's worker-scenario runner (conformance.md Part B).

Replays the scenarios file named by FENEC_SCENARIOS (default: this folder's
worker-scenarios.json) against the server at FENEC_URL through `fenecdb`'s real calls: the
builder's claim, ack, extend and fail, `wait=` for held claims, task cancellation, and
`with_idempotency_key`. It never writes statement text by hand; before the first operation of
each kind it checks the builder's text against the templates of B.3.

Without FENEC_URL every scenario is reported skipped (and, under FENEC_REQUIRE_SERVER=1, the run
fails instead). Each scenario runs in a collection of its own, `<prefix>_python_<8 hex>`, made
before and dropped after, pass or fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fenecdb import AsyncClient, FenecError, UnmetError, expr, inc, raw

HERE = Path(__file__).resolve().parent
DEFAULT_SCENARIOS = HERE / "worker-scenarios.json"
LANG = "python"
DEFAULT_SCHEMA = "create collection {q} (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"
FAIL_RUN_AT = "case when attempts >= ? then null else now() + ? * attempts * attempts end"

TEMPLATES = {
    "enqueue": "put {q} {payload: $1, run_at: now() + $2, attempts: $3}",
    "claim": "set {q} {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3} "
             "where run_at <= now() order run_at asc limit <batch> returning *",
    "ack": "del {q} where id = $1 and owner = $2 require 1",
    "extend": "set {q} {run_at: now() + $1} where id = $2 and owner = $3 require 1",
    "fail": "set {q} {owner: $1, error: $2, run_at: case when attempts >= $3 then null else now() + $4 "
            "* attempts * attempts end} where id = $5 and owner = $6 require 1",
    "pop": "del {q} where run_at <= now() order run_at asc limit <n> returning *",
    "resend": "set {q} {run_at: now(), attempts: $1, error: $2} where id = $3 and run_at is null",
}


class Failed(Exception):
    """A scenario failed: `<step or invariant>: <expected> / <got>`."""


def now_ms() -> float:
    return time.monotonic() * 1000


# -- the queue operations, through the builder only -----------------------------------------------

class Queue:
    """One scenario's queue: every operation is a builder chain and one real call."""

    def __init__(self, db: AsyncClient, name: str) -> None:
        self.db = db
        self.name = name
        self.q = db.collection(name)
        self.checked: set[str] = set()

    def _check(self, kind: str, made: tuple[str, list[Any]], **fill: Any) -> None:
        if kind in self.checked:
            return
        want = TEMPLATES[kind].replace("{q}", self.name)
        for key, value in fill.items():
            want = want.replace(f"<{key}>", str(value))
        if made[0] != want:
            raise Failed(f"{kind} template: {want!r} / {made[0]!r}")
        self.checked.add(kind)

    def with_db(self, db: AsyncClient) -> Queue:
        other = Queue(db, self.name)
        other.checked = self.checked
        return other

    async def enqueue(self, key: str, payload: dict[str, Any] | None, delay_ms: int) -> int:
        doc = {"payload": {**(payload or {}), "key": key}, "run_at": expr("now() + ?", delay_ms), "attempts": 0}
        self._check("enqueue", self.q.to_insert(doc))
        return await self.q.insert(doc)

    def _claim_chain(self, db: AsyncClient, batch: int) -> Any:
        return db.collection(self.name).where(raw("run_at <= now()")).order("run_at").limit(batch)

    async def claim(self, owner: str, batch: int, lease_ms: int, wait_ms: int | None = None,
                    key: str | None = None) -> tuple[list[dict[str, Any]], bool]:
        patch = {"owner": owner, "run_at": expr("now() + ?", lease_ms), "attempts": inc(1)}
        self._check("claim", self._claim_chain(self.db, batch).to_update(patch, returning=True), batch=batch)
        # Keys are server-wide on an open server, and every SDK runs these scenarios on one
        # server: the key is sent suffixed with the scenario's own collection (README.md).
        db = self.db.with_idempotency_key(f"{key}:{self.name}") if key else self.db
        rows = await self._claim_chain(db, batch).update(
            patch, returning=True, wait=None if wait_ms is None else wait_ms / 1000)
        return list(rows), db.replayed

    async def _settle(self, kind: str, chain: Any, patch: dict[str, Any] | None) -> bool:
        made = chain.to_delete(require=1) if patch is None else chain.to_update(patch, require=1)
        self._check(kind, made)
        try:
            if patch is None:
                await chain.delete(require=1)
            else:
                await chain.update(patch, require=1)
        except UnmetError:
            return False
        return True

    async def ack(self, job_id: Any, owner: str) -> bool:
        return await self._settle("ack", self.q.where("id", job_id).where("owner", owner), None)

    async def extend(self, job_id: Any, owner: str, lease_ms: int) -> bool:
        return await self._settle("extend", self.q.where("id", job_id).where("owner", owner),
                                  {"run_at": expr("now() + ?", lease_ms)})

    async def fail(self, job_id: Any, owner: str, error: str, dead_after: int, backoff_ms: int) -> bool:
        patch = {"owner": None, "error": error, "run_at": expr(FAIL_RUN_AT, dead_after, backoff_ms)}
        return await self._settle("fail", self.q.where("id", job_id).where("owner", owner), patch)

    async def pop(self, n: int) -> list[dict[str, Any]]:
        chain = self.q.where(raw("run_at <= now()")).order("run_at").limit(n)
        self._check("pop", chain.to_delete(returning=True), n=n)
        return list(await chain.delete(returning=True))

    async def resend(self, job_id: Any) -> int:
        chain = self.q.where("id", job_id).where("run_at", None)
        patch = {"run_at": expr("now()"), "attempts": 0, "error": None}
        self._check("resend", chain.to_update(patch))
        return int(await chain.update(patch))

    async def id_of(self, key: str) -> Any:
        row = await self.q.select("id").where("payload.key", key).first()
        return None if row is None else row["id"]

    async def counts(self) -> dict[str, int]:
        ready = await self.q.where(raw("run_at <= now()")).count()
        leased = await self.q.where(raw("run_at > now()")).where("owner", "!=", None).count()
        delayed = await self.q.where(raw("run_at > now()")).where("owner", None).count()
        dead = await self.q.where("run_at", None).count()
        total = await self.q.count()
        return {"ready": ready, "leased": leased, "delayed": delayed, "dead": dead, "total": total}


def key_of(row: dict[str, Any]) -> str:
    payload = row.get("payload") or {}
    return str(payload.get("key")) if isinstance(payload, dict) else "?"


# -- scripts ----------------------------------------------------------------------------------------

@dataclass
class ScriptState:
    tolerance: float
    counter: int = 0
    ids: dict[str, Any] = field(default_factory=dict)
    owners: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    last_claim: tuple[str | None, str, str] | None = None  # (key, worker, owner) of the previous claim


class Script:
    def __init__(self, url: str, token: str | None, queue_name: str, tolerance: float) -> None:
        self.url = url
        self.token = token
        self.queue_name = queue_name
        self.state = ScriptState(tolerance)

    def _expect(self, label: str, want: Any, got: Any) -> None:
        if want != got:
            raise Failed(f"{label}: {json.dumps(want)} / {json.dumps(got)}")

    async def run(self, steps: list[dict[str, Any]], db: AsyncClient, label: str = "step") -> None:
        queue = Queue(db, self.queue_name)
        for index, step in enumerate(steps, 1):
            await self.step(queue, step, f"{label} {index}")

    async def step(self, queue: Queue, step: dict[str, Any], label: str) -> None:
        action = next((k for k in step if k != "expect"), None)
        expect = step.get("expect")
        label = f"{label} ({action})"
        arg: Any = step.get(action) if action else None
        if action == "enqueue":
            for item in arg:
                n = await queue.enqueue(item["key"], item.get("payload"), int(item.get("delay_ms", 0)))
                if expect is not None:
                    self._expect(label, expect, {"affected": n})
        elif action == "claim":
            await self.claim(queue, arg, expect, label)
        elif action in ("ack", "extend", "fail"):
            job_id, owner = await self._job(queue, arg, label)
            if action == "ack":
                ok = await queue.ack(job_id, owner)
            elif action == "extend":
                ok = await queue.extend(job_id, owner, int(arg.get("lease_ms", 30000)))
            else:
                ok = await queue.fail(job_id, owner, arg.get("error", "failed"), int(arg.get("dead_after", 5)),
                                      int(arg.get("backoff_ms", 1000)))
            if expect is not None:
                self._expect(label, expect, "ok" if ok else "unmet")
        elif action == "pop":
            rows = await queue.pop(int(arg["limit"]))
            if expect is not None:
                self._expect(label, expect, {"keys": [key_of(r) for r in rows]})
        elif action == "resend":
            job_id = self.state.ids.get(arg["key"]) or await queue.id_of(arg["key"])
            n = await queue.resend(job_id)
            if expect is not None:
                self._expect(label, expect, {"affected": n})
        elif action == "sleep_ms":
            await asyncio.sleep(arg / 1000)
        elif action == "counts":
            counts = await queue.counts()
            if expect is not None:
                self._expect(label, expect, {k: counts[k] for k in expect})
        elif action == "during":
            inner = arg["step"]
            claim_arg = inner["claim"]
            task = asyncio.ensure_future(self.claim(queue, claim_arg, expect, f"{label} claim"))
            await asyncio.sleep(arg.get("after_ms", 0) / 1000)
            async with AsyncClient(self.url, token=self.token) as second:
                await self.run(arg.get("then", []), second, f"{label} then")
            await task
        else:
            raise Failed(f"{label}: unsupported action {action}")

    async def _job(self, queue: Queue, arg: dict[str, Any], label: str) -> tuple[Any, str]:
        key, worker = arg["key"], arg["worker"]
        owners = self.state.owners.get((worker, key)) or []
        which = arg.get("claim", "last")
        if not owners:
            raise Failed(f"{label}: {worker} never claimed {key}")
        owner = owners[-1] if which == "last" else owners[int(which) - 1]
        return self.state.ids[key], owner

    async def claim(self, queue: Queue, arg: dict[str, Any], expect: dict[str, Any] | None, label: str) -> None:
        worker = arg["worker"]
        key = arg.get("idempotency_key")
        last = self.state.last_claim
        if key and last and last[0] == key and last[1] == worker:
            owner = last[2]  # a retry resends the same request, owner included
        else:
            self.state.counter += 1
            owner = f"{worker}:{self.state.counter}"
        self.state.last_claim = (key, worker, owner)
        wait_ms = arg.get("wait_ms")
        started = now_ms()
        call = queue.claim(owner, int(arg["batch"]), int(arg["lease_ms"]), wait_ms, key)
        cancel_after: Any = arg.get("cancel_after_ms")
        cancelled = False
        rows: list[dict[str, Any]] = []
        replayed = False
        if cancel_after is not None:
            task = asyncio.ensure_future(call)
            await asyncio.sleep(cancel_after / 1000)
            task.cancel()
            try:
                rows, replayed = await task
            except asyncio.CancelledError:
                cancelled = True
        else:
            rows, replayed = await call
        took = now_ms() - started
        for row in rows:
            self.state.ids[key_of(row)] = row.get("id")
            self.state.owners[(worker, key_of(row))].append(owner)
        if not expect:
            return
        tol = self.state.tolerance
        if "cancelled" in expect:
            self._expect(f"{label} cancelled", expect["cancelled"], cancelled)
            if cancelled and took > cancel_after + tol:
                raise Failed(f"{label} cancelled within {cancel_after + tol} ms: / {took:.0f} ms")
        if "keys" in expect:
            self._expect(f"{label} keys", expect["keys"], [key_of(r) for r in rows])
        if "attempts" in expect:
            self._expect(f"{label} attempts", expect["attempts"], [r.get("attempts") for r in rows])
        if "replayed" in expect:
            self._expect(f"{label} replayed", expect["replayed"], replayed)
        if "min_ms" in expect and took < expect["min_ms"] - tol:
            raise Failed(f"{label} min_ms: {expect['min_ms']} / {took:.0f}")
        if "max_ms" in expect and took > expect["max_ms"] + tol:
            raise Failed(f"{label} max_ms: {expect['max_ms']} / {took:.0f}")


# -- swarms -----------------------------------------------------------------------------------------

@dataclass
class Claim:
    key: str
    worker: int
    owner: str
    sent: float
    received: float
    lease_ms: int
    attempts: int
    lease_end: float = 0.0  # lower bound of the lease's end, moved on by each extension
    settled: bool = False


@dataclass
class Log:
    claims: list[Claim] = field(default_factory=list)
    acks: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    dead: set[str] = field(default_factory=set)
    stale: int = 0
    enqueued: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


async def swarm(url: str, token: str | None, queue_name: str, spec: dict[str, Any], tolerance: float,
                deadline: float) -> dict[str, int]:
    jobs: list[tuple[str, str, int]] = []
    for group in spec["jobs"]:
        for _ in range(int(group["count"])):
            jobs.append((f"j{len(jobs) + 1}", group["behaviour"], int(group.get("delay_ms", 0))))
    behaviour = {k: b for k, b, _ in jobs}
    delay = {k: d for k, _, d in jobs}
    workers = spec["workers"]
    lease_ms, batch, wait_ms = int(workers["lease_ms"]), int(workers["batch"]), int(workers["wait_ms"])
    dead_after, backoff_ms = int(spec.get("dead_after", 5)), int(spec.get("backoff_ms", 1000))
    log = Log()
    done = asyncio.Event()

    def finished() -> bool:
        return len(log.acks) + len(log.dead) >= len(jobs)

    async def produce(share: list[tuple[str, str, int]], spread_ms: int) -> None:
        async with AsyncClient(url, token=token) as db:
            queue = Queue(db, queue_name)
            gap = spread_ms / max(len(share), 1) / 1000
            for key, _, d in share:
                log.enqueued[key] = now_ms()
                await queue.enqueue(key, None, d)
                await asyncio.sleep(gap)

    async def work(queue: Queue, me: int, c: Claim, row: dict[str, Any]) -> None:
        what = behaviour.get(c.key, "ok")
        attempt = int(row.get("attempts") or 0)
        job_id = row.get("id")
        if what == "forget" and attempt == 1:
            return
        if what == "slow":
            end = now_ms() + 2.5 * lease_ms
            while now_ms() < end:
                await asyncio.sleep(min(lease_ms / 3, max(end - now_ms(), 0)) / 1000)
                if now_ms() >= end:
                    break
                sent = now_ms()
                if await queue.extend(job_id, c.owner, lease_ms):
                    c.lease_end = sent + lease_ms
                else:
                    log.stale += 1
                    return
        if what == "fail_always" or (what == "fail_once" and attempt == 1):
            if await queue.fail(job_id, c.owner, f"{what} on attempt {attempt}", dead_after, backoff_ms):
                c.settled = True
                if attempt >= dead_after:
                    log.dead.add(c.key)
            else:
                log.stale += 1
        else:
            if await queue.ack(job_id, c.owner):
                c.settled = True
                log.acks[c.key] += 1
            else:
                log.stale += 1
        if finished():
            done.set()

    async def worker(me: int) -> None:
        async with AsyncClient(url, token=token) as db:
            queue = Queue(db, queue_name)
            counter = 0
            while not done.is_set() and now_ms() < deadline:
                counter += 1
                owner = f"w{me}:{counter}"
                sent = now_ms()
                rows, _ = await queue.claim(owner, batch, lease_ms, wait_ms)
                received = now_ms()
                mine: list[tuple[Claim, dict[str, Any]]] = []
                for row in rows:
                    c = Claim(key_of(row), me, owner, sent, received, lease_ms, int(row.get("attempts") or 0),
                              lease_end=sent + lease_ms)
                    log.claims.append(c)
                    mine.append((c, row))
                await asyncio.gather(*(work(queue, me, c, row) for c, row in mine))

    producers = spec.get("producers", {"count": 1, "spread_ms": 0})
    n_prod = max(int(producers["count"]), 1)
    random.shuffle(jobs)  # which failing job comes when, and from which producer, differs run to run
    shares = [jobs[i::n_prod] for i in range(n_prod)]
    worker_tasks = [asyncio.ensure_future(worker(i + 1)) for i in range(int(workers["count"]))]
    await asyncio.sleep(0.05)  # the workers are already waiting when the jobs come
    await asyncio.gather(*(produce(s, int(producers.get("spread_ms", 0))) for s in shares))
    try:
        await asyncio.wait_for(done.wait(), timeout=max((deadline - now_ms()) / 1000, 0.1))
    except TimeoutError:
        pass
    done.set()
    results = await asyncio.gather(*worker_tasks, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise Failed(f"a worker stopped: {type(r).__name__}: {r}")
    if not finished():
        raise Failed(f"timeout_ms: acked + dead = {len(jobs)} / {len(log.acks) + len(log.dead)}")

    # invariants (B.4.2), each measured conservatively from the runner's own clock
    by_key: dict[str, list[Claim]] = defaultdict(list)
    for c in sorted(log.claims, key=lambda c: c.sent):
        by_key[c.key].append(c)
    while_leased = before_due = reclaimed = 0
    for key, claims in by_key.items():
        for earlier, later in zip(claims, claims[1:], strict=False):
            if not earlier.settled and later.received + tolerance < earlier.lease_end:
                while_leased += 1
        for c in claims:
            if delay[key] and c.received < log.enqueued[key] + delay[key] - tolerance:
                before_due += 1
            if behaviour[key] == "forget" and c.attempts >= 2:
                reclaimed += 1
    async with AsyncClient(url, token=token) as db:
        q = db.collection(queue_name)
        dead_rows = await q.select("id", "error").where("run_at", None).rows()
        left = await q.where("run_at", "!=", None).count()
    if any(r.get("error") in (None, "") for r in dead_rows):
        raise Failed("dead: every dead row keeps its error / a dead row without one")
    return {
        "acked": len(log.acks),
        "acked_twice": sum(1 for n in log.acks.values() if n > 1),
        "dead": len(dead_rows),
        "left": left,
        "claimed_while_leased": while_leased,
        "claimed_before_due": before_due,
        "reclaimed_after_lapse": reclaimed,
        "stale": log.stale,
        "max_attempts": max((c.attempts for c in log.claims), default=0),
    }


def check_invariants(expect: dict[str, Any], got: dict[str, int]) -> None:
    for name, want in expect.items():
        value = got.get(name)
        if value is None:
            raise Failed(f"{name}: an invariant this runner knows / unknown")
        if isinstance(want, dict):
            if "min" in want and value < want["min"]:
                raise Failed(f"{name}: at least {want['min']} / {value}")
            if "max" in want and value > want["max"]:
                raise Failed(f"{name}: at most {want['max']} / {value}")
        elif value != want:
            raise Failed(f"{name}: {want} / {value}")


# -- the run ----------------------------------------------------------------------------------------

async def run_scenario(url: str, token: str | None, scenario: dict[str, Any]) -> str:
    queue_name = f"{scenario.get('prefix', 'q')}_{LANG}_{secrets.token_hex(4)}"
    tolerance = float(scenario.get("tolerance_ms", 150))
    timeout_ms = float(scenario.get("timeout_ms", 30000))
    deadline = now_ms() + timeout_ms
    schema = (scenario.get("schema") or DEFAULT_SCHEMA).replace("{q}", queue_name)
    async with AsyncClient(url, token=token) as admin:
        await admin.query(schema)
        try:
            if scenario.get("kind") == "swarm":
                got = await swarm(url, token, queue_name, scenario, tolerance, deadline)
                check_invariants(scenario.get("expect", {}), got)
                return ", ".join(f"{k} {v}" for k, v in got.items())
            script = Script(url, token, queue_name, tolerance)
            async with AsyncClient(url, token=token) as db:
                await asyncio.wait_for(script.run(scenario.get("steps", []), db), timeout=timeout_ms / 1000)
            return f"{len(scenario.get('steps', []))} steps"
        except TimeoutError as exc:
            raise Failed(f"timeout_ms: within {timeout_ms:.0f} ms / still running") from exc
        finally:
            try:
                await admin.query(f"drop collection {queue_name}")
            except (FenecError, OSError):
                pass


def run_file(path: Path, only: str | None, out: Callable[[str], None] = print) -> tuple[int, int]:
    """Runs a scenarios file; answers (passed, failed). Skipped scenarios count in neither."""
    url = (os.environ.get("FENEC_URL") or "").rstrip("/")
    token = os.environ.get("FENEC_TOKEN") or None
    require = os.environ.get("FENEC_REQUIRE_SERVER") == "1"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        scenarios = data["scenarios"]
        if data.get("format") != 1 or not isinstance(scenarios, list):
            raise ValueError("not a format 1 scenarios file")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        out(f"FAIL {path}: cannot read the scenarios: {exc}")
        out(f"scenarios {path}: 0 ok, 1 FAIL, 0 skipped")
        return 0, 1
    chosen = [s for s in scenarios if not only or only in s.get("name", "")]
    passed = failed = skipped = 0
    if not url:
        if require:
            out("FAIL scenarios: FENEC_REQUIRE_SERVER=1 but FENEC_URL is not set")
            out(f"scenarios {path}: 0 ok, 1 FAIL, 0 skipped")
            return 0, 1
        for s in chosen:
            out(f"skipped {s.get('name')}: FENEC_URL not set")
        out(f"scenarios {path}: 0 ok, 0 FAIL, {len(chosen)} skipped")
        return 0, 0
    for scenario in chosen:
        name = scenario.get("name", "?")
        try:
            summary = asyncio.run(run_scenario(url, token, scenario))
        except Failed as exc:
            failed += 1
            out(f"FAIL {name}: {exc}")
        except (FenecError, OSError) as exc:
            failed += 1
            out(f"FAIL {name}: no error / {type(exc).__name__}: {exc}")
        else:
            passed += 1
            out(f"ok {name}: {summary}")
    out(f"scenarios {path}: {passed} ok, {failed} FAIL, {skipped} skipped")
    return passed, failed


def scenarios_path() -> Path:
    given = os.environ.get("FENEC_SCENARIOS")
    return Path(given).resolve() if given else DEFAULT_SCENARIOS


def main(argv: list[str]) -> int:
    path = Path(argv[1]).resolve() if len(argv) > 1 else scenarios_path()
    _, failed = run_file(path, os.environ.get("FENEC_ONLY") or None)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
