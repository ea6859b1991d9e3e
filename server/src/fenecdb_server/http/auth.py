"""Who is calling (access.md §1, §2.3): a bearer value resolved to a caller, and the auth delay.

Callers: the server token (everything), an open server's anonymous caller (treated as the
server token), the admin token (only `/_metrics`), and a scoped JWT (its policy scope).

Resolution of `Authorization: Bearer <v>` on a data route (§1):
  no server token and no JWT configured        → open (an admin token alone leaves data open)
  v equal to the server token (constant time)  → server
  JWTs configured and v has exactly two dots   → verified as a JWT (a failure is a 401 naming it)
  anything else, or no `Bearer` value          → 401 `invalid or missing token`
On `/_metrics` the server and admin tokens are compared, a JWT is never accepted (proposed:
401), and the route is open only when no token of any kind is configured.

Every 401 is answered after the auth delay of its address: `--auth-delay` for the first refusal
within a minute, doubled for each further one, at most 5 s; a good token clears the count.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping
from typing import Any

import jwt

from ..flags import DEFAULTS, BadFlag, given, whole
from .tokens import MIN_SECRET_BYTES, TokenError, Verified, Verifier, mint

NO_TOKEN = "invalid or missing token"
AUTH_DELAY_MS = int(DEFAULTS["--auth-delay"])  # the first refusal's delay when the command line names none
FULL_ACCESS: dict[str, Any] = {"sub": None, "full": True, "rules": []}


class AuthRefused(Exception):
    """A 401; `message` is the body's `error`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Caller:
    """The caller of one request. `scope` is the policy scope of a JWT, None for full access."""

    __slots__ = ("kind", "scope", "verified")

    def __init__(self, kind: str, scope: Any = None, verified: Verified | None = None) -> None:
        self.kind = kind  # "server" | "open" | "admin" | "scoped"
        self.scope = scope
        self.verified = verified

    @property
    def scoped(self) -> bool:
        return self.scope is not None

    @property
    def claims(self) -> dict[str, Any] | None:
        return self.verified.claims if self.verified is not None else None

    @property
    def sub(self) -> Any:
        return self.verified.claims.get("sub") if self.verified is not None else None

    def whoami(self) -> dict[str, Any]:
        """`GET /_whoami` (access.md §6)."""
        if self.scope is None:
            return dict(FULL_ACCESS)
        return self.scope.whoami()


SERVER = Caller("server")
OPEN = Caller("open")
ADMIN = Caller("admin")


class Auth:
    """The tokens one server accepts, resolved per request on the event loop."""

    def __init__(self, *, server_token: str | None = None, admin_token: str | None = None,
                 verifier: Verifier | None = None, policy: Any = None) -> None:
        self.server_token = server_token.encode() if server_token else None
        self.admin_token = admin_token.encode() if admin_token else None
        self.verifier = verifier
        self.policy = policy
        self.open = self.server_token is None and verifier is None
        self.metrics_open = self.open and self.admin_token is None

    @staticmethod
    def _bearer(header: bytes | None) -> bytes | None:
        if header is None:
            return None
        scheme, _, value = header.strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        value = value.strip()
        return value or None

    def data(self, header: bytes | None) -> Caller:
        """The caller of a data route (`/query`, `/batch`, `/`, `/collections`, `/_whoami`)."""
        if self.open:
            return OPEN
        value = self._bearer(header)
        if value is None:
            raise AuthRefused(NO_TOKEN)
        if self.server_token is not None and hmac.compare_digest(value, self.server_token):
            return SERVER
        if self.verifier is not None and value.count(b".") == 2:
            return self._scoped(value)
        raise AuthRefused(NO_TOKEN)

    def metrics(self, header: bytes | None) -> Caller:
        """The caller of `/_metrics`: the server or the admin token, never a JWT."""
        if self.metrics_open:
            return OPEN
        value = self._bearer(header)
        if value is not None:
            if self.server_token is not None and hmac.compare_digest(value, self.server_token):
                return SERVER
            if self.admin_token is not None and hmac.compare_digest(value, self.admin_token):
                return ADMIN
        raise AuthRefused(NO_TOKEN)

    def _scoped(self, value: bytes) -> Caller:
        assert self.verifier is not None
        try:
            verified = self.verifier.verify(value.decode("ascii"))
        except UnicodeDecodeError:
            raise AuthRefused(NO_TOKEN) from None
        except TokenError as e:
            raise AuthRefused(e.message) from None
        caller = verified.extra
        if caller is None:
            # the scope is worked out once per token text and cached with the verified token
            caller = verified.extra = Caller("scoped", self.policy.scope_for(verified.claims), verified)
        return caller

    def recheck(self, caller: Caller) -> str | None:
        """Before each run of a held claim: the 401 message once its token's time is up."""
        if caller.verified is None or self.verifier is None:
            return None
        try:
            self.verifier.check_time(caller.verified)
        except TokenError as e:
            return e.message
        return None


class AuthDelay:
    """The per-address delay before a 401 is written (access.md §2.3)."""

    WINDOW_S = 60.0
    CAP_S = 5.0
    MAX_ADDRESSES = 65_536

    def __init__(self, base_ms: int = AUTH_DELAY_MS, clock: Callable[[], float] = time.monotonic) -> None:
        self.base_s = base_ms / 1000
        self.clock = clock
        self.refusals: dict[str, tuple[int, float]] = {}  # address -> (refusals in the window, last)

    def refused(self, address: str) -> float:
        """Count a refusal from `address`; answers the seconds to wait before writing it."""
        if self.base_s <= 0:
            return 0.0
        now = self.clock()
        count, last = self.refusals.get(address, (0, 0.0))
        if now - last > self.WINDOW_S:
            count = 0
        if len(self.refusals) >= self.MAX_ADDRESSES and address not in self.refusals:
            self._prune(now)
        self.refusals[address] = (count + 1, now)
        return min(self.base_s * (2 ** min(count, 16)), self.CAP_S)

    def cleared(self, address: str) -> None:
        """A good token from `address`: its count starts again."""
        if self.refusals:
            self.refusals.pop(address, None)

    def _prune(self, now: float) -> None:
        stale = [a for a, (_, last) in self.refusals.items() if now - last > self.WINDOW_S]
        for a in stale:
            del self.refusals[a]
        if len(self.refusals) >= self.MAX_ADDRESSES:  # all recent: drop the oldest half
            for a, _ in sorted(self.refusals.items(), key=lambda kv: kv[1][1])[: self.MAX_ADDRESSES // 2]:
                del self.refusals[a]


# -- the command line's access flags (server.md §1.4, access.md §2.1) --

class SetupError(Exception):
    """A start-up refusal (exit 2); `message` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Access:
    """What `configure` made of the flags: the Auth, the delay, and whether the server is open."""

    def __init__(self, auth: Auth, delay_ms: int, server_token_text: str | None) -> None:
        self.auth = auth
        self.delay_ms = delay_ms
        self.server_token_text = server_token_text

    @property
    def open(self) -> bool:
        """No server token and no JWT: everyone is the server token (loopback only)."""
        return self.auth.open


def jwt_secret(opts: dict[str, Any], environ: Mapping[str, str]) -> bytes | None:
    """The HS256 secret: `--jwt-secret`, `--jwt-secret-file` (trailing CR/LF trimmed), or else
    env FENEC_JWT_SECRET (proposed: a flag on the command line wins over the environment).
    Giving both flags, an unreadable file, or a secret under 32 bytes refuses to start."""
    flag = opts.get("jwt-secret")
    path = opts.get("jwt-secret-file")
    if flag is not None and path is not None:
        raise SetupError("--jwt-secret and --jwt-secret-file both given: the secret comes from one")
    if path is not None:
        try:
            with open(path, "rb") as f:
                secret = f.read().rstrip(b"\r\n")
        except OSError as e:
            raise SetupError(f"--jwt-secret-file {path}: cannot read it: {e.strerror or e}") from None
        source = f"the secret in {path}"
    elif flag is not None:
        secret, source = flag.encode(), "--jwt-secret"
    elif environ.get("FENEC_JWT_SECRET"):
        secret, source = environ["FENEC_JWT_SECRET"].encode(), "FENEC_JWT_SECRET"
    else:
        return None
    if len(secret) < MIN_SECRET_BYTES:
        raise SetupError(f"{source} is {len(secret)} bytes; an HS256 secret is at least {MIN_SECRET_BYTES}")
    return secret


def mint_token(opts: dict[str, Any], environ: Mapping[str, str]) -> str:
    """`--mint-token '<claims>'`: a token signed with the secret (access.md §2.4)."""
    secret = jwt_secret(opts, environ)
    if secret is None:
        raise SetupError("--mint-token needs a secret: --jwt-secret or --jwt-secret-file")
    try:
        return mint(opts["mint-token"], secret)
    except ValueError as e:
        raise SetupError(str(e)) from None


def _whole(opts: dict[str, Any], flag: str) -> int:
    """`flag`'s whole number in `opts`, else its default in the command line's table."""
    try:
        return whole(flag, given(opts, flag))
    except BadFlag as e:
        raise SetupError(e.message) from None


def configure(opts: dict[str, Any], environ: Mapping[str, str]) -> Access:
    """The tokens a server accepts, from its flags; SetupError for every start-up refusal."""
    server_token = opts.get("http-token") or environ.get("FENEC_HTTP_TOKEN") or None
    admin_token = opts.get("admin-token") or None
    delay_ms = _whole(opts, "--auth-delay")
    require = given(opts, "--jwt-require-exp").strip().lower()
    if require not in ("on", "off"):
        raise SetupError("--jwt-require-exp expects on or off")
    max_age = _whole(opts, "--jwt-max-age")
    secret = jwt_secret(opts, environ)
    policy_path = opts.get("policy")
    if secret is not None and policy_path is None:
        raise SetupError("a JWT secret without --policy: the rules are what give a scoped token any access")
    if policy_path is not None and secret is None:
        raise SetupError("--policy without JWT keys: give --jwt-secret or --jwt-secret-file")
    verifier = policy = None
    if secret is not None:
        from ..policy import Policy, PolicyError

        try:
            policy = Policy.load(str(policy_path))
        except PolicyError as e:
            raise SetupError(e.message) from None
        try:
            verifier = Verifier(secret, require_exp=require == "on", max_age_s=max_age,
                                list_claims=_claims_read(policy))
        except (ValueError, jwt.PyJWTError) as e:
            raise SetupError(f"the JWT secret cannot be used: {e}") from None
    auth = Auth(server_token=server_token, admin_token=admin_token, verifier=verifier, policy=policy)
    return Access(auth, delay_ms, server_token)


def _claims_read(policy: Any) -> set[tuple[str, ...]]:
    """Every claim a rule reads (its filter's `$jwt.*`, and `role` for a `for` rule): the list
    claims held to 1 000 values."""
    found: set[tuple[str, ...]] = set()
    for rule in policy.rules:
        found.update(rule.claims)
        if rule.role is not None:
            found.add(("role",))
    return found
