"""Tokens and callers in process (http/tokens.py, http/auth.py): every 401 reason of access.md
§2.2 with its message, the verified-token cache, the auth delay's arithmetic, the resolution
order of §1, the Idempotency-Key namespace, and the start-up refusals of §2.1. The same
behaviour over HTTP against a real server is in test_http_access.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import jwt
import pytest
from fenecdb_server.http import tokens as T
from fenecdb_server.http.auth import (
    NO_TOKEN,
    OPEN,
    SERVER,
    Auth,
    AuthDelay,
    AuthRefused,
    SetupError,
    configure,
    mint_token,
)
from fenecdb_server.http.idempotency import namespace_of, namespaced

SECRET = b"an HS256 secret of at least 32 bytes, for tests"
NOW = 1_800_000_000.0


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(header: bytes, payload: bytes, secret: bytes = SECRET) -> str:
    """A token built by hand, so that its parts can be anything (duplicated members, ...)."""
    head = b64(header) + "." + b64(payload)
    sig = hmac.new(secret, head.encode(), hashlib.sha256).digest()
    return head + "." + b64(sig)


def token(claims: dict[str, Any], secret: bytes = SECRET, alg: str = "HS256") -> str:
    return jwt.encode(claims, secret, algorithm=alg)


def refused(v: T.Verifier, text: str) -> str:
    with pytest.raises(T.TokenError) as e:
        v.verify(text)
    return e.value.message


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def v(clock: Clock) -> T.Verifier:
    return T.Verifier(SECRET, clock=clock)


HS = b'{"alg":"HS256","typ":"JWT"}'


def test_a_good_token_gives_its_claims_exactly(v: T.Verifier) -> None:
    text = signed(HS, b'{"sub":"w1","role":"worker","big":123456789012345678901234567890,"exp":1800000060}')
    claims = v.verify(text).claims
    assert claims == {"sub": "w1", "role": "worker", "big": 123456789012345678901234567890, "exp": 1800000060}
    assert isinstance(claims["big"], int)


@pytest.mark.parametrize("text", [
    "abc", "a.b", "a.b.c.d", "..", "x.y.z",
    signed(b"[]", b'{"exp":1800000060}'),                      # header not an object
    signed(HS, b'["exp"]'),                                    # payload not an object
    signed(HS, b'{"exp":1800000060,"sub":"a","sub":"b"}'),     # a duplicated member
    signed(HS, b'{"exp":1800000060,"n":NaN}'),                 # not JSON
    signed(HS, b'{"exp":1e400}'),                              # does not fit a number
    signed(HS, b'{"exp":1800000060'),                          # cut short
    b64(HS) + ".e30*." + b64(b"sig"),                          # not base64url
])
def test_not_a_json_web_token(v: T.Verifier, text: str) -> None:
    assert refused(v, text) == "not a JSON Web Token"


@pytest.mark.parametrize("header", [b'{"alg":"none"}', b'{"alg":"HS512"}', b'{"typ":"JWT"}', b'{"alg":"hs256"}',
                                    b'{"alg":["HS256"]}'])
def test_only_hs256_and_rs256(v: T.Verifier, header: bytes) -> None:
    assert refused(v, signed(header, b'{"exp":1800000060}')) == "only HS256 and RS256 tokens are accepted"
    # `alg: none` comes with an empty signature: still the algorithm's refusal
    assert refused(v, b64(header) + "." + b64(b'{"exp":1800000060}') + ".") == \
        "only HS256 and RS256 tokens are accepted"


def test_signatures(v: T.Verifier) -> None:
    good = token({"sub": "w1", "exp": 1800000060})
    head, payload, sig = good.split(".")
    mismatch = "the token's signature does not match"
    assert refused(v, token({"sub": "w1", "exp": 1800000060}, b"another secret of more than 32 bytes!!")) == mismatch
    # tampered: another payload under the first one's signature
    assert refused(v, head + "." + b64(b'{"sub":"w2","exp":1800000060}') + "." + sig) == mismatch
    assert refused(v, head + "." + payload + "." + sig[:-4] + "AAAA") == mismatch
    assert refused(v, head + "." + payload + ".") == mismatch
    # RS256 verifies only against RSA keys (next tier): with a secret it never does
    rs = signed(b'{"alg":"RS256"}', b'{"exp":1800000060}')
    assert refused(v, rs) == mismatch
    assert v.verify(good).claims["sub"] == "w1"


def test_time_rules(clock: Clock) -> None:
    v = T.Verifier(SECRET, clock=clock)
    assert refused(v, token({"exp": NOW})) == "the token has expired"  # now >= exp
    assert refused(v, token({"exp": NOW - 1})) == "the token has expired"
    assert v.verify(token({"exp": NOW + 1})).exp == NOW + 1
    assert refused(v, token({"sub": "x"})) == "the token has no exp: one without would be good for ever"
    assert refused(v, token({"exp": NOW + 60, "nbf": NOW + 1})) == "the token is not valid yet"
    assert v.verify(token({"exp": NOW + 60, "nbf": NOW})).nbf == NOW
    assert refused(v, signed(HS, b'{"exp":"soon"}')) == "the token's exp is not a number of seconds"
    assert refused(v, signed(HS, b'{"exp":true}')) == "the token's exp is not a number of seconds"
    assert v.verify(signed(HS, b'{"exp":1800000000.5}')).exp == NOW + 0.5
    # an integer of any size (issue 40, item 8: 10^400 raised OverflowError, a 500)
    huge = b"1" + b"0" * 400
    assert refused(v, signed(HS, b'{"exp":' + huge + b'}')) == "the token's exp is not a number of seconds"
    assert refused(v, signed(HS, b'{"exp":-' + huge + b'}')) == "the token's exp is not a number of seconds"
    assert refused(v, signed(HS, b'{"exp":1800000060,"nbf":' + huge + b'}')) == \
        "the token's nbf is not a number of seconds"
    assert refused(v, signed(HS, b'{"exp":1' + b"0" * 5000 + b'}')) == "not a JSON Web Token"  # past int()'s digits
    lax = T.Verifier(SECRET, require_exp=False, clock=clock)
    assert lax.verify(token({"sub": "forever"})).claims == {"sub": "forever"}
    bounded = T.Verifier(SECRET, max_age_s=60, clock=clock)
    assert bounded.verify(token({"exp": NOW + 60})).exp == NOW + 60
    assert "--jwt-max-age" in refused(bounded, token({"exp": NOW + 61}))


def test_list_claims_over_1000_values(clock: Clock) -> None:
    rooms = token({"exp": NOW + 60, "rooms": list(range(1001)), "other": list(range(5000))})
    read = T.Verifier(SECRET, list_claims=[("rooms",)], clock=clock)
    message = refused(read, rooms)
    assert "1 000 values" in message and "`rooms`" in message
    # a list no rule reads is not the policy's business
    assert T.Verifier(SECRET, list_claims=[("team",)], clock=clock).verify(rooms).claims["rooms"][1000] == 1000
    assert read.verify(token({"exp": NOW + 60, "rooms": list(range(1000))})).claims["rooms"][-1] == 999
    nested = token({"exp": NOW + 60, "org": {"teams": ["t"] * 1001}})
    assert "1 000 values" in refused(T.Verifier(SECRET, list_claims=[("org", "teams")], clock=clock), nested)
    # not told which claims the rules read: every list claim is held to it
    assert "1 000 values" in refused(T.Verifier(SECRET, clock=clock), rooms)


def test_the_cache_is_bounded_and_time_is_checked_on_every_use(clock: Clock) -> None:
    v = T.Verifier(SECRET, cache_size=3, clock=clock)
    texts = [token({"sub": f"w{i}", "exp": NOW + 10}) for i in range(5)]
    first = v.verify(texts[0])
    assert v.verify(texts[0]) is first  # cached: verified once
    for text in texts:
        v.verify(text)
    assert len(v._cache) == 3
    clock.t = NOW + 10
    assert refused(v, texts[4]) == "the token has expired"  # cached, and expired all the same
    v.clear()
    assert not v._cache


def test_a_short_secret_and_a_pem_like_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        T.Verifier(b"x" * 31)
    T.Verifier(b"x" * 32)


def test_mint(clock: Clock) -> None:
    text = T.mint('{"sub":"w-7","role":"worker","queue":"mail"}', SECRET, now=NOW)
    claims = T.Verifier(SECRET, clock=clock).verify(text).claims
    assert claims == {"sub": "w-7", "role": "worker", "queue": "mail", "exp": int(NOW) + 3600}
    assert json.loads(base64.urlsafe_b64decode(text.split(".")[0] + "=="))["alg"] == "HS256"
    kept = T.mint('{"sub":"a","exp":1800000005}', SECRET, now=NOW)
    assert T.Verifier(SECRET, clock=clock).verify(kept).exp == 1800000005
    for bad in ("[1]", "nope", '{"a":1,"a":2}'):
        with pytest.raises(ValueError, match="--mint-token"):
            T.mint(bad, SECRET)


# -- the auth delay (access.md §2.3) --

def test_auth_delay_doubles_per_address_caps_and_clears() -> None:
    clock = Clock(0.0)
    d = AuthDelay(100, clock=clock)
    assert [d.refused("a") for _ in range(4)] == [0.1, 0.2, 0.4, 0.8]
    assert d.refused("b") == 0.1  # per address
    for _ in range(10):
        last = d.refused("a")
    assert last == 5.0
    d.cleared("a")
    assert d.refused("a") == 0.1
    clock.t = 61.0  # more than a minute after the last refusal: counted afresh
    assert d.refused("b") == 0.1
    assert AuthDelay(0, clock=clock).refused("a") == 0.0
    assert AuthDelay(3000, clock=clock).refused("a") == 3.0
    assert [AuthDelay(3000, clock=clock).refused("a") for _ in range(1)] == [3.0]


def test_auth_delay_keeps_a_bounded_table() -> None:
    clock = Clock(0.0)
    d = AuthDelay(100, clock=clock)
    d.MAX_ADDRESSES = 8
    for i in range(50):
        clock.t = i * 0.001
        d.refused(f"10.0.0.{i}")
    assert len(d.refusals) <= 8


# -- resolution (access.md §1) --

@pytest.fixture
def policy(tmp_path: Path) -> Any:
    from fenecdb_server.policy import Policy

    path = tmp_path / "p.policy"
    path.write_text("jobs read where queue = $jwt.queue\n")
    return Policy.load(path)


def test_resolution_order(policy: Any, clock: Clock) -> None:
    v = T.Verifier(SECRET, clock=clock)
    auth = Auth(server_token="root-token", admin_token="admin-token", verifier=v, policy=policy)
    assert not auth.open and not auth.metrics_open
    assert auth.data(b"Bearer root-token") is SERVER
    assert auth.data(b"bearer  root-token ") is SERVER
    for header in (None, b"", b"Bearer", b"Basic root-token", b"Bearer root-tokenx", b"Bearer admin-token",
                   b"root-token", b"Bearer a.b"):
        with pytest.raises(AuthRefused) as e:
            auth.data(header)
        assert e.value.message == NO_TOKEN, header
    good = token({"sub": "w1", "queue": "mail", "exp": NOW + 60})
    caller = auth.data(b"Bearer " + good.encode())
    assert caller.kind == "scoped" and caller.sub == "w1" and caller.scope.visible("jobs")
    assert auth.data(b"Bearer " + good.encode()) is caller  # the scope is cached with the token
    with pytest.raises(AuthRefused) as e:
        auth.data(b"Bearer a.b.c")
    assert e.value.message == "not a JSON Web Token"
    # /_metrics: the server or the admin token; never a JWT
    assert auth.metrics(b"Bearer admin-token").kind == "admin"
    assert auth.metrics(b"Bearer root-token") is SERVER
    for header in (b"Bearer " + good.encode(), None, b"Bearer nope"):
        with pytest.raises(AuthRefused):
            auth.metrics(header)
    # a held claim asks its token again before each run
    assert auth.recheck(caller) is None
    clock.t = NOW + 60
    assert auth.recheck(caller) == "the token has expired"
    assert auth.recheck(SERVER) is None


def test_open_and_admin_alone() -> None:
    anyone = Auth()
    assert anyone.open and anyone.metrics_open
    assert anyone.data(None) is OPEN and anyone.metrics(b"Bearer whatever") is OPEN
    assert OPEN.whoami() == {"sub": None, "full": True, "rules": []}
    admin = Auth(admin_token="adm")
    assert admin.open and not admin.metrics_open  # data stays open; only /_metrics closes
    assert admin.data(None) is OPEN
    assert admin.metrics(b"Bearer adm").kind == "admin"
    with pytest.raises(AuthRefused):
        admin.metrics(None)


def test_idempotency_namespaces() -> None:
    assert namespace_of(None) is None and namespace_of({"role": "worker"}) is None  # no `sub`
    a = namespaced(b"k", namespace_of({"sub": "a:b"}))
    b = namespaced(b"b:k", namespace_of({"sub": "a"}))
    assert a != b
    assert namespaced(b"k", namespace_of({"sub": "*"})) != namespaced(b"k")
    assert namespaced(b"k", namespace_of({"sub": 7})) != namespaced(b"k", namespace_of({"sub": "7"}))
    # the whole scope: any claim a rule may read sets the namespace apart ...
    alice = {"sub": "alice", "role": "worker", "queue": "mail"}
    ns = namespace_of(alice)
    assert ns is not None and ns.startswith("$")
    for other in ({"queue": "billing"}, {"role": "ops"}, {"role": ["worker"]}, {"tenant": 1}, {"sub": "bob"}):
        assert namespace_of({**alice, **other}) != ns, other
    # ... but the claims a refresh renews do not; nor does their order
    assert namespace_of({**alice, "exp": 1, "iat": 2, "nbf": 3, "jti": "x"}) == ns
    assert namespace_of(dict(reversed(list(alice.items())))) == ns
    assert namespace_of({"sub": "\ud800"}) != namespace_of({"sub": "\udc00"})  # a lone surrogate too


# -- the flags (access.md §2.1, server.md §1.4) --

def opts_for(tmp_path: Path, **kw: str) -> dict[str, str]:
    return {k.replace("_", "-"): v for k, v in kw.items()}


def test_start_up_refusals(tmp_path: Path) -> None:
    pol = tmp_path / "jobs.policy"
    pol.write_text("jobs read where queue = $jwt.queue\n")
    secret = tmp_path / "jwt.secret"
    secret.write_bytes(SECRET + b"\r\n")
    short = tmp_path / "short.secret"
    short.write_bytes(b"x" * 31 + b"\n")
    bad = tmp_path / "bad.policy"
    bad.write_text("# rules\njobs read\njobs frob where x = 1\n")
    cases = [
        ({"jwt-secret-file": str(secret)}, "without --policy"),
        ({"policy": str(pol)}, "--policy without JWT keys"),
        ({"jwt-secret": "x" * 31, "policy": str(pol)}, "at least 32"),
        ({"jwt-secret-file": str(short), "policy": str(pol)}, "at least 32"),
        ({"jwt-secret-file": str(tmp_path / "missing"), "policy": str(pol)}, "cannot read"),
        ({"jwt-secret-file": str(secret), "jwt-secret": "y" * 40, "policy": str(pol)}, "both"),
        ({"jwt-secret-file": str(secret), "policy": str(bad)}, "policy line 3"),
        ({"jwt-secret-file": str(secret), "policy": str(tmp_path / "none.policy")}, "none.policy"),
        ({"jwt-secret-file": str(secret), "policy": str(pol), "jwt-require-exp": "maybe"}, "on or off"),
        ({"jwt-secret-file": str(secret), "policy": str(pol), "jwt-max-age": "-1"}, "--jwt-max-age"),
        ({"auth-delay": "soon"}, "--auth-delay"),
    ]
    for opts, fragment in cases:
        with pytest.raises(SetupError) as e:
            configure(opts, {})
        assert fragment in e.value.message, (opts, e.value.message)
    with pytest.raises(SetupError, match="needs a secret"):
        mint_token({"mint-token": "{}"}, {})
    # the secret file's trailing CR/LF is trimmed; the environment is read when no flag is given
    access = configure({"jwt-secret-file": str(secret), "policy": str(pol)}, {})
    assert access.auth.verifier is not None and access.auth.verifier.secret == SECRET
    assert not access.open and access.delay_ms == 100
    env = configure({"policy": str(pol)}, {"FENEC_JWT_SECRET": SECRET.decode(), "FENEC_HTTP_TOKEN": "t"})
    assert env.auth.verifier is not None and env.server_token_text == "t"
    assert configure({}, {"FENEC_HTTP_TOKEN": ""}).open  # an empty value counts as unset
    assert configure({"admin-token": "a"}, {}).open
    minted = mint_token({"mint-token": '{"sub":"w1"}', "jwt-secret-file": str(secret)}, {})
    assert access.auth.verifier.verify(minted).claims["sub"] == "w1"
