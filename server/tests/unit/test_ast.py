"""ql/ast.py's walk: the one way every module goes over a tree's nodes."""

from __future__ import annotations

from fenecdb_server.ql import ast as A
from fenecdb_server.ql.parser import parse


def names(node: A.Node) -> list[str]:
    return [type(n).__name__ for n in A.walk(node)]


def test_walk_goes_depth_first_left_to_right_through_a_statement() -> None:
    [stmt] = parse("set jobs {owner: $1, payload.to: case when a = 1 then $2 else 3 end} "
                   "where run_at <= now() and x in [4, $3] order run_at limit 10 returning id")
    assert names(stmt) == [
        "Set",
        "Entry", "Target", "Param",  # owner: $1
        "Entry", "Target", "Case", "Cmp", "Field", "Lit", "Param", "Lit",  # payload.to: case ...
        "And", "Cmp", "Field", "Call", "In", "Field", "Lit", "Param",  # where ...
        "OrderKey", "Field",
        "SelectItem", "Field",  # returning id
    ]


def test_children_look_into_nested_tuples_in_order() -> None:
    [put] = parse("put jobs [{a: 1, b: 2}, {c: $4}]")
    docs = A.children(put)
    assert [e.target.name for e in docs] == ["a", "b", "c"]
    obj = A.ObjectExpr((("k", A.Lit(1)), ("l", A.Param(2))))
    assert A.children(obj) == [A.Lit(1), A.Param(2)]


def test_leaves_have_no_children() -> None:
    for leaf in (A.Lit("x"), A.Param(1), A.Claim(("a", "b")), A.Field("f"), A.Path("p", ("k",)),
                 A.New("n", ("k",)), A.Duration(5, "m")):
        assert A.children(leaf) == []


def test_every_node_class_is_walked() -> None:
    declared = {c for c in vars(A).values()
                if isinstance(c, type) and issubclass(c, (A.Expr, A.Statement))
                and c not in (A.Expr, A.Statement)}
    assert declared <= set(A._FIELDS)


def test_a_tree_deeper_than_the_recursion_limit_is_walked() -> None:
    node: A.Expr = A.Param(7)
    for _ in range(50_000):  # built by hand: the parser would refuse past MAX_DEPTH
        node = A.Not(node)
    assert sum(1 for _ in A.walk(node)) == 50_001
    assert A.mentions(node, lambda n: isinstance(n, A.Param) and n.n == 7)
    assert not A.mentions(node, lambda n: isinstance(n, A.Claim))
    assert not A.mentions(None, lambda n: True)


def test_mentions_stops_at_the_first_match() -> None:
    seen: list[str] = []

    def note(n: A.Node) -> bool:
        seen.append(type(n).__name__)
        return isinstance(n, A.Field)
    [stmt] = parse("get jobs where a = 1 and b = 2")
    assert A.mentions(stmt, note)
    assert seen == ["Get", "And", "Cmp", "Field"]
