"""A small client of etcd's v3 API through its HTTP/JSON gateway (the client port's `/v3/...`).

Only what the cluster (cluster.py) needs: a lease granted, kept alive and revoked; a key read,
put (under a lease) and read by prefix; transactions that compare, then put or delete. Keys and values are
bytes on the wire in base64; int64 fields come back as JSON strings. The standard library only:
one request per call on a connection kept per endpoint, a short timeout, so that a lost etcd is
seen within it rather than waited on.

`Etcd` is given several endpoints; a call that cannot reach one (refused, timed out, an answer
that is not etcd's) tries the next, and `EtcdDown` is raised once every one failed in that call.
"""

from __future__ import annotations

import base64
import http.client
import json
import urllib.parse
from typing import Any

TIMEOUT_S = 1.0


class EtcdDown(Exception):
    """No endpoint of etcd answered the call."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with `prefix` (etcd's range end)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


class KV:
    """A key read back: its value and revisions."""

    __slots__ = ("key", "value", "create_revision", "mod_revision", "lease")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.key = _unb64(raw.get("key", ""))
        self.value = _unb64(raw.get("value", ""))
        self.create_revision = int(raw.get("create_revision", 0))
        self.mod_revision = int(raw.get("mod_revision", 0))
        self.lease = int(raw.get("lease", 0))


class Etcd:
    """etcd at `endpoints` (http:// URLs); the calls raise EtcdDown when none answers."""

    def __init__(self, endpoints: list[str], timeout: float = TIMEOUT_S) -> None:
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.timeout = timeout
        self._at = 0  # the endpoint that answered last: tried first
        self._conns: dict[int, http.client.HTTPConnection] = {}

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        last = ""
        for n in range(len(self.endpoints)):
            at = (self._at + n) % len(self.endpoints)
            conn = self._conns.get(at)
            if conn is None:
                parts = urllib.parse.urlsplit(self.endpoints[at])
                conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 2379,
                                                  timeout=self.timeout)
                self._conns[at] = conn
            try:
                conn.request("POST", path, body=data, headers={"content-type": "application/json"})
                resp = conn.getresponse()
                raw = resp.read()
                answer = json.loads(raw) if raw else {}
            except (OSError, http.client.HTTPException, ValueError) as e:
                conn.close()
                self._conns.pop(at, None)
                last = f"{self.endpoints[at]}: {e or type(e).__name__}"
                continue
            if resp.status != http.HTTPStatus.OK or not isinstance(answer, dict):
                last = f"{self.endpoints[at]} answered {resp.status}: {raw[:200]!r}"
                if resp.status >= http.HTTPStatus.INTERNAL_SERVER_ERROR:
                    continue
                raise EtcdDown(last)
            self._at = at
            result = answer.get("result", answer)  # the keep-alive's stream wraps its answer
            return result if isinstance(result, dict) else {}
        raise EtcdDown(last or "no etcd endpoint")

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    # -- leases --

    def grant(self, ttl: int) -> int:
        """A new lease of `ttl` seconds; its id."""
        got = self._post("/v3/lease/grant", {"TTL": str(ttl)})
        lease = int(got.get("ID", 0))
        if not lease:
            raise EtcdDown(f"etcd granted no lease: {got}")
        return lease

    def keepalive(self, lease: int) -> int:
        """Renew `lease`; the seconds it now has (0: it is gone, expired or revoked)."""
        got = self._post("/v3/lease/keepalive", {"ID": str(lease)})
        return int(got.get("TTL", 0))

    def revoke(self, lease: int) -> None:
        self._post("/v3/lease/revoke", {"ID": str(lease)})

    # -- keys --

    def get(self, key: bytes) -> KV | None:
        got = self._post("/v3/kv/range", {"key": _b64(key)})
        kvs = got.get("kvs") or []
        return KV(kvs[0]) if kvs else None

    def get_prefix(self, prefix: bytes) -> list[KV]:
        got = self._post("/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))})
        return [KV(kv) for kv in got.get("kvs") or []]

    def put(self, key: bytes, value: bytes, lease: int = 0) -> None:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        self._post("/v3/kv/put", body)

    def delete(self, key: bytes) -> None:
        self._post("/v3/kv/deleterange", {"key": _b64(key)})

    def create(self, key: bytes, value: bytes, lease: int, *, also: tuple[bytes, bytes, int] | None = None,
               then: tuple[bytes, int, bytes | None] | None = None) -> bool:
        """Put `key` (under `lease`) only if it is absent, in one transaction; with `also`
        (key2, value2, mod_revision), only if key2 was last modified at that revision (0: key2
        absent), putting value2 there too; with `then` (key3, mod_revision, value3), only if key3
        was last modified at that revision too, putting value3 there (None: deleting key3).
        Whether it succeeded."""
        compare: list[dict[str, Any]] = [
            {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}]
        success: list[dict[str, Any]] = [
            {"request_put": {"key": _b64(key), "value": _b64(value), "lease": str(lease)}}]
        if also is not None:
            key2, value2, rev = also
            compare.append({"key": _b64(key2), "target": "MOD", "result": "EQUAL", "mod_revision": str(rev)})
            success.append({"request_put": {"key": _b64(key2), "value": _b64(value2)}})
        if then is not None:
            key3, rev3, value3 = then
            compare.append({"key": _b64(key3), "target": "MOD", "result": "EQUAL", "mod_revision": str(rev3)})
            success.append({"request_delete_range": {"key": _b64(key3)}} if value3 is None else
                           {"request_put": {"key": _b64(key3), "value": _b64(value3)}})
        got = self._post("/v3/kv/txn", {"compare": compare, "success": success})
        return bool(got.get("succeeded", False))

    def put_if(self, key: bytes, value: bytes, guard: bytes, guard_value: bytes) -> bool:
        """Put `key` (under no lease) only if `guard` holds exactly `guard_value`, in one
        transaction; whether it did."""
        compare = [{"key": _b64(guard), "target": "VALUE", "result": "EQUAL", "value": _b64(guard_value)}]
        success = [{"request_put": {"key": _b64(key), "value": _b64(value)}}]
        got = self._post("/v3/kv/txn", {"compare": compare, "success": success})
        return bool(got.get("succeeded", False))
