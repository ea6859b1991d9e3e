"""JSON Web Tokens of scoped callers (access.md §2): verification, the verified-token cache, minting.

A bearer value with exactly two dots is verified in this order, the first failure answering
its 401 message:

1. three base64url parts, the first two JSON objects (exact JSON: a duplicated member, `NaN`
   or a number that does not fit a float makes it invalid)      → `not a JSON Web Token`
2. header `alg` is `HS256` or `RS256` (`none` included: refused)  → `only HS256 and RS256 ...`
3. the signature, by PyJWT with the algorithm pinned to HS256: the key's kind decides the
   algorithm, so an RS256 token never verifies against a secret  → `the token's signature ...`
4. a list claim the policy reads holding more than 1 000 values
5. time, on every use (the cache keeps 1-4 only): `exp` (required unless
   `--jwt-require-exp off`), `--jwt-max-age`, `nbf`; an `exp` or `nbf` that is not a number, or an
   integer past what a float holds (10^400), is `the token's exp is not a number of seconds`.

The claims are taken from our own exact parse of the payload (large integers keep their
value), never from a second, laxer one.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import jwt
from jwt.api_jws import PyJWS

ALGORITHMS = ("HS256", "RS256")
MIN_SECRET_BYTES = 32
MAX_LIST_VALUES = 1000
CACHE_SIZE = 4096
MINT_LIFETIME_S = 3600

NOT_JWT = "not a JSON Web Token"
BAD_ALG = "only HS256 and RS256 tokens are accepted"
BAD_SIGNATURE = "the token's signature does not match"
EXPIRED = "the token has expired"
NO_EXP = "the token has no exp: one without would be good for ever"
NOT_YET = "the token is not valid yet"
_B64URL = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


class TokenError(Exception):
    """A token refused; `message` is the 401 body's `error`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def too_far(max_age_s: int) -> str:
    return f"the token's exp is more than {max_age_s} s ahead (--jwt-max-age)"


def not_seconds(name: str) -> str:
    return f"the token's {name} is not a number of seconds"


def too_many(name: str, count: int) -> str:
    return f"the token's `{name}` holds {count} values; a list claim holds at most 1 000 values"


# -- exact JSON --

def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicated member {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} does not fit a number")
    return value


def exact_json(data: bytes | str) -> Any:
    """Strict JSON: a duplicated member, NaN/Infinity or an overflowing number raise ValueError."""
    return json.loads(data, object_pairs_hook=_no_duplicates, parse_constant=_no_constant,
                      parse_float=_finite)


def _b64url(part: str) -> bytes:
    raw = part.encode("ascii", "replace")
    if not raw or not _B64URL.issuperset(raw) or len(raw) % 4 == 1:
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4))
    except (binascii.Error, ValueError) as e:
        raise ValueError("not base64url") from e


def _object(part: str) -> dict[str, Any]:
    try:
        value = exact_json(_b64url(part))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise TokenError(NOT_JWT) from None
    if not isinstance(value, dict):
        raise TokenError(NOT_JWT)
    return value


def _seconds(claims: dict[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None and name not in claims:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenError(not_seconds(name))
    try:
        return float(value)
    except OverflowError:  # an integer past a float (10^400): no moment, as a float past it is no number
        raise TokenError(not_seconds(name)) from None


class Verified:
    """A token whose form, algorithm, signature and lists passed; its time is checked per use.
    `extra` is the caller's to fill (auth.py keeps the token's scope there, cached with it)."""

    __slots__ = ("claims", "exp", "nbf", "extra")

    def __init__(self, claims: dict[str, Any], exp: float | None, nbf: float | None) -> None:
        self.claims = claims
        self.exp = exp
        self.nbf = nbf
        self.extra: Any = None


class Verifier:
    """HS256 verification against one secret, with a bounded cache of verified tokens."""

    def __init__(self, secret: bytes, *, require_exp: bool = True, max_age_s: int = 0,
                 list_claims: Iterable[tuple[str, ...]] | None = None, cache_size: int = CACHE_SIZE,
                 clock: Callable[[], float] = time.time) -> None:
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"a JWT secret is at least {MIN_SECRET_BYTES} bytes; this one is {len(secret)}")
        self.secret = secret
        self.require_exp = require_exp
        self.max_age_s = max_age_s
        # the claims (as key paths: `$jwt.org.teams` is ("org", "teams")) the policy reads; None:
        # every top-level list claim is held to the 1 000 values
        self.list_claims = None if list_claims is None else frozenset(list_claims)
        self.cache_size = cache_size
        self.clock = clock
        self._cache: dict[str, Verified] = {}
        self._jws = PyJWS()
        # PyJWT refuses some secrets as HMAC keys (one that looks like a PEM key): find out now,
        # at start-up, rather than at the first request
        self._jws.decode_complete(mint_claims({"sub": "probe"}, secret, now=0), secret, algorithms=["HS256"])

    def verify(self, token: str) -> Verified:
        """The verified token, or TokenError with its 401 message."""
        verified = self._cache.get(token)
        if verified is None:
            verified = self._verify(token)
            cache = self._cache
            if len(cache) >= self.cache_size:
                # first in, first out: cheaper than an LRU on every hit, and a bound all the same
                del cache[next(iter(cache))]
            cache[token] = verified
        self.check_time(verified)
        return verified

    def check_time(self, verified: Verified) -> None:
        """exp, max-age and nbf against now: on every use, cached or not, and before each run of
        a held claim."""
        now = self.clock()
        exp = verified.exp
        if exp is None:
            if self.require_exp:
                raise TokenError(NO_EXP)
        else:
            if now >= exp:
                raise TokenError(EXPIRED)
            if self.max_age_s and exp > now + self.max_age_s:
                raise TokenError(too_far(self.max_age_s))
        if verified.nbf is not None and now < verified.nbf:
            raise TokenError(NOT_YET)

    def _verify(self, token: str) -> Verified:
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenError(NOT_JWT)
        header = _object(parts[0])
        claims = _object(parts[1])
        alg = header.get("alg")
        if alg not in ALGORITHMS:  # before the signature: `alg: none` comes with none
            raise TokenError(BAD_ALG)
        if not parts[2]:
            raise TokenError(BAD_SIGNATURE)
        if header.get("b64", True) is not True:  # RFC 7797 unencoded payloads: not ours
            raise TokenError(NOT_JWT)
        if alg != "HS256":
            # RS256 keys come with --jwt-keys (next tier); a secret never verifies RS256
            raise TokenError(BAD_SIGNATURE)
        try:
            self._jws.decode_complete(token, self.secret, algorithms=["HS256"])
        except jwt.InvalidSignatureError:
            raise TokenError(BAD_SIGNATURE) from None
        except jwt.PyJWTError:
            raise TokenError(NOT_JWT) from None
        paths = self.list_claims if self.list_claims is not None else [(k,) for k in claims]
        for path in paths:
            value: Any = claims
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if isinstance(value, list) and len(value) > MAX_LIST_VALUES:
                raise TokenError(too_many(".".join(path), len(value)))
        return Verified(claims, _seconds(claims, "exp"), _seconds(claims, "nbf"))

    def clear(self) -> None:
        """Forget every verified token (whenever the keys change)."""
        self._cache.clear()


# -- minting (access.md §2.4) --

def mint(claims_text: str, secret: bytes, *, now: float | None = None) -> str:
    """`--mint-token`: the claims (a JSON object) signed HS256; `exp` = now + 3 600 when absent.
    Raises ValueError with the reason for claims that are not a JSON object."""
    try:
        claims = exact_json(claims_text)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"--mint-token expects a JSON object of claims: {e}") from None
    if not isinstance(claims, dict):
        raise ValueError("--mint-token expects a JSON object of claims")
    return mint_claims(claims, secret, now=now)


def mint_claims(claims: dict[str, Any], secret: bytes, *, now: float | None = None) -> str:
    claims = dict(claims)
    if "exp" not in claims:
        claims["exp"] = int(time.time() if now is None else now) + MINT_LIFETIME_S
    return jwt.encode(claims, secret, algorithm="HS256")
