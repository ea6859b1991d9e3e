"""Statements under a token's rules, in process through `Database.execute(scope=...)`
(access.md §4, and the engine-side refusals of §5)."""

from __future__ import annotations

import pytest
from conftest import SPEC_EPOCH_MS, TestClock, dump
from fenecdb_server import Database, FenecError
from fenecdb_server.policy import Policy

NOW = SPEC_EPOCH_MS


@pytest.fixture
def db(db):  # conftest's, on its clock
    db.query("create collection jobs (queue text, payload json, run_at timestamp @sorted, owner text, "
             "attempts int, error text, hidden bool)")
    return db


def run(db, scope, text, params=None):
    return db.execute([(text, params)], scope=scope).answers[0]


def refusal(db, scope, text, params=None) -> FenecError:
    before = dump(db)
    with pytest.raises(FenecError) as e:
        run(db, scope, text, params)
    assert dump(db) == before, "a refusal left something behind"
    return e.value


def enqueue(db, *queues, at=-1000):
    for q in queues:
        db.query("put jobs {queue: $1, run_at: now() + $2, attempts: 0, hidden: false}", [q, at])


# ---------------------------------------------------------------- the seed's worker policy, end to end

WORKERS = """\
jobs  read                               where queue = $jwt.queue and owner = $jwt.sub
jobs  update(owner, run_at, attempts)    where queue = $jwt.queue and run_at <= now() and new.owner = $jwt.sub and new.attempts = attempts + 1  for worker
jobs  update(run_at, error)              where queue = $jwt.queue and owner = $jwt.sub  for worker
jobs  delete                             where queue = $jwt.queue and owner = $jwt.sub  for worker
jobs  insert                             where queue = $jwt.queue   for producer
"""
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit {} returning id, queue, owner, attempts")


def test_a_worker_claims_its_queues_jobs_alone_and_reads_only_its_own(db, clock):
    policy = Policy.parse(WORKERS)
    producer = policy.scope_for({"role": "producer", "queue": "mail"})  # no sub: the read rule skips it
    w1 = policy.scope_for({"sub": "w1", "role": "worker", "queue": "mail"})
    w2 = policy.scope_for({"sub": "w2", "role": "worker", "queue": "mail"})
    img = policy.scope_for({"sub": "w3", "role": "worker", "queue": "image"})
    for i in range(3):
        assert run(db, producer, "put jobs {payload: $1, run_at: now(), attempts: 0}", [{"n": i}]) == {"affected": 1}
    enqueue(db, "image")  # by the server token
    assert [r["queue"] for r in db.query("get jobs")] == ["mail", "mail", "mail", "image"]  # filled from the claim

    got = run(db, w1, CLAIM.replace("{}", "2"), ["w1"])
    assert got == [{"id": 1, "queue": "mail", "owner": "w1", "attempts": 1},
                   {"id": 2, "queue": "mail", "owner": "w1", "attempts": 1}]
    assert run(db, w2, CLAIM.replace("{}", "5"), ["w2"]) == [{"id": 3, "queue": "mail", "owner": "w2", "attempts": 1}]
    assert run(db, img, CLAIM.replace("{}", "5"), ["w3"]) == [{"id": 4, "queue": "image", "owner": "w3", "attempts": 1}]
    assert run(db, w1, CLAIM.replace("{}", "5"), ["w1"]) == []  # nothing ready in its queue

    # reads: only the jobs it owns, in where and in count
    assert [r["id"] for r in run(db, w1, "get jobs")] == [1, 2]
    assert run(db, w1, "get jobs where id = 3") == []
    assert run(db, w1, "get jobs count") == [{"count": 2}]
    assert run(db, w2, "get jobs where queue = 'image' count") == [{"count": 0}]

    # cannot claim for another worker, nor reset the attempts a dead letter keeps
    clock.advance(31_000)
    e = refusal(db, w1, "set jobs {owner: 'w2', run_at: now() + 30000, attempts: attempts + 1} "
                        "where run_at <= now() order run_at limit 1")
    assert e.status == 403
    e = refusal(db, w1, "set jobs {owner: 'w1', run_at: now() + 30000, attempts: 0} "
                        "where run_at <= now() order run_at limit 1")
    assert e.status == 403
    # changes nothing but owner, run_at, attempts (and its own jobs' error)
    e = refusal(db, w1, "set jobs {owner: 'w1', attempts: attempts + 1, queue: 'image'} where id = 1")
    assert e.status == 403 and "`queue`" in e.message
    e = refusal(db, w1, "set jobs {payload: {}} where id = 1")
    assert e.status == 403 and e.message == "this token may not change `payload` in `jobs`"

    # extend, fail and ack its own: the second update rule
    assert run(db, w1, "set jobs {run_at: now() + 60000} where id = 1 and owner = 'w1' require 1") == {"affected": 1}
    assert run(db, w1, "set jobs {error: 'boom', run_at: now() + 1000} where id = 2 require 1") == {"affected": 1}
    assert run(db, w1, "del jobs where id = 1 require 1") == {"affected": 1}
    assert run(db, w2, "del jobs where id = 2") == {"affected": 0}  # not its job: not there for it
    assert [r["id"] for r in db.query("get jobs")] == [2, 3, 4]  # the server token sees everything

    e = refusal(db, producer, "get jobs")
    assert e.status == 403 and e.message == "this token may not read `jobs`"


def test_the_claim_example_of_section_4_4(db):
    """Rules `read where queue = $jwt.queue and hidden = false` and `update(owner, run_at, attempts)
    where queue = $jwt.queue for worker`; job 1 image, 2 mail hidden, 3 and 4 mail."""
    enqueue(db, "image", "mail", "mail", "mail")
    db.query("set jobs {hidden: true} where id = 2")
    policy = Policy.parse("jobs read where queue = $jwt.queue and hidden = false\n"
                          "jobs update(owner, run_at, attempts) where queue = $jwt.queue for worker")
    w = policy.scope_for({"sub": "w1", "role": "worker", "queue": "mail"})
    before = {r["id"]: r for r in db.query("get jobs")}
    got = run(db, w, "set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
                     "where run_at <= now() order run_at limit 1 returning id, queue", ["w1"])
    assert got == [{"id": 3, "queue": "mail"}]
    after = {r["id"]: r for r in db.query("get jobs")}
    assert after[3]["owner"] == "w1" and after[3]["attempts"] == 1
    assert {i: after[i] for i in (1, 2, 4)} == {i: before[i] for i in (1, 2, 4)}


def test_a_claim_passes_over_rows_whose_written_form_it_cannot_read_and_goes_on(db):
    enqueue(db, *["mail"] * 10)
    db.query("set jobs {hidden: true} where id <= 7")
    policy = Policy.parse("jobs read where hidden = false\njobs update")
    w = policy.scope_for({"sub": "w"})
    got = run(db, w, "set jobs {owner: 'w'} order run_at limit 2 returning id")
    assert got == [{"id": 8}, {"id": 9}]  # past a page of one, then two: the pick goes on
    assert [r["id"] for r in db.query("get jobs where owner = 'w'")] == [8, 9]
    # without returning no read check is made
    assert run(db, w, "set jobs {owner: 'x'} where id <= 3") == {"affected": 3}


def test_with_check_comes_before_readability_and_refuses_the_whole_statement(db):
    enqueue(db, "mail", "mail")
    db.query("set jobs {hidden: true} where id = 1")
    policy = Policy.parse("jobs read where hidden = false\njobs update where queue = 'mail'")
    w = policy.scope_for({})
    e = refusal(db, w, "set jobs {queue: 'image'} order id limit 1 returning id")
    assert e.status == 403 and "outside what this token may write to `jobs`" in e.message


def test_returning_is_held_to_the_read_rules_as_written(db):
    enqueue(db, "mail", "mail")
    policy = Policy.parse("jobs read where owner = $jwt.sub\njobs update")
    w = policy.scope_for({"sub": "w1"})
    assert run(db, w, "set jobs {owner: 'w1'} where id = 1 returning id") == [{"id": 1}]
    assert run(db, w, "set jobs {owner: 'w9'} where id = 2 returning id") == []
    assert db.query("get jobs where id = 2")[0]["owner"] is None  # passed over: not written


# ---------------------------------------------------------------- reads


def test_read_rules_widen_each_other_and_are_anded_into_where_and_count(db):
    enqueue(db, "a", "b", "c", "a")
    policy = Policy.parse("jobs read where queue = 'a'\njobs read where queue = $jwt.q")
    s = policy.scope_for({"q": "b"})
    assert [r["id"] for r in run(db, s, "get jobs order id desc")] == [4, 2, 1]
    assert run(db, s, "get jobs where id > 1 count") == [{"count": 2}]
    assert [r["id"] for r in run(db, s, "get jobs order id limit 1 offset 1")] == [2]
    assert run(db, s, "get jobs where queue = 'c'") == []
    assert [r["id"] for r in run(db, policy.scope_for({}), "get jobs")] == [1, 4]  # the $jwt.q rule skipped
    with pytest.raises(FenecError) as e:
        run(db, s, "get jobs require 4")
    assert e.value.status == 412


def test_a_rule_without_filter_reads_every_row(db):
    enqueue(db, "a", "b")
    s = Policy.parse("* read for dashboard").scope_for({"role": "dashboard"})
    assert run(db, s, "get jobs count") == [{"count": 2}]


def test_claim_lists_and_in(db):
    enqueue(db, "a", "b", "c")
    policy = Policy.parse("jobs read where queue in $jwt.rooms\njobs read where queue in [$jwt.extra, 'c']")
    assert [r["id"] for r in run(db, policy.scope_for({"rooms": ["a", "b"]}), "get jobs")] == [1, 2]
    assert [r["id"] for r in run(db, policy.scope_for({"rooms": "b"}), "get jobs")] == [2]
    assert [r["id"] for r in run(db, policy.scope_for({"extra": "a"}), "get jobs")] == [1, 3]


def test_the_same_text_under_two_tokens_binds_each_tokens_claims(db):
    enqueue(db, "a", "b")
    policy = Policy.parse("jobs read where queue = $jwt.q")
    for _ in range(2):  # the second round comes from the prepared cache
        assert [r["queue"] for r in run(db, policy.scope_for({"q": "a"}), "get jobs")] == ["a"]
        assert [r["queue"] for r in run(db, policy.scope_for({"q": "b"}), "get jobs")] == ["b"]


# ---------------------------------------------------------------- inserts


def test_insert_fills_pinned_fields_and_refuses_documents_outside(db):
    policy = Policy.parse("jobs insert where queue = $jwt.queue and attempts = 0\n"
                          "jobs read where owner = $jwt.sub")
    p = policy.scope_for({"sub": "p", "queue": "mail"})
    assert run(db, p, "put jobs {payload: {n: 1}}") == {"affected": 1}
    assert run(db, p, "put jobs [{queue: 'mail', attempts: 0}, {run_at: now()}]") == {"affected": 2}
    assert run(db, p, "put jobs $1", [[{"payload": {"n": 2}}]]) == {"affected": 1}
    rows = db.query("get jobs")
    assert [(r["queue"], r["attempts"]) for r in rows] == [("mail", 0)] * 4
    e = refusal(db, p, "put jobs {queue: 'image'}")
    assert e.status == 403 and e.message == "the document is outside what this token may write to `jobs`"
    e = refusal(db, p, "put jobs [{payload: 1}, {attempts: 3}]")  # one outside: none lands
    assert e.status == 403
    e = refusal(db, p, "put jobs $1", [{"queue": "image"}])
    assert e.status == 403
    # a token may insert into a collection it cannot read
    assert run(db, p, "get jobs") == []


def test_a_scoped_put_may_not_name_id(db):
    s = Policy.parse("jobs insert\njobs read").scope_for({})
    e = refusal(db, s, "put jobs {id: 7, queue: 'a'}")
    assert e.status == 403 and "without `id`" in e.message
    e = refusal(db, s, "put jobs $1", [{"id": 7}])
    assert e.status == 403


def test_a_unique_clash_names_only_the_field_for_a_scoped_token(db):
    db.query("create collection profiles (email text @unique, owner text)")
    db.query("put profiles {email: 'ada@example.com', owner: 'ada'}")
    s = Policy.parse("profiles insert where owner = $jwt.sub\nprofiles read where owner = $jwt.sub\n"
                     "profiles update where owner = $jwt.sub").scope_for({"sub": "bob"})
    e = refusal(db, s, "put profiles {email: 'ada@example.com'}")
    assert e.status == 409 and e.message == "`profiles.email` is unique, and the value is taken"
    run(db, s, "put profiles {email: 'bob@example.com'}")
    e = refusal(db, s, "set profiles {email: 'ada@example.com'}")
    assert e.status == 409 and "ada" not in e.message and "1" not in e.message
    with pytest.raises(FenecError) as full:
        db.query("put profiles {email: 'ada@example.com'}")
    assert "document 1" in full.value.message  # the server token gets the whole message


# ---------------------------------------------------------------- updates


def test_update_needs_update_and_read_grants(db):
    enqueue(db, "a")
    e = refusal(db, Policy.parse("jobs read").scope_for({}), "set jobs {owner: 'x'}")
    assert e.status == 403 and e.message == "this token may not update rows of `jobs`"
    e = refusal(db, Policy.parse("jobs update").scope_for({}), "set jobs {owner: 'x'}")
    assert e.status == 403 and e.message == "this token may not read `jobs`"
    e = refusal(db, Policy.parse("jobs read").scope_for({}), "del jobs")
    assert e.status == 403 and e.message == "this token may not delete rows of `jobs`"


def test_update_touches_only_rows_its_rules_admit_as_they_are(db):
    enqueue(db, "a", "b", "a")
    s = Policy.parse("jobs read\njobs update where queue = 'a'").scope_for({})
    assert run(db, s, "set jobs {owner: 'x'}") == {"affected": 2}
    assert [r["owner"] for r in db.query("get jobs")] == ["x", None, "x"]
    assert run(db, s, "set jobs {owner: 'y'} where id = 2") == {"affected": 0}
    with pytest.raises(FenecError) as e:
        run(db, s, "set jobs {owner: 'y'} where id = 2 require 1")
    assert e.value.status == 412  # require counts what the scoped statement wrote


def test_a_field_written_with_its_current_value_does_not_count(db):
    enqueue(db, "a")
    s = Policy.parse("jobs read\njobs update(owner)").scope_for({})
    assert run(db, s, "set jobs {owner: 'x', queue: 'a', attempts: 0}") == {"affected": 1}
    e = refusal(db, s, "set jobs {owner: 'y', attempts: 1}")
    assert e.message == "this token may not change `attempts` in `jobs`"


def test_changed_fields_must_be_listed_by_one_rule_admitting_the_row(db):
    db.query("create collection accounts (kind text, plan text, owner text)")
    db.query("put accounts {kind: 'free', plan: 'p', owner: 'u'}")
    policy = Policy.parse("accounts read\naccounts update(kind) where owner = $jwt.sub\n"
                          "accounts update(plan) where owner = $jwt.sub")
    s = policy.scope_for({"sub": "u"})
    run(db, s, "set accounts {kind: 'pro'}")
    run(db, s, "set accounts {plan: 'q'}")
    e = refusal(db, s, "set accounts {kind: 'free', plan: 'r'}")
    assert e.status == 403 and e.message == "this token may not change `kind`, `plan` of that row of `accounts`"
    e = refusal(db, s, "set accounts {owner: 'v'}")
    assert e.message == "this token may not change `owner` in `accounts`"


def test_with_check_refuses_the_whole_statement(db):
    enqueue(db, "a", "a", "a")
    s = Policy.parse("jobs read\njobs update where attempts < 2").scope_for({})
    run(db, s, "set jobs {attempts: 1} where id = 1")
    e = refusal(db, s, "set jobs {attempts: attempts + 1}")  # job 1 would leave the rule
    assert e.status == 403


def test_a_transition_checks_old_and_new_together(db, clock):
    enqueue(db, "mail", "mail")
    db.query("set jobs {run_at: now() + 5000} where id = 2")
    s = Policy.parse("jobs read\njobs update(owner, run_at, attempts) where queue = $jwt.queue and "
                     "run_at <= now() and new.owner = $jwt.sub and new.attempts = attempts + 1"
                     ).scope_for({"sub": "w", "queue": "mail"})
    assert run(db, s, "set jobs {owner: 'w', run_at: now() + 30000, attempts: attempts + 1} "
                      "order run_at limit 5 returning id") == [{"id": 1}]  # 2 is not ready: USING
    clock.advance(40_000)
    e = refusal(db, s, "set jobs {owner: 'w', run_at: now() + 30000, attempts: attempts + 2} where id = 2")
    assert e.status == 403
    e = refusal(db, s, "set jobs {owner: 'z', run_at: now() + 30000, attempts: attempts + 1} where id = 2")
    assert e.status == 403
    assert run(db, s, "set jobs {owner: 'w', attempts: attempts + 1} where id = 2") == {"affected": 1}


# ---------------------------------------------------------------- deletes, upserts, append-only


def test_delete_touches_only_rows_its_delete_rules_admit(db):
    enqueue(db, "a", "b", "a")
    s = Policy.parse("jobs read\njobs delete where queue = 'a'").scope_for({})
    assert run(db, s, "del jobs order id limit 5 returning id") == [{"id": 1}, {"id": 3}]
    assert [r["id"] for r in db.query("get jobs")] == [2]


def test_a_picking_del_with_returning_passes_over_rows_it_cannot_read(db):
    enqueue(db, "a", "b", "a")
    s = Policy.parse("jobs read where queue = 'a'\njobs delete").scope_for({})
    assert run(db, s, "del jobs order id limit 1 returning id") == [{"id": 1}]
    assert run(db, s, "del jobs where id = 2 returning id") == []
    assert run(db, s, "del jobs where id = 2") == {"affected": 1}  # no returning: no read check


def test_upsert_needs_insert_and_update_of_that_row(db):
    db.query("create collection profiles (email text @unique, owner text, n int)")
    db.query("put profiles {email: 'ada@x', owner: 'ada', n: 0}")
    policy = Policy.parse("profiles read where owner = $jwt.sub\nprofiles insert where owner = $jwt.sub\n"
                          "profiles update(n) where owner = $jwt.sub")
    ada = policy.scope_for({"sub": "ada"})
    bob = policy.scope_for({"sub": "bob"})
    upsert = "put profiles {email: $1, n: 1} if absent else set {n: n + 1}"
    assert run(db, ada, upsert, ["ada@x"]) == {"affected": 1}
    assert db.query("get profiles where email = 'ada@x'")[0]["n"] == 1
    e = refusal(db, bob, upsert, ["ada@x"])
    assert e.status == 403
    assert run(db, bob, upsert, ["bob@x"]) == {"affected": 1}
    assert db.query("get profiles where email = 'bob@x'")[0]["owner"] == "bob"
    e = refusal(db, Policy.parse("profiles insert\nprofiles read").scope_for({}), upsert, ["c@x"])
    assert e.status == 403 and "may not update rows of `profiles`" in e.message


def test_append_only_refuses_every_scoped_set_del_and_overwrite(db):
    db.query("create collection journal (owner text, text text)")
    policy = Policy.parse("journal read,write where owner = $jwt.sub\njournal append-only")
    s = policy.scope_for({"sub": "u"})
    assert run(db, s, "put journal {text: 'hi'}") == {"affected": 1}
    for text in ("set journal {text: 'x'}", "del journal", "put journal {text: 'hi'} if absent else set {text: 'y'}"):
        e = refusal(db, s, text)
        assert e.status == 403 and "append-only" in e.message
    db.query("set journal {text: 'server'}")  # the server token is not bound


# ---------------------------------------------------------------- other refusals


def test_a_collection_without_a_grant_does_not_exist_for_the_token(db):
    db.query("create collection secrets (v text)")
    s = Policy.parse("jobs read").scope_for({})
    for text in ("get secrets", "put secrets {v: 'x'}", "set secrets {v: 'y'}", "del secrets", "get nosuch"):
        e = refusal(db, s, text)
        assert e.status == 404 and e.message == f"no collection `{text.split()[1]}`"
    assert [c["name"] for c in db.schemas(s)] == ["jobs"]
    assert [c["name"] for c in db.schemas()] == ["jobs", "secrets"]
    assert [c["name"] for c in db.schemas(Policy.parse("secrets insert").scope_for({}))] == ["secrets"]


def test_an_unknown_collection_hints_only_at_names_the_token_may_see(db):
    db.query("create collection secrets (v text)")
    db.query("create collection drafts (v text)")
    s = Policy.parse("jobs read\ndraft read").scope_for({})  # `draft` granted, but no such collection
    assert refusal(db, s, "get jbos").message == "no collection `jbos` (did you mean `jobs`?)"
    # `get secret` is refused before it is planned, `get draft` when it is: neither hints at what exists unseen
    for text in ("get secret", "get draft"):
        assert refusal(db, s, text).message == f"no collection `{text.split()[1]}`"
    assert refusal(db, None, "get secret").message == "no collection `secret` (did you mean `secrets`?)"
    e = refusal(db, None, "drop collection jbos")
    assert e.message == "no collection `jbos` (did you mean `jobs`?)"


def test_schema_statements_are_refused_to_every_scoped_token(db):
    s = Policy.parse("* read,write").scope_for({})
    for text in ("create collection x (a int)", "drop collection jobs", "create index on jobs (owner) @hash"):
        e = refusal(db, s, text)
        assert e.status == 403 and e.message == "a scoped token reads and writes documents; it changes no schema"


def test_claims_in_client_statements_stay_refused(db):
    s = Policy.parse("jobs read,write").scope_for({"sub": "u"})
    for text in ("get jobs where owner = $jwt.sub", "set jobs {owner: $jwt.sub}", "put jobs {owner: $jwt.sub}"):
        assert refusal(db, s, text).status == 400
    with pytest.raises(FenecError) as e:
        db.query("get jobs where owner = $jwt.sub")
    assert e.value.status == 400


def test_expired_needs_the_expired_grant(db, clock):
    db.query("create collection sessions (user text, seen timestamp @ttl(10s))")
    db.query("put sessions [{user: 'a', seen: now()}, {user: 'b', seen: now()}]")
    clock.advance(11_000)
    plain = Policy.parse("sessions read,delete").scope_for({})
    assert run(db, plain, "get sessions") == []
    e = refusal(db, plain, "get sessions where expired()")
    assert e.status == 403 and "`expired` grant" in e.message
    e = refusal(db, plain, "del sessions where expired()")
    assert e.status == 403 and "`expired` grant" in e.message
    swept = Policy.parse("sessions read,delete\nsessions expired where user = 'a'").scope_for({})
    assert [r["user"] for r in run(db, swept, "get sessions where expired()")] == ["a"]
    assert run(db, swept, "del sessions where expired()") == {"affected": 1}
    assert not Policy.parse("sessions write\n* read,write").scope_for({}).grants("sessions").has("expired")


def test_a_batch_is_scoped_statement_by_statement_before_anything_runs(db):
    enqueue(db, "a")
    s = Policy.parse("jobs read,update(owner)").scope_for({})
    before = dump(db)
    with pytest.raises(FenecError) as e:
        db.execute([("set jobs {owner: 'x'}", None), ("get jobs", None), ("create collection z (a int)", None)],
                   block=True, scope=s)
    assert e.value.status == 403 and e.value.at == 2
    with pytest.raises(FenecError) as e:
        db.execute([("set jobs {owner: 'x'}", None), ("set jobs {queue: 'b'}", None)], block=True, scope=s)
    assert e.value.status == 403 and e.value.at == 1
    assert dump(db) == before
    res = db.execute([("set jobs {owner: 'x'}", None), ("get jobs select owner", None)], block=True, scope=s)
    assert res.answers == [{"affected": 1}, [{"owner": "x"}]]


# ---------------------------------------------------------------- held claims


def test_a_scoped_held_claim_looks_only_at_rows_the_token_could_take(db, clock):
    policy = Policy.parse("jobs read where queue = $jwt.queue\n"
                          "jobs update(owner, run_at, attempts) where queue = $jwt.queue for worker")
    mail = policy.scope_for({"sub": "w", "role": "worker", "queue": "mail"})
    image = policy.scope_for({"sub": "v", "role": "worker", "queue": "image"})
    stmt = [("set jobs {owner: 'w', run_at: now() + 30000, attempts: attempts + 1} "
             "where run_at <= now() order run_at limit 1 returning id", None)]
    hm = db.prepare_hold(stmt, scope=mail)
    hi = db.prepare_hold(stmt, scope=image)
    hu = db.prepare_hold(stmt)
    assert hm.held and not db.look(hm.would_take) and not db.look(hi.would_take)
    enqueue(db, "image")
    assert not db.look(hm.would_take) and db.look(hi.would_take) and db.look(hu.would_take)
    enqueue(db, "mail", at=2000)
    assert not db.look(hm.would_take)
    assert db.look(hm.next_moment) == NOW + 2000
    clock.advance(2000)
    assert db.look(hm.would_take)
    # the same text under two tokens is two lines; the same rules and claim values one
    again = db.prepare_hold(stmt, scope=policy.scope_for({"sub": "w2", "role": "worker", "queue": "mail"}))
    assert hm.line_key != hi.line_key and hm.line_key != hu.line_key and hm.line_key == again.line_key
    with pytest.raises(FenecError) as e:
        db.prepare_hold([("get secrets", None), ("set jobs {owner: 'w'}", None)], scope=mail)
    assert e.value.status == 404


def test_a_held_look_does_not_wake_for_rows_the_token_could_not_read_as_written(db):
    enqueue(db, "mail")
    policy = Policy.parse("jobs read where owner = $jwt.sub\njobs update")
    s = policy.scope_for({"sub": "w"})
    claim = db.prepare_hold([("set jobs {owner: 'other'} order id limit 1 returning id", None)], scope=s)
    assert not db.look(claim.would_take)
    mine = db.prepare_hold([("set jobs {owner: 'w'} order id limit 1 returning id", None)], scope=s)
    assert db.look(mine.would_take)


# ---------------------------------------------------------------- errors never carry a row the token cannot read


def readme_policy() -> str:
    """The policy of the server README's access setup, as the README writes it."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    start = text.index("cat > jobs.policy <<'RULES'\n") + len("cat > jobs.policy <<'RULES'\n")
    return text[start:text.index("RULES\n", start)]


# A stricter policy than the README's, which a deployment may choose: a worker reads only the jobs
# it holds (`owner = $jwt.sub`), so a ready job of its own queue is one it may claim but not read.
OWN_JOBS_POLICY = """\
jobs  read                             where queue = $jwt.queue and owner = $jwt.sub  for worker
jobs  update(owner, run_at, attempts)  where queue = $jwt.queue and run_at <= now() and new.owner = $jwt.sub and new.attempts = attempts + 1  for worker
jobs  update(run_at)                   where queue = $jwt.queue and owner = $jwt.sub  for worker
jobs  delete                           where queue = $jwt.queue and owner = $jwt.sub  for worker
jobs  insert                           where queue = $jwt.queue                       for producer
"""

CARDS = ["4111 1111 1111 1111", "5500 0000 0000 0004", "3400 0000 0000 009", "6011 0000 0000 0004"]


@pytest.fixture
def readme_db(clock):
    d = Database(clock=clock)
    d.query("create collection jobs (queue text @hash, payload json, run_at timestamp @sorted, owner text, attempts int)")
    for card in CARDS:  # another queue's jobs, and their card numbers
        d.query("put jobs {queue: 'pay', payload: {card: $1}, run_at: now() - 1000, attempts: 0}", [card])
    return d


def no_card_in(e: FenecError) -> None:
    for card in CARDS:
        assert card not in e.message, e.message


def test_no_error_shows_a_row_of_another_queue_through_the_readme_policy(readme_db):
    """Issue 18: a `mail` worker, who may read none of the `pay` jobs, got 4 of 4 card numbers out
    of error messages, through a get by id, a set, a claim and its order. Now its statements never
    work an expression out on those rows: they answer what they would answer without the rows."""
    db = readme_db
    w = Policy.parse(readme_policy()).scope_for({"sub": "w-7", "role": "worker", "queue": "mail"})
    before = dump(db)
    for rid in range(1, 5):
        assert run(db, w, "get jobs where id = $1 and timestamp(payload.card) > 0", [rid]) == []
        assert run(db, w, "get jobs where timestamp(payload.card) > 0 and id = $1 count", [rid]) == [{"count": 0}]
        assert run(db, w, "set jobs {run_at: now() + 1000} where id = $1 and timestamp(payload.card) > 0",
                   [rid]) == {"affected": 0}
        assert run(db, w, "del jobs where timestamp(payload.card) > 0 and id = $1", [rid]) == {"affected": 0}
    claim = ("set jobs {owner: 'w-7', run_at: now() + 30000, attempts: attempts + 1} "
             "where run_at <= now() and timestamp(payload.card) > 0 order run_at limit 4 returning id")
    assert run(db, w, claim) == []
    assert run(db, w, "set jobs {owner: 'w-7', run_at: timestamp(payload.card), attempts: attempts + 1} "
                      "where run_at <= now() order timestamp(payload.card) limit 4 returning id") == []
    assert dump(db) == before


def test_an_error_on_a_row_the_token_may_update_but_not_read_is_withheld(readme_db):
    """A ready job of the worker's own queue is one it may claim (update) but not read (it is
    nobody's yet): a filter, an order key or a value that fails on it answers the error's status
    and a message without the row. Once the job is its own, the same error shows the value."""
    db = readme_db
    w = Policy.parse(OWN_JOBS_POLICY).scope_for({"sub": "w-7", "role": "worker", "queue": "mail"})
    db.query("put jobs {queue: 'mail', payload: {card: $1}, run_at: now() - 500, attempts: 0}", [CARDS[0]])
    withheld = "`set jobs` failed on a row this token may not read; the reason is withheld, since it would show the row"
    for text in (
        "set jobs {owner: 'w-7', run_at: now() + 30000, attempts: attempts + 1} "
        "where run_at <= now() and timestamp(payload.card) > 0 order run_at limit 1 returning id",
        "set jobs {owner: 'w-7', run_at: now() + 30000, attempts: attempts + 1} "
        "where run_at <= now() order timestamp(payload.card) limit 1 returning id",
        "set jobs {owner: 'w-7', run_at: timestamp(payload.card), attempts: attempts + 1} "
        "where run_at <= now() order run_at limit 1 returning id",
    ):
        e = refusal(db, w, text)
        assert (e.status, e.message) == (400, withheld), text
    # the held claim's look says "run it", and its run answers the same
    hold = db.prepare_hold([(
        "set jobs {owner: 'w-7', run_at: now() + 30000, attempts: attempts + 1} "
        "where run_at <= now() and timestamp(payload.card) > 0 order run_at limit 1 returning id", None)], scope=w)
    assert db.look(hold.would_take)
    # its own job: the error may show what the worker may read
    claim = CLAIM.replace("{}", "1")
    assert [r["id"] for r in run(db, w, claim, ["w-7"])] == [5]
    e = refusal(db, w, "get jobs where id = 5 and timestamp(payload.card) > 0")
    assert e.status == 400 and CARDS[0] in e.message
    # the server token reads every row: its errors are as they were
    with pytest.raises(FenecError) as server:
        db.query("get jobs where timestamp(payload.card) > 0")
    assert CARDS[0] in server.value.message


def test_an_upserts_error_on_a_row_the_token_may_not_read_is_withheld():
    db = Database(clock=TestClock())
    db.query("create collection p (email text @unique, owner text, secret text)")
    db.query("put p {email: 'a@x', owner: 'other', secret: 'SECRET-CARD'}")
    s = Policy.parse("p read where owner = $jwt.sub\np insert,update where owner = $jwt.sub\n").scope_for({"sub": "me"})
    e = refusal(db, s, "put p {email: 'a@x'} if absent else set {secret: timestamp(secret)}")
    assert e.status == 400 and "SECRET" not in e.message and "withheld" in e.message


# ---------------------------------------------------------------- one row never stops a queue


def test_a_claim_passes_over_a_job_whose_attempts_would_overflow(db):
    """Issue 18: a producer put `attempts` at the 64-bit maximum; every claim of that queue, the
    server token's too, was a 400 while that job was the oldest ready. A claim (a set with
    `limit`) passes over the row whose new values overflow and takes the next, in order."""
    top = 9223372036854775807
    db.query("put jobs {queue: 'mail', run_at: now() - 3000, attempts: $1}", [top])
    enqueue(db, "mail", "mail", at=-2000)
    claim = CLAIM.replace("{}", "1")
    assert db.query(claim, ["w1"]) == [{"id": 2, "queue": "mail", "owner": "w1", "attempts": 1}]
    assert db.query(CLAIM.replace("{}", "10"), ["w2"]) == [{"id": 3, "queue": "mail", "owner": "w2", "attempts": 1}]
    assert db.query(CLAIM.replace("{}", "10"), ["w3"]) == []
    with pytest.raises(FenecError) as e:
        db.query(claim + " require 1", ["w3"])
    assert e.value.status == 412
    assert db.query("get jobs select owner, attempts where id = 1") == [{"owner": None, "attempts": top}]
    # a worker's token passes over it the same way
    policy = Policy.parse(WORKERS)
    w4 = policy.scope_for({"sub": "w4", "role": "worker", "queue": "mail"})
    enqueue(db, "mail")
    assert run(db, w4, claim, ["w4"]) == [{"id": 4, "queue": "mail", "owner": "w4", "attempts": 1}]
    assert run(db, w4, claim, ["w4"]) == []
    # a set of every match is refused whole, as before; so is an overflow that reads no row
    for text in ("set jobs {attempts: attempts + 1} where queue = 'mail'",
                 "set jobs {attempts: attempts + 1} where id = 1",
                 "set jobs {attempts: 9223372036854775807 + 1} where run_at <= now() order run_at limit 1"):
        before = dump(db)
        with pytest.raises(FenecError) as e:
            db.query(text)
        assert e.value.status == 400 and "overflow" in e.value.message and dump(db) == before, text
    e2 = refusal(db, w4, "set jobs {owner: 'w4', run_at: now() + 30000, attempts: attempts + 1} where id = 1")
    assert e2.status == 400


def test_a_claim_passes_over_many_overflowing_rows_to_fill_its_page(db):
    top = 9223372036854775807
    for i in range(40):
        db.query("put jobs {queue: 'mail', run_at: now() - 5000 + $1, attempts: $2}", [i, top if i % 4 else 0])
    got = db.query(CLAIM.replace("{}", "10"), ["w1"])
    assert [r["id"] for r in got] == [1, 5, 9, 13, 17, 21, 25, 29, 33, 37]
    assert db.query(CLAIM.replace("{}", "10"), ["w2"]) == []
