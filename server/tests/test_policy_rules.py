"""The policy file (access.md §3): its grammar, every load error §3.1 names, which rules apply to
a token (§3.2), and what `/_whoami` answers for it (§6)."""

from __future__ import annotations

import pytest
from fenecdb_server import FenecError
from fenecdb_server.policy import Policy, PolicyError

SEED = """\
# collection  grants                              rows                                 role
jobs          read                                where queue = $jwt.queue
jobs          update(owner, run_at, attempts)     where queue = $jwt.queue             for worker
jobs          delete                              where queue = $jwt.queue             for worker
jobs          insert                              where queue = $jwt.queue             for producer
journal       read,insert                         where owner = $jwt.sub
journal       append-only
*             read                                                                     for dashboard
"""


def refused(text: str) -> str:
    with pytest.raises(PolicyError) as e:
        Policy.parse(text, name="jobs.policy")
    assert isinstance(e.value, FenecError) and e.value.status == 400
    return e.value.message


def test_the_seed_policy_loads_rule_by_rule():
    p = Policy.parse(SEED)
    assert [(r.line, r.collection, sorted(r.grants), r.fields, r.rows, r.role) for r in p.rules] == [
        (2, "jobs", ["read"], None, "queue = $jwt.queue", None),
        (3, "jobs", ["update"], ("attempts", "owner", "run_at"), "queue = $jwt.queue", "worker"),
        (4, "jobs", ["delete"], None, "queue = $jwt.queue", "worker"),
        (5, "jobs", ["insert"], None, "queue = $jwt.queue", "producer"),
        (6, "journal", ["insert", "read"], None, "owner = $jwt.sub", None),
        (8, "*", ["read"], None, None, "dashboard"),
    ]
    assert [(a.line, a.collection) for a in p.append_only] == [(7, "journal")]


def test_comments_blank_lines_and_a_hash_inside_a_text():
    p = Policy.parse('\n   \n# all comment\nnotes read where tag = "#x"   # trailing\n')
    (r,) = p.rules
    assert r.rows == 'tag = "#x"'


def test_write_spreads_and_update_without_list_means_any_field():
    (r,) = Policy.parse("notes write").rules
    assert r.grants == {"insert", "update", "delete"} and r.fields is None
    (r,) = Policy.parse("notes update(a), update").rules
    assert r.fields is None
    (r,) = Policy.parse("notes read, update( b ,a ), expired").rules
    assert r.grants == {"read", "update", "expired"} and r.fields == ("a", "b")


@pytest.mark.parametrize("line, why", [
    ("jobs update()", "update() names no field"),
    ("jobs update(id)", "`id` can never change"),
    ("jobs update(a, id)", "`id` can never change"),
    ("jobs update((a))", "do not nest"),
    ("jobs update(a, (b))", "do not nest"),
    ("jobs update(a, b", "not closed"),
    ("jobs update(x y)", "separated by commas"),
    ("jobs update(1x)", "not a field name"),
    ("jobs update(a,)", "empty field name"),
    ("jobs read(a)", "only update takes a field list"),
    ("jobs reed", "unknown grant `reed`"),
    ("jobs read insert", "grants are separated by commas"),
    ("jobs read,,insert", "empty grant"),
    ("jobs", "names no grant"),
    ("jobs where a = 1", "names its grants before `where`"),
    ("jobs read where", "`where` needs a condition"),
    ("jobs read where a = $1", "`$1`-style parameters"),
    ("jobs read where a in [$jwt.rooms, $2]", "`$1`-style parameters"),
    ("jobs read where expired()", "expired()"),
    ("jobs read where a = nosuch(1)", "unknown function `nosuch()`"),
    ("jobs read where a = = 1", "comparisons do not chain"),
    ("jobs read where a = 1 order a", "no order"),
    ("jobs read where a = 1 limit 3", "no order, limit"),
    ("jobs read for worker where a = 1", "`for <role>` must be the last two words"),
    ("jobs read where a = 1 for", "`for <role>` must be the last two words"),
    ("jobs read where a = 1 for worker extra", "`for <role>` must be the last two words"),
    ("jobs read for 9lives", "not a role name"),
    ("jobs read where new.a = 1", "grants update only"),
    ("jobs read,update where new.a = 1", "grants update only"),
    ("jobs update where a = 1 or new.b = 2", "top-level `and` terms"),
    ("jobs update where not (new.b = 2)", "top-level `and` terms"),
    ("jobs append-only where a = 1", "append-only takes no filter and no role"),
    ("jobs append-only for worker", "append-only takes no filter and no role"),
    ("jobs read,append-only", "append-only stands alone"),
    ("jobs-2 read", "not a collection name"),
    ("_idempotency read", "the server's own"),
])
def test_load_errors_name_the_line_and_why(line, why):
    msg = refused("# first line\n\n" + line)
    assert msg.startswith("jobs.policy: policy line 3: "), msg
    assert why in msg, msg


def test_a_filter_syntax_error_keeps_its_column_in_the_policy_line():
    msg = refused("jobs  read  where queue = = 1")
    assert "policy line 1" in msg and "(column 27)" in msg, msg
    assert "jobs  read  where queue = = 1"[27 - 1] == "="


def test_append_only_refuses_update_or_delete_by_name_but_not_write():
    assert "`journal` is append-only" in refused("journal append-only\njournal update")
    assert "policy line 2" in refused("journal append-only\njournal read,delete")
    assert "every collection is append-only" in refused("* append-only\nnotes update(a)")
    Policy.parse("journal append-only\njournal write\n* write")  # write means insert there


def test_load_reads_a_file_and_names_it(tmp_path):
    f = tmp_path / "jobs.policy"
    f.write_text("jobs read\njobs update()\n")
    with pytest.raises(PolicyError) as e:
        Policy.load(f)
    assert e.value.message.startswith(f"{f}: policy line 2: update() names no field")
    with pytest.raises(PolicyError):
        Policy.load(tmp_path / "missing.policy")
    f.write_text(SEED)
    assert len(Policy.load(f).rules) == 6


# ---------------------------------------------------------------- which rules apply (§3.2)


def lines_for(policy: Policy, claims: dict, collection: str, grant: str) -> list[int]:
    return [r.line for r in policy.scope_for(claims).grants(collection).rules(grant)]


def test_role_text_or_list_selects_rules_for_it():
    p = Policy.parse(SEED)
    w = {"sub": "w1", "role": "worker", "queue": "mail"}
    assert lines_for(p, w, "jobs", "update") == [3]
    assert lines_for(p, {**w, "role": ["producer", "worker"]}, "jobs", "update") == [3]
    assert lines_for(p, {**w, "role": ["producer", "worker"]}, "jobs", "insert") == [5]
    assert lines_for(p, {**w, "role": "producer"}, "jobs", "update") == []
    assert lines_for(p, {**w, "role": "workers"}, "jobs", "update") == []
    assert lines_for(p, {"sub": "w1", "queue": "mail"}, "jobs", "read") == [2]  # no role: rules without `for`


def test_a_rule_reading_a_claim_the_token_lacks_is_skipped():
    p = Policy.parse("jobs read where queue = $jwt.queue\njobs read where owner = $jwt.sub\n"
                     "jobs read where tenant = $jwt.org.id")
    assert lines_for(p, {"sub": "a"}, "jobs", "read") == [2]
    assert lines_for(p, {"queue": "q"}, "jobs", "read") == [1]
    assert lines_for(p, {"org": {"id": 3}}, "jobs", "read") == [3]
    assert lines_for(p, {"org": "flat"}, "jobs", "read") == []
    s = p.scope_for({})
    assert not s.visible("jobs")  # nothing applies: the collection does not exist for it


def test_a_rule_is_skipped_for_a_token_lacking_any_of_its_claims_not_only_the_first():
    p = Policy.parse("jobs read where queue = $jwt.queue and owner = $jwt.sub\n"
                     "jobs update(owner) where (tenant = $jwt.org.id or tenant = 0) and owner = $jwt.sub")
    assert lines_for(p, {"queue": "q", "sub": "a"}, "jobs", "read") == [1]
    assert lines_for(p, {"queue": "q"}, "jobs", "read") == []  # lacks sub, the second claim it reads
    assert lines_for(p, {"sub": "a"}, "jobs", "read") == []
    assert lines_for(p, {"org": {"id": 1}}, "jobs", "update") == []
    assert lines_for(p, {"org": {"id": 1}, "sub": "a"}, "jobs", "update") == [2]
    # held claims of two tokens that differ in a later claim wait in different lines
    a = p.scope_for({"queue": "q", "sub": "a"}).line_key("jobs")
    b = p.scope_for({"queue": "q", "sub": "b"}).line_key("jobs")
    assert a != b


def test_star_rules_widen_but_never_reach_the_idempotency_keys():
    p = Policy.parse("* read for dashboard\njobs read where queue = $jwt.queue")
    d = p.scope_for({"role": "dashboard", "queue": "q"})
    assert lines_for(p, {"role": "dashboard", "queue": "q"}, "jobs", "read") == [1, 2]
    assert d.visible("anything") and d.visible("jobs")
    assert not d.visible("_idempotency")
    assert not p.scope_for({"queue": "q"}).visible("anything")


def test_append_only_leaves_insert_of_write_and_star_rules():
    p = Policy.parse("journal append-only\njournal write\n* write\n* read")
    g = p.scope_for({}).grants("journal")
    assert g.append_only and g.has("insert") and g.has("read")
    assert not g.has("update") and not g.has("delete")
    other = p.scope_for({}).grants("notes")
    assert not other.append_only and other.has("update") and other.has("delete")


def test_the_key_of_a_scope_names_the_rules_applied_not_the_claim_values():
    p = Policy.parse(SEED)
    a = p.scope_for({"sub": "a", "role": "worker", "queue": "mail"}).grants("jobs").key
    b = p.scope_for({"sub": "b", "role": "worker", "queue": "image"}).grants("jobs").key
    c = p.scope_for({"sub": "c", "role": "producer", "queue": "mail"}).grants("jobs").key
    assert a == b and a != c


# ---------------------------------------------------------------- whoami (§6)


def test_whoami_lists_only_the_rules_that_apply():
    p = Policy.parse(SEED)
    who = p.scope_for({"sub": "w1", "role": "worker", "queue": "mail"}).whoami()
    assert who == {
        "sub": "w1",
        "append_only": ["journal"],
        "rules": [
            {"collection": "jobs", "grants": ["read"], "fields": None, "rows": "queue = $jwt.queue"},
            {"collection": "jobs", "grants": ["update"], "fields": ["attempts", "owner", "run_at"],
             "rows": "queue = $jwt.queue"},
            {"collection": "jobs", "grants": ["delete"], "fields": None, "rows": "queue = $jwt.queue"},
            {"collection": "journal", "grants": ["read", "insert"], "fields": None, "rows": "owner = $jwt.sub"},
        ],
    }
    dash = p.scope_for({"role": "dashboard"}).whoami()
    assert dash == {"sub": None, "append_only": ["journal"],
                    "rules": [{"collection": "*", "grants": ["read"], "fields": None, "rows": None}]}


def test_whoami_shows_write_on_an_append_only_collection_as_insert():
    p = Policy.parse("journal append-only\njournal read,write")
    assert p.scope_for({"sub": "s"}).whoami()["rules"] == [
        {"collection": "journal", "grants": ["read", "insert"], "fields": None, "rows": None}]
