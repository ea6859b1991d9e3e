"""The nodes the literal reader (literals.py) builds most, made without their
dataclass `__init__` (a frame of Python and a `__setattr__` call per field): a fresh object with its
slots filled, the very object `__init__` makes (equal, hashing alike). The differential test holds
`BY_SLOTS` to the classes' fields, and the nodes to lark's."""

from __future__ import annotations

from typing import Any, Final

from . import ast as A

_NEW: Final = object.__new__
_LIT: Final = A.Lit
_ENTRY: Final = A.Entry
_CALL: Final = A.Call
_OBJECT: Final = A.ObjectExpr
_LIST: Final = A.ListExpr
_SET_LIT_VALUE: Final = A.Lit.__dict__["value"].__set__
_SET_ENTRY_TARGET: Final = A.Entry.__dict__["target"].__set__
_SET_ENTRY_VALUE: Final = A.Entry.__dict__["value"].__set__
_SET_CALL_NAME: Final = A.Call.__dict__["name"].__set__
_SET_CALL_ARGS: Final = A.Call.__dict__["args"].__set__
_SET_CALL_POS: Final = A.Call.__dict__["pos"].__set__
_SET_OBJECT_ITEMS: Final = A.ObjectExpr.__dict__["items"].__set__
_SET_LIST_ITEMS: Final = A.ListExpr.__dict__["items"].__set__
BY_SLOTS: Final = {A.Lit: ("value",), A.Entry: ("target", "value"), A.Call: ("name", "args", "pos"),
                     A.ObjectExpr: ("items",), A.ListExpr: ("items",)}


def new_lit(v: Any) -> A.Lit:
    node = _NEW(_LIT)
    _SET_LIT_VALUE(node, v)
    return node


def new_entry(target: A.Target, value: A.Expr) -> A.Entry:
    node = _NEW(_ENTRY)
    _SET_ENTRY_TARGET(node, target)
    _SET_ENTRY_VALUE(node, value)
    return node


def new_call(name: str, args: tuple[A.Expr, ...], pos: int) -> A.Call:
    node = _NEW(_CALL)
    _SET_CALL_NAME(node, name)
    _SET_CALL_ARGS(node, args)
    _SET_CALL_POS(node, pos)
    return node


def new_object(items: tuple[tuple[str, A.Expr], ...]) -> A.ObjectExpr:
    node = _NEW(_OBJECT)
    _SET_OBJECT_ITEMS(node, items)
    return node


def new_list(items: tuple[A.Expr, ...]) -> A.ListExpr:
    node = _NEW(_LIST)
    _SET_LIST_ITEMS(node, items)
    return node


__all__ = ["BY_SLOTS", "new_call", "new_entry", "new_list", "new_lit", "new_object"]
