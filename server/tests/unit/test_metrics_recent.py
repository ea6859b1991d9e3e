"""http/metrics.Recent: what `GET /_metrics/recent` answers, the server's per-second totals and,
per queue, the rates over about the last minute, from real statements through `Database` and
samples taken at given times (no clock is waited for)."""

from __future__ import annotations

from fenecdb_server import Database
from fenecdb_server.http.metrics import Recent

CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where queue = $2 and run_at <= now() order run_at limit 100 returning id")
ACK = "del jobs where id = $1 and owner = $2 require 1"


def work(db: Database, queue: str, n: int) -> None:
    """Enqueue n jobs of a queue, then claim and ack each."""
    db.query("put jobs $1", [[{"queue": queue, "run_at": 0, "attempts": 0} for _ in range(n)]])
    for row in db.query(CLAIM, ["w", queue]):
        db.query(ACK, [row["id"], "w"])


def rates(recent: Recent) -> dict[tuple[str, str], dict[str, float]]:
    doc = recent.render()
    rows = [dict(zip(doc["queue_fields"], r, strict=True)) for r in doc["queues"]]
    return {(r.pop("collection"), r.pop("queue")): r for r in rows}


def make() -> Database:
    db = Database()
    db.query("create collection jobs (queue text, run_at timestamp @sorted, owner text, attempts int)")
    db.query("create collection tasks (run_at timestamp @sorted, owner text, attempts int)")
    return db


def test_each_queue_has_its_own_rates() -> None:
    db, recent = make(), Recent()
    recent.sample(db, None, at=1000.0)
    work(db, "mail", 20)
    work(db, "image", 4)
    db.query("put tasks $1", [[{"run_at": 0, "attempts": 0}] * 10])
    recent.sample(db, None, at=1002.0)
    doc = recent.render()
    assert doc["queues_span_s"] == 2.0
    assert rates(recent) == {
        ("jobs", "image"): {"enqueued": 2.0, "claimed": 2.0, "acked": 2.0, "failed": 0.0, "dead_lettered": 0.0},
        ("jobs", "mail"): {"enqueued": 10.0, "claimed": 10.0, "acked": 10.0, "failed": 0.0, "dead_lettered": 0.0},
        ("tasks", ""): {"enqueued": 5.0, "claimed": 0.0, "acked": 0.0, "failed": 0.0, "dead_lettered": 0.0},
    }
    # the whole server's per-second samples are as before: the totals of every queue
    fields = doc["fields"]
    last = dict(zip(fields, doc["samples"][-1], strict=True))
    assert (last["enqueued"], last["claimed"], last["acked"]) == (34, 24, 24)


def test_the_rates_cover_about_the_last_minute_not_the_whole_run() -> None:
    db, recent = make(), Recent()
    recent.sample(db, None, at=0.0)
    work(db, "mail", 50)  # all of it in the first second: gone from the window a minute later
    for t in range(1, 121):
        if t > 60:
            work(db, "mail", 1)  # one a second from then on
        recent.sample(db, None, at=float(t))
    doc = recent.render()
    # the constants read through the instance: on a compiled class they are not plain class attributes
    assert 60 <= doc["queues_span_s"] <= 60 + recent.QUEUE_STEP_S
    mail = rates(recent)[("jobs", "mail")]
    assert mail["acked"] == 1.0 and mail["enqueued"] == 1.0
    assert len(recent.marks) == recent.QUEUE_MARKS  # a few copies of the counters, however long it runs
    assert len(recent.samples) == 121


def test_before_two_samples_every_rate_is_zero() -> None:
    db, recent = make(), Recent()
    assert recent.render()["queues"] == []
    work(db, "mail", 3)
    recent.sample(db, None, at=5.0)
    doc = recent.render()
    assert doc["queues_span_s"] == 0.0
    assert rates(recent)[("jobs", "mail")]["acked"] == 0.0
