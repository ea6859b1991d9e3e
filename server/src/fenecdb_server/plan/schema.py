"""A collection's schema as plain data: its fields, their types and annotations, and the
indexes added on paths. The planner reads it; the engine owns the rows it describes."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import FenecError


def did_you_mean(name: str, names: Iterable[str], cutoff: float = 0.7) -> str:
    """` (did you mean `jobs`?)` when one of `names` is close to the unknown `name`, else "". The
    caller gives only names the asker may know of: a hint never shows a name it could not read."""
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=cutoff)
    return f" (did you mean `{close[0]}`?)" if close else ""


def no_collection(name: str, names: Iterable[str]) -> FenecError:
    """The 404 of an unknown collection, with a hint from `names` (those the asker may see)."""
    return FenecError("notfound", f"no collection `{name}`{did_you_mean(name, names)}")

ORDERED_TYPES = ("int", "float", "timestamp", "text")
HASHABLE_TYPES = ("bool", "int", "float", "text", "bytes", "timestamp")


@dataclass(slots=True)
class FieldInfo:
    name: str
    type: Any
    required: bool = False
    index: str | None = None  # hash unique sorted geo ttl
    ttl_ms: int | None = None

    def to_json(self) -> dict:
        t = self.type if isinstance(self.type, str) else f"[{self.type[1]}]"
        return {"name": self.name, "type": t, "index": self.index, "required": self.required,
                **({"ttl_ms": self.ttl_ms} if self.ttl_ms is not None else {})}


@dataclass(slots=True)
class Schema:
    name: str
    fields: dict[str, FieldInfo]
    # Indexes keyed by the target text: "run_at" or "meta.lang" -> kind
    indexes: dict[str, str] = field(default_factory=dict)
    # no field holds bytes (nor a list of them): every value a row holds is one orjson writes as
    # it is stored, so a snapshot writes such a row as it is (engine/records.py `_snapshot_row`).
    # A field's type never changes once created (only its index), so this is taken once.
    plain: bool = field(init=False, repr=False, compare=False)
    # what a row read back from the log needs (engine/execute.py `decode_row`): the names a stored
    # row may hold (its fields and `id`), and the fields whose values are typed back from their
    # JSON form (timestamps, bytes, geo points, lists of timestamps or bytes), with their types
    known: frozenset[str] = field(init=False, repr=False, compare=False)
    typed: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.plain = not any(f.type == "bytes" or f.type == ("list", "bytes") for f in self.fields.values())
        self.known = frozenset((*self.fields, "id"))
        self.typed = {f.name: f.type for f in self.fields.values()
                      if f.type in ("timestamp", "bytes", "geo") or isinstance(f.type, tuple)
                      and f.type[1] in ("timestamp", "bytes")}

    @property
    def ttl_field(self) -> FieldInfo | None:
        for f in self.fields.values():
            if f.index == "ttl":
                return f
        return None

    def field(self, name: str) -> FieldInfo:
        f = self.fields.get(name)
        if f is None:
            hint = did_you_mean(name, [*self.fields, "id"])
            raise FenecError("notfound", f"collection `{self.name}` has no field `{name}`{hint}")
        return f

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "fields": [f.to_json() for f in self.fields.values()],
            "indexes": dict(self.indexes),
        }

    @classmethod
    def from_json(cls, d: dict) -> Schema:
        fields = {}
        for f in d["fields"]:
            t = f["type"]
            if t.startswith("["):
                t = ("list", t[1:-1])
            fields[f["name"]] = FieldInfo(f["name"], t, f.get("required", False), f.get("index"), f.get("ttl_ms"))
        return cls(d["name"], fields, dict(d.get("indexes", {})))


def check_annotation(coll: str, target_text: str, ftype: Any, index: str, on_path: bool) -> None:
    """Refuse an annotation on a type it does not fit (400)."""
    if on_path:
        if index not in ("hash", "unique", "unique_pending", "sorted"):
            raise FenecError("query", f"only @hash, @unique and @sorted index a path, not @{index}")
        return
    if index in ("hash", "unique", "unique_pending"):
        if ftype not in HASHABLE_TYPES:
            raise FenecError("type", f"field `{target_text}` is not bool, int, float, text, bytes or timestamp, "
                                     f"no @{index} index can be built")
    elif index == "sorted":
        if ftype not in ORDERED_TYPES:
            raise FenecError("type", f"field `{target_text}` is not int, float, timestamp, text or json, "
                                     f"no ordered index can be built")
    elif index == "ttl":
        if ftype != "timestamp":
            raise FenecError("type", f"field `{target_text}` is not a timestamp, @ttl needs one")
    elif index == "geo":
        if ftype != "geo":
            raise FenecError("type", f"field `{target_text}` is not geo, @geo needs a point field")
