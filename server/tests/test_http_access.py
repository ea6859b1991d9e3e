"""Access over HTTP (access.md, http.md §6, §8.9, §9) against a real `fenec-server` child process:
the seed's worker policy, every row of "Refusals at a glance", refused tokens, the auth delay,
a held claim whose token expires, `/_whoami`, scoped listings and Idempotency-Keys per token scope.

Tokens are minted with the server's secret in the test (and once with `--mint-token`)."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from fenecdb_server.http.tokens import mint_claims
from test_http_e2e import Server, command, nd

SECRET = "a secret for the access tests, longer than 32 bytes"
ROOT = "root-token-for-tests"
ADMIN = "admin-token-for-tests"
JOBS = ("create collection jobs (queue text @hash, payload json, run_at timestamp @sorted, owner text, "
        "attempts int, error text)")


def claim(n: int) -> str:
    return ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
            f"where run_at <= now() order run_at limit {n} returning id, queue, owner, attempts")

# The seed's worker: it claims its queue's ready jobs, only for itself and adding exactly one
# attempt; it reads only the jobs it owns, extends and acks them. A producer enqueues.
POLICY = """\
# collection  grants                          rows                                                   role
jobs          read                            where queue = $jwt.queue and owner = $jwt.sub            for worker
jobs          update(owner, run_at, attempts) where queue = $jwt.queue and run_at <= now() and new.owner = $jwt.sub and new.attempts = attempts + 1  for worker
jobs          update(run_at)                  where queue = $jwt.queue and owner = $jwt.sub            for worker
jobs          delete                          where queue = $jwt.queue and owner = $jwt.sub            for worker
jobs          insert                          where queue = $jwt.queue                                 for producer
events        insert
notes         read,insert                     where owner = $jwt.sub
journal       read,insert                     where owner = $jwt.sub
journal       append-only
profiles      read,insert
sessions      read
"""

SETUP = [
    JOBS,
    "create collection secrets (v text)",
    "create collection events (kind text)",
    "create collection notes (owner text, text text)",
    "create collection journal (owner text, line text)",
    "create collection profiles (email text @unique, name text)",
    "create collection sessions (user text, until timestamp @ttl(1h))",
    "put secrets {v: 'the cellar key'}",
    "put profiles {email: 'ada@example.com', name: 'Ada'}",
]


def mint(claims: dict[str, Any], ttl: float = 3600) -> str:
    return mint_claims({"exp": int(time.time() + ttl), **claims}, SECRET.encode())


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


SERVER_AUTH = bearer(ROOT)


def q(c: httpx.Client, auth: dict[str, str], query: str, *params: Any, **headers: str) -> httpx.Response:
    return c.post("/query", json={"query": query, "params": list(params)}, headers={**auth, **headers})


def ok(r: httpx.Response) -> Any:
    assert r.status_code == 200, (r.status_code, r.text)
    return r.json()


def worker(sub: str, queue: str = "mail", **more: Any) -> dict[str, str]:
    return bearer(mint({"sub": sub, "role": "worker", "queue": queue, **more}))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("access")
    (d / "jobs.policy").write_text(POLICY)
    (d / "jwt.secret").write_text(SECRET + "\n")
    return d


def start(files: Path, *flags: str, env: dict[str, str] | None = None) -> Server:
    return Server("--http-token", ROOT, "--admin-token", ADMIN, "--jwt-secret-file", str(files / "jwt.secret"),
                  "--policy", str(files / "jobs.policy"), "--max-connections", "0", *flags, env=env)


@pytest.fixture(scope="module")
def server(files: Path) -> Any:
    s = start(files, "--auth-delay", "0")
    with s.client() as c:
        for text in SETUP:
            ok(q(c, SERVER_AUTH, text))
    yield s
    assert s.stop() == 0


@pytest.fixture
def c(server: Server) -> Any:
    with server.client() as client:
        ok(q(client, SERVER_AUTH, "del jobs"))
        yield client


def enqueue(c: httpx.Client, *queues: str, delay_ms: int = 0) -> list[int]:
    ids = []
    for queue in queues:
        ok(q(c, SERVER_AUTH, "put jobs {queue: $1, payload: {}, run_at: now() + $2, attempts: 0}", queue, delay_ms))
        ids.append(ok(q(c, SERVER_AUTH, "get jobs select id order id desc limit 1"))[0]["id"])
    return ids


def all_jobs(c: httpx.Client) -> list[dict[str, Any]]:
    return ok(q(c, SERVER_AUTH, "get jobs select id, queue, owner, attempts order id"))


# -- the seed's worker policy --------------------------------------------------------------------

def test_a_worker_claims_its_queues_jobs_alone_and_reads_only_its_own(c: httpx.Client) -> None:
    mail1, image1, mail2, mail3 = enqueue(c, "mail", "image", "mail", "mail")
    w1, w2 = worker("w1"), worker("w2")
    assert ok(q(c, w1, "get jobs")) == []  # owns nothing yet: reads nothing
    got = ok(q(c, w1, claim(10), "w1"))
    assert got == [{"id": i, "queue": "mail", "owner": "w1", "attempts": 1} for i in (mail1, mail2, mail3)]
    assert ok(q(c, w2, claim(10), "w2")) == []  # nothing of its queue left ready; image1 is not its
    assert {r["id"] for r in ok(q(c, w1, "get jobs select id"))} == {mail1, mail2, mail3}
    assert ok(q(c, w2, "get jobs count")) == [{"count": 0}]  # counts hold to the rules too
    assert ok(q(c, w1, "get jobs where queue = 'image'")) == []
    image = worker("i1", "image")
    assert ok(q(c, image, claim(10), "i1")) == [{"id": image1, "queue": "image", "owner": "i1", "attempts": 1}]
    # extend and ack its own; another worker's ack finds nothing (412), and changes nothing
    assert ok(q(c, w1, "set jobs {run_at: now() + 60000} where id = $1 and owner = $2 require 1", mail1, "w1")) \
        == {"affected": 1}
    r = q(c, w2, "del jobs where id = $1 require 1", mail1)
    assert r.status_code == 412
    assert ok(q(c, w1, "del jobs where id = $1 and owner = $2 require 1", mail1, "w1")) == {"affected": 1}
    # the server token sees everything
    assert [j["id"] for j in all_jobs(c)] == [image1, mail2, mail3]


def test_a_worker_changes_nothing_but_owner_run_at_and_attempts(c: httpx.Client) -> None:
    (job,) = enqueue(c, "mail")
    w1 = worker("w1")
    before = all_jobs(c)
    # for another worker, or wiping the attempts a dead letter keeps: the whole statement refused
    for text, params in ((claim(1), ["w2"]),
                         ("set jobs {owner: $1, run_at: now() + 30000, attempts: 0} where run_at <= now() "
                          "order run_at limit 1 returning id", ["w1"]),
                         ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 2} "
                          "where run_at <= now() order run_at limit 1", ["w1"])):
        r = q(c, w1, text, *params)
        assert r.status_code == 403, (text, r.text)
    assert all_jobs(c) == before
    ok(q(c, w1, claim(1), "w1"))
    for field, value in (("queue", "image"), ("payload", {"x": 1}), ("error", "x")):
        r = q(c, w1, f"set jobs {{{field}: $1}} where id = $2", value, job)
        assert r.status_code == 403, r.text
        assert r.json() == {"error": f"this token may not change `{field}` in `jobs`"}
    assert ok(q(c, SERVER_AUTH, "get jobs select queue, owner, attempts, error where id = $1", job)) == [
        {"queue": "mail", "owner": "w1", "attempts": 1, "error": None}]


def test_a_producer_enqueues_into_its_queue_only(c: httpx.Client) -> None:
    p = bearer(mint({"sub": "p1", "role": "producer", "queue": "mail"}))
    assert ok(q(c, p, "put jobs {payload: $1, run_at: now(), attempts: 0}", {"to": "ada"})) == {"affected": 1}
    assert [j["queue"] for j in all_jobs(c)] == ["mail"]  # filled in from its claim
    r = q(c, p, "put jobs {queue: 'image', payload: {}, run_at: now(), attempts: 0}")
    assert r.status_code == 403
    assert r.json() == {"error": "the document is outside what this token may write to `jobs`"}
    r = q(c, p, "get jobs")
    assert r.status_code == 403 and r.json() == {"error": "this token may not read `jobs`"}


def test_a_scoped_batch_is_refused_whole(c: httpx.Client) -> None:
    enqueue(c, "mail")
    w1 = worker("w1")
    r = c.post("/batch", headers=w1, content=nd(
        {"query": claim(1), "params": ["w1"]},
        {"query": "put notes {owner: 'w1', text: 'done'}"},
        {"query": "get secrets"}))
    assert r.status_code == 404 and r.json()["at"] == 2 and r.json()["completed"] == 0
    assert [j["owner"] for j in all_jobs(c)] == [None]
    assert ok(q(c, w1, "get notes")) == []


def test_the_admin_token_reads_metrics_and_nothing_else(server: Server, c: httpx.Client) -> None:
    admin = bearer(ADMIN)
    r = c.get("/_metrics", headers=admin)
    assert r.status_code == 200 and "fenec_statements_total" in r.text
    assert c.get("/_metrics", headers=SERVER_AUTH).status_code == 200
    for method, path in (("POST", "/query"), ("POST", "/batch"), ("GET", "/"), ("GET", "/collections"),
                         ("GET", "/_whoami")):
        r = c.request(method, path, headers=admin, content=b'{"query":"get jobs"}')
        assert r.status_code == 401 and r.json() == {"error": "invalid or missing token"}, path
    r = c.get("/_metrics", headers=worker("w1"))  # a JWT never reads metrics
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert c.get("/_metrics").status_code == 401
    assert c.get("/_health").status_code == 200  # never needs a token


# -- every row of "Refusals at a glance" (access.md §5) ---------------------------------------------

def test_refusals_at_a_glance(files: Path, c: httpx.Client) -> None:
    w1 = worker("w1")
    expired = bearer(mint({"sub": "w1", "role": "worker", "queue": "mail"}, ttl=-5))

    def refused(r: httpx.Response, status: int, error: str | None = None, *, contains: str = "") -> None:
        assert r.status_code == status, (r.status_code, r.text)
        body = r.json()
        if error is not None:
            assert body == {"error": error}
        assert contains in body["error"]

    # no / unknown token
    refused(c.post("/query", json={"query": "get jobs"}), 401, "invalid or missing token")
    refused(q(c, bearer("nobody"), "get jobs"), 401, "invalid or missing token")
    # expired / no exp / not yet valid / bad signature
    refused(q(c, expired, "get jobs"), 401, "the token has expired")
    refused(q(c, bearer(jwt.encode({"sub": "w1"}, SECRET, algorithm="HS256")), "get jobs"), 401, "the token has no exp: one without would be good for ever")
    refused(q(c, worker("w1", nbf=int(time.time()) + 600), "get jobs"), 401, "the token is not valid yet")
    refused(q(c, bearer(jwt.encode({"sub": "w1", "exp": int(time.time()) + 60}, "x" * 40, algorithm="HS256")),
              "get jobs"), 401, "the token's signature does not match")
    # a collection with no grant for the token does not exist for it
    unknown = q(c, w1, "get no_such_collection").json()["error"]
    refused(q(c, w1, "get secrets"), 404, unknown.replace("no_such_collection", "secrets"))
    # read of a collection granted only insert
    refused(q(c, w1, "get events"), 403, "this token may not read `events`")
    assert ok(q(c, w1, "put events {kind: 'x'}")) == {"affected": 1}
    # document outside the rules
    refused(q(c, w1, "put notes {owner: 'w2', text: 'hi'}"), 403,
            "the document is outside what this token may write to `notes`")
    # field not in update(...)
    enqueue(c, "mail")
    ok(q(c, w1, claim(1), "w1"))
    refused(q(c, w1, "set jobs {queue: 'image'} where owner = 'w1'"), 403, "this token may not change `queue` in `jobs`")
    # append-only
    ok(q(c, w1, "put journal {line: 'one'}"))
    refused(q(c, w1, "set journal {line: 'two'} where owner = 'w1'"), 403, contains="`journal` is append-only")
    refused(q(c, w1, "del journal where owner = 'w1'"), 403, contains="`journal` is append-only")
    # scoped put with id
    refused(q(c, w1, "put notes {id: 1, owner: 'w1', text: 'x'}"), 403, contains="a scoped token puts new documents")
    # schema change
    for text in ("create collection mine (x int)", "drop collection notes", "create index on notes (text) @hash"):
        refused(q(c, w1, text), 403, "a scoped token reads and writes documents; it changes no schema")
    # expired() without the grant
    refused(q(c, w1, "get sessions where expired()"), 403, contains="`expired` grant")
    # unique clash: the field, never the other row
    r = q(c, w1, "put profiles {email: 'ada@example.com', name: 'Eve'}")
    refused(r, 409, "`profiles.email` is unique, and the value is taken")
    assert "Ada" not in r.text
    full = q(c, SERVER_AUTH, "put profiles {email: 'ada@example.com', name: 'Eve'}")
    assert full.status_code == 409 and full.json()["error"] != r.json()["error"]
    # a write on a read-only server, scoped or not
    ro = start(files, "--auth-delay", "0", "--http-read-only")
    try:
        with ro.client() as rc:
            refused(q(rc, w1, "put notes {text: 'x'}"), 403, "the server is in read-only mode")
            refused(q(rc, SERVER_AUTH, "create collection x (n int)"), 403, "the server is in read-only mode")
            assert ro.log[-1].endswith("[token, read only]")
    finally:
        assert ro.stop() == 0


@pytest.mark.parametrize("make", [
    pytest.param(lambda: jwt.encode({"sub": "w1", "role": "worker", "queue": "mail"}, None, algorithm="none"),
                 id="alg-none"),
    pytest.param(lambda: jwt.encode({"sub": "w1", "role": "worker", "queue": "mail", "exp": int(time.time()) + 60},
                                    "another key of more than 32 bytes!!", algorithm="HS256"), id="wrong-key"),
    pytest.param(lambda: jwt.encode({"sub": "w1", "exp": int(time.time()) + 60}, SECRET, algorithm="HS384"),
                 id="hs384"),
    pytest.param(lambda: _tampered(), id="tampered"),
    pytest.param(lambda: "eyJhbGciOiJIUzI1NiJ9.bm90IGpzb24.c2ln", id="forged-not-json"),
])
def test_forged_tokens_are_refused(c: httpx.Client, make: Any) -> None:
    enqueue(c, "mail")
    r = q(c, bearer(make()), claim(1), "w1")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert r.json()["error"] in ("only HS256 and RS256 tokens are accepted", "the token's signature does not match",
                                 "not a JSON Web Token")
    assert [j["owner"] for j in all_jobs(c)] == [None]


def _tampered() -> str:
    import base64
    import json

    head, _, sig = mint({"sub": "w1", "role": "worker", "queue": "image"}).split(".")
    claims = {"sub": "w1", "role": "worker", "queue": "mail", "exp": int(time.time()) + 3600}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{payload}.{sig}"


# -- /_whoami, listings, idempotency, tokens at the edges ---------------------------------------------

def test_whoami_and_scoped_listings(c: httpx.Client) -> None:
    me = ok(c.get("/_whoami", headers=worker("w1")))
    assert me["sub"] == "w1" and me["append_only"] == ["journal"]
    jobs_rules = [r for r in me["rules"] if r["collection"] == "jobs"]
    assert {"collection": "jobs", "grants": ["read"], "fields": None,
            "rows": "queue = $jwt.queue and owner = $jwt.sub"} in jobs_rules
    assert not any("insert" in r["grants"] for r in jobs_rules)  # the producer's rule is not a worker's
    assert ok(c.get("/_whoami", headers=SERVER_AUTH)) == {"sub": None, "full": True, "rules": []}
    # listed: what it may read; not the insert-only `events`, not `secrets`
    names = ok(c.get("/", headers=worker("w1")))["collections"]
    assert set(names) == {"jobs", "notes", "journal", "profiles", "sessions"}
    assert {col["name"] for col in ok(c.get("/collections", headers=worker("w1")))} == set(names)
    assert "secrets" in ok(c.get("/", headers=SERVER_AUTH))["collections"]
    producer = bearer(mint({"sub": "p1", "role": "producer", "queue": "mail"}))
    assert "jobs" not in ok(c.get("/", headers=producer))["collections"]  # inserts, cannot read


def test_whoami_on_an_open_server() -> None:
    s = Server()
    try:
        with s.client() as c:
            assert ok(c.get("/_whoami")) == {"sub": None, "full": True, "rules": []}
            assert c.head("/_whoami").status_code == 200
    finally:
        assert s.stop() == 0


def test_idempotency_keys_belong_to_the_tokens_sub(c: httpx.Client) -> None:
    enqueue(c, "mail", "mail")
    w1, w2 = worker("w1"), worker("w2")
    first = q(c, w1, claim(1), "w1", **{"Idempotency-Key": "claim-1"})
    assert len(ok(first)) == 1
    again = q(c, w1, claim(1), "w1", **{"Idempotency-Key": "claim-1"})
    assert ok(again) == first.json() and again.headers["idempotent-replayed"] == "true"
    # the same key under another subject is another key: no 422, a claim of its own
    other = q(c, w2, claim(1), "w2", **{"Idempotency-Key": "claim-1"})
    assert ok(other)[0]["owner"] == "w2" and "idempotent-replayed" not in other.headers
    # nor is it the server token's key
    root = q(c, SERVER_AUTH, "get jobs count", **{"Idempotency-Key": "claim-1"})
    assert root.status_code == 200
    nosub = bearer(mint({"role": "worker", "queue": "mail"}))
    r = q(c, nosub, claim(1), "x", **{"Idempotency-Key": "k"})
    assert r.status_code == 400
    assert r.json() == {"error": "an Idempotency-Key needs a token with a subject (`sub`)"}


def test_an_idempotency_key_belongs_to_the_tokens_whole_scope(c: httpx.Client) -> None:
    """Issue 40, item 3: keys were namespaced by `sub` alone, so a token of another scope with the
    same `sub` (here another `queue`) was replayed a job of a queue its rules hide from it."""
    ok(q(c, SERVER_AUTH, "put jobs {queue: 'billing', payload: {card: '4111 1111 1111 1111'}, run_at: now(), "
                         "attempts: 0}"))
    billing = worker("alice", "billing")
    first = q(c, billing, claim(1), "alice", **{"Idempotency-Key": "k-1"})
    assert [j["queue"] for j in ok(first)] == ["billing"]
    mail = worker("alice", "mail")
    other = q(c, mail, claim(1), "alice", **{"Idempotency-Key": "k-1"})
    assert ok(other) == [] and "idempotent-replayed" not in other.headers  # its own run: no mail job
    assert ok(q(c, mail, "get jobs")) == []
    assert "4111" not in other.text
    # another role with the same sub and queue: not the same scope either
    producer = bearer(mint({"sub": "alice", "role": "producer", "queue": "billing"}))
    r = q(c, producer, claim(1), "alice", **{"Idempotency-Key": "k-1"})
    assert "idempotent-replayed" not in r.headers and "4111" not in r.text
    # the same scope, refreshed (new exp, iat, nbf, jti): still the first answer
    refreshed = worker("alice", "billing", iat=int(time.time()), nbf=int(time.time()) - 5, jti="r-2")
    again = q(c, refreshed, claim(1), "alice", **{"Idempotency-Key": "k-1"})
    assert ok(again) == first.json() and again.headers["idempotent-replayed"] == "true"


def test_a_time_claim_of_any_size_is_a_401(c: httpx.Client) -> None:
    """Issue 40, item 8: a validly signed token with `exp` or `nbf` of 10^400 was answered 500."""
    for claims in ({"sub": "w1", "exp": 10 ** 400}, {"sub": "w1", "exp": int(time.time()) + 60, "nbf": 10 ** 400}):
        r = q(c, bearer(mint_claims(claims, SECRET.encode())), "get jobs")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", r.text
        assert "is not a number of seconds" in r.json()["error"]


def test_list_claims_over_1000_values_are_refused(c: httpx.Client) -> None:
    r = q(c, worker("w1", queue=["mail"] * 1001), "get jobs")
    assert r.status_code == 401 and "1 000 values" in r.json()["error"]


def test_mint_token_and_exp_flags(files: Path) -> None:
    secret = str(files / "jwt.secret")
    done = subprocess.run([*command(), "--jwt-secret-file", secret, "--mint-token",
                           '{"sub":"w-7","role":"worker","queue":"mail"}'], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    minted = done.stdout.strip()
    claims = jwt.decode(minted, SECRET, algorithms=["HS256"])
    assert claims["sub"] == "w-7" and 3590 < claims["exp"] - time.time() <= 3600
    no_secret = subprocess.run([*command(), "--mint-token", "{}"], capture_output=True, text=True, timeout=20)
    assert no_secret.returncode == 2 and "secret" in no_secret.stderr
    for flags, fragment in ((["--jwt-secret-file", secret], "--policy"),
                            (["--policy", str(files / "jobs.policy")], "--policy"),
                            (["--jwt-secret", "short", "--policy", str(files / "jobs.policy")], "32")):
        r = subprocess.run([*command(), *flags], capture_output=True, text=True, timeout=20)
        assert r.returncode == 2 and fragment in r.stderr, (flags, r.stderr)
    # --jwt-require-exp off lets a token without exp in; --jwt-max-age bounds how far ahead exp is
    s = start(files, "--auth-delay", "0", "--jwt-require-exp", "off", "--jwt-max-age", "600")
    try:
        with s.client() as c:
            forever = bearer(jwt.encode({"sub": "w1", "role": "worker", "queue": "mail"}, SECRET, algorithm="HS256"))
            assert q(c, forever, "get notes").status_code == 404  # a valid token: the collection is not there
            assert q(c, bearer(minted), "get notes").status_code == 401  # exp an hour ahead: past the bound
            assert q(c, bearer(mint({"sub": "w1"}, ttl=300)), "get notes").status_code == 404
    finally:
        assert s.stop() == 0


def test_server_token_from_the_environment_and_an_open_bind() -> None:
    s = Server(env={"FENEC_HTTP_TOKEN": "from-env"})
    try:
        with s.client() as c:
            assert c.post("/query", json={"query": "create collection t (n int)"}).status_code == 401
            assert c.post("/query", json={"query": "create collection t (n int)"},
                          headers=bearer("from-env")).status_code == 200
    finally:
        assert s.stop() == 0
    # an admin token alone leaves the server open: a non-loopback bind is refused without --insecure
    r = subprocess.run([*command(), "--admin-token", "a", "--http", "0.0.0.0:0"], capture_output=True, text=True,
                       timeout=20, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 1 and "--http-token" in r.stderr


# -- the auth delay (access.md §2.3) -----------------------------------------------------------------

def test_auth_delay_grows_per_address_and_a_good_token_clears_it(files: Path) -> None:
    s = start(files, "--auth-delay", "150")
    try:
        with s.client() as c:
            took = []
            for _ in range(3):
                t0 = time.monotonic()
                assert c.post("/query", json={"query": "get x"}, headers=bearer("nope")).status_code == 401
                took.append(time.monotonic() - t0)
            assert took[0] >= 0.15 and took[1] >= 0.3 and took[2] >= 0.6, took
            # another address (127.0.0.2 is loopback too) is not slowed by these
            other = httpx.Client(base_url=s.url, transport=httpx.HTTPTransport(local_address="127.0.0.2"))
            with other:
                t0 = time.monotonic()
                assert other.get("/", headers=bearer("nope")).status_code == 401
                assert time.monotonic() - t0 < took[2]
            # a good token is never delayed, and clears the address's count
            t0 = time.monotonic()
            assert c.get("/_whoami", headers=SERVER_AUTH).status_code == 200
            assert time.monotonic() - t0 < 0.5  # the fourth refusal's delay would be 1.2 s
            t0 = time.monotonic()
            assert c.get("/", headers=bearer("nope")).status_code == 401
            again = time.monotonic() - t0
            assert 0.15 <= again < took[2], (again, took)
    finally:
        assert s.stop() == 0


# -- held claims under a token (http.md §8.9) ------------------------------------------------------

def test_a_held_claim_waits_for_its_own_queue_only(server: Server, c: httpx.Client) -> None:
    w1 = worker("w1")
    answer: dict[str, Any] = {}

    def held() -> None:
        with server.client() as hc:
            answer["r"] = q(hc, w1, claim(1), "w1", **{"Fenec-Wait": "8000"})

    t = threading.Thread(target=held)
    t.start()
    time.sleep(0.5)
    enqueue(c, "image")
    time.sleep(0.5)
    assert t.is_alive()  # not woken by a job it could not take
    (mail,) = enqueue(c, "mail")
    t.join(8)
    assert answer["r"].status_code == 200
    assert answer["r"].json() == [{"id": mail, "queue": "mail", "owner": "w1", "attempts": 1}]


def test_a_held_claim_whose_token_expires_with_no_run_is_answered_its_last_run_at_the_deadline(
        server: Server, c: httpx.Client) -> None:
    """access.md §2.2: the token is checked again at each run; the deadline is no run, so it is
    answered what the last run answered (`[]`), as the server README says; the token's next
    request is the 401."""
    exp = int(time.time()) + 3  # good for 2 to 3 s: long enough to be held, well before the deadline
    short = bearer(mint_claims({"sub": "w8", "role": "worker", "queue": "nowhere", "exp": exp}, SECRET.encode()))
    t0 = time.monotonic()
    r = q(c, short, claim(1), "w8", **{"Fenec-Wait": "6000"})
    assert time.time() >= exp  # the token expired while the claim was held
    assert r.status_code == 200 and r.json() == [] and time.monotonic() - t0 >= 5.5
    again = q(c, short, claim(1), "w8")
    assert again.status_code == 401 and again.json() == {"error": "the token has expired"}


def test_a_held_claim_whose_token_expires_is_answered_401_at_its_next_run(server: Server, c: httpx.Client) -> None:
    exp = int(time.time()) + 2
    short = bearer(mint_claims({"sub": "w9", "role": "worker", "queue": "mail", "exp": exp}, SECRET.encode()))
    answer: dict[str, Any] = {}

    def held() -> None:
        with server.client() as hc:
            t0 = time.monotonic()
            answer["r"] = q(hc, short, claim(1), "w9", **{"Fenec-Wait": "15000"})
            answer["took"] = time.monotonic() - t0

    t = threading.Thread(target=held)
    t.start()
    while time.time() < exp + 0.3:
        time.sleep(0.1)
    assert t.is_alive()  # held: nothing ran since
    (job,) = enqueue(c, "mail")
    t.join(10)
    r = answer["r"]
    assert r.status_code == 401 and r.json() == {"error": "the token has expired"}
    assert r.headers["www-authenticate"] == "Bearer"
    assert answer["took"] < 10
    # it took nothing: the job is still there for a worker whose token is good
    assert [j["owner"] for j in all_jobs(c)] == [None]
    assert ok(q(c, worker("w1"), claim(1), "w1"))[0]["id"] == job
