"""Access rules: the policy file and what a token may do under it (access.md §3–§6).

    Policy.load(path) / Policy.parse(text)  -> the rules, or PolicyError naming the line
    policy.scope_for(claims)                -> Scope: the rules that apply to one token

The policy layer sits between plan and engine: it parses filters with the statement parser and
splits them; `engine/scoped.py` compiles and enforces them.
"""

from __future__ import annotations

import os

from .rules import AppendOnly, PolicyError, Rule, parse_rules
from .scope import Grants, Scope


class Policy:
    def __init__(self, rules: list[Rule], append_only: list[AppendOnly], name: str = "<policy>") -> None:
        self.rules = rules
        self.append_only = append_only
        self.name = name

    @classmethod
    def parse(cls, text: str, name: str = "<policy>") -> Policy:
        try:
            rules, ao = parse_rules(text)
        except PolicyError as e:
            raise PolicyError(f"{name}: {e.message}") from None
        return cls(rules, ao, name)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Policy:
        name = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise PolicyError(f"{name}: cannot read the policy: {e}") from None
        return cls.parse(text, name=name)

    def scope_for(self, claims: dict) -> Scope:
        return Scope(claims, self.rules, self.append_only)


__all__ = ["Policy", "PolicyError", "Scope", "Grants", "Rule"]
