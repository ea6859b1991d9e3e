"""What one token may do: the policy's rules that apply to its claims (access.md §3.2, §6).

A `Scope` is built per verified token from its claims; rules for another role, or reading a
claim the token lacks, are left out, so a hole in a filter never widens it. Per collection it
answers the applicable rules of each grant (rules on the collection and `*` rules widen each
other), and `key` names that set of rules: the engine caches a scoped statement's prepared
form per (text, key), the claims themselves bound at run time through `Env(claims=...)`.
"""

from __future__ import annotations

from typing import Any

from .. import values as V
from .rules import GRANTS, HIDDEN, AppendOnly, Rule


class Grants:
    """The applicable rules of one collection, by grant."""

    __slots__ = ("collection", "by_grant", "append_only", "key")

    def __init__(self, collection: str, rules: list[Rule], append_only: bool) -> None:
        self.collection = collection
        self.append_only = append_only
        self.by_grant: dict[str, tuple[Rule, ...]] = {}
        for g in GRANTS:
            if append_only and g in ("update", "delete"):
                self.by_grant[g] = ()  # there `write` and `*` rules mean insert
                continue
            self.by_grant[g] = tuple(r for r in rules if g in r.grants)
        self.key = tuple((g, tuple(r.line for r in rs)) for g, rs in self.by_grant.items() if rs) \
            + (("append-only", append_only),)

    def rules(self, grant: str) -> tuple[Rule, ...]:
        return self.by_grant[grant]

    def has(self, grant: str) -> bool:
        return bool(self.by_grant[grant])

    @property
    def visible(self) -> bool:
        return any(self.by_grant.values())


class Scope:
    """What a scoped token may do. `claims` is the verified JWT payload."""

    def __init__(self, claims: dict, rules: list[Rule], append_only: list[AppendOnly]) -> None:
        self.claims = claims
        self.sub = claims.get("sub")
        self.rules = [r for r in rules if r.applies_to(claims)]
        self._append_only = frozenset(a.collection for a in append_only)
        self._grants: dict[str, Grants] = {}

    def grants(self, collection: str) -> Grants:
        g = self._grants.get(collection)
        if g is None:
            rules = [] if collection == HIDDEN else [r for r in self.rules if r.collection in (collection, "*")]
            g = Grants(collection, rules, self.append_only(collection))
            self._grants[collection] = g
        return g

    def append_only(self, collection: str) -> bool:
        return collection in self._append_only or "*" in self._append_only

    def visible(self, collection: str) -> bool:
        """Some grant applies; otherwise the collection does not exist for this token (404)."""
        return self.grants(collection).visible

    def line_key(self, collection: str) -> Any:
        """What makes two tokens' held claims the same line: the rules and the claims they read."""
        g = self.grants(collection)
        read = sorted({k for rs in g.by_grant.values() for r in rs for k in r.claims})
        vals = []
        for keys in read:
            vals.append((keys, repr(V.read_path(self.claims, keys))))  # every rule here found them all
        return (g.key, tuple(vals))

    def whoami(self) -> dict:
        """access.md §6 for a scoped token."""
        out = []
        for r in self.rules:
            if r.collection != "*" and self.append_only(r.collection):
                grants = [g for g in GRANTS if g in r.grants and g not in ("update", "delete")]
            else:
                grants = [g for g in GRANTS if g in r.grants]
            if not grants:
                continue
            out.append({"collection": r.collection, "grants": grants,
                        "fields": list(r.fields) if r.fields is not None and "update" in grants else None,
                        "rows": r.rows})
        return {"sub": self.sub, "append_only": sorted(self._append_only), "rules": out}
