"""parser: every statement form (fenecql.md §2), free clause order, named messages, positions, limits."""

from __future__ import annotations

import pytest
from fenecdb_server import FenecError
from fenecdb_server.ql import ast as A
from fenecdb_server.ql.parser import parse


def one(text):
    stmts = parse(text)
    assert len(stmts) == 1
    return stmts[0]


def refused(text, *needles):
    with pytest.raises(FenecError) as ei:
        parse(text)
    e = ei.value
    assert e.status == 400 and e.kind == "query", e
    for n in needles:
        assert n in e.message, e.message
    return e.message


# ---------------------------------------------------------------- statement forms

def test_create_collection_every_type_and_annotation():
    s = one("create collection if not exists jobs (a bool, b int @sorted, c float, d text @hash, e string, "
            "f bytes, g blob, h timestamp @ttl(30m), i timestamptz, j json, k geo @geo, l [int], "
            "m text required @unique)")
    assert isinstance(s, A.CreateCollection) and s.if_not_exists and s.name == "jobs"
    assert [f.name for f in s.fields] == list("abcdefghijklm")
    assert len(s.fields) == 13


def test_drop_and_create_index():
    s = one("drop collection if exists jobs")
    assert isinstance(s, A.DropCollection) and s.if_exists and s.name == "jobs"
    s = one("create index if not exists on docs (meta.lang) @hash")
    assert isinstance(s, A.CreateIndex) and s.collection == "docs" and s.index == "hash"
    assert s.target.name == "meta" and s.target.keys == ("lang",) and s.if_not_exists


def test_put_insert_forms():
    s = one('put jobs {kind: "a", payload.to: 1, "q": 2}')
    assert isinstance(s, A.Put) and s.verb == "put" and len(s.documents) == 1
    assert [e.target.text for e in s.documents[0]] == ["kind", "payload.to", "q"]
    s = one("insert into jobs [{a: 1}, {a: 2}] require 2")
    assert s.verb == "insert" and len(s.documents) == 2 and s.require == 2
    s = one("put jobs $1")
    assert s.param == 1 and s.documents is None
    s = one("insert jobs {id: 3} if absent else set {n: n + 1}")
    assert s.if_absent and s.else_patch is not None
    s = one("put jobs {}")
    assert s.documents == ((),)


def test_get_forms_and_free_clause_order():
    a = one("get jobs where id = 1 order id desc limit 5 offset 2 select id, kind")
    b = one("get jobs select id, kind offset 2 limit 5 order id desc where id = 1")
    assert a == b
    assert a.limit == 5 and a.offset == 2 and a.order[0].desc
    c = one("select id, kind from jobs where id = 1 order id desc limit 5 offset 2")
    assert c == a
    s = one("get jobs where attempts > 0 count")
    assert s.count and s.where is not None
    s = one("get jobs require 1")
    assert s.require == 1


def test_set_and_del_forms():
    a = one('set jobs {owner: $1} where run_at <= now() order run_at limit 10 returning * require 1')
    b = one('update jobs set {owner: $1} require 1 returning * limit 10 order run_at where run_at <= now()')
    assert isinstance(a, A.Set) and a == b and a.returning_all
    d = one("del jobs require 1 where id = 2")
    assert isinstance(d, A.Del) and d.require == 1
    d2 = one("delete from jobs where id = 2 require 1")
    assert d2 == d
    r = one("del jobs where id = 1 returning id, payload.to")
    assert [i.name for i in r.returning] == ["id", "payload.to"] and not r.returning_all


def test_keywords_case_insensitive_names_not():
    assert one("GET jobs WHERE id = 1") == one("get jobs where id = 1")
    assert one("get Jobs").collection == "Jobs"


def test_several_statements_with_and_without_semicolons():
    assert len(parse("get a get b; get c;")) == 3
    assert len(parse("put a {x: 1}\nset a {x: 2}\n;del a")) == 3


def test_comments_both_styles():
    s = one("get jobs   -- every job\n  where attempts > 0;   # a second comment style\n")
    assert s.where is not None
    assert one('put t {s: "a -- b # c"}').documents[0][0].value == A.Lit("a -- b # c")


def test_literals():
    def val(text):
        return one(f"put t {{x: {text}}}").documents[0][0].value

    assert val("1_000_000") == A.Lit(1_000_000)
    assert val("-7") == A.Lit(-7)
    assert val("2.5E6") == A.Lit(2.5e6) and val("1e-3") == A.Lit(0.001)
    assert val(r'"a\nb\t\"\\\u"') == A.Lit('a\nb\t"\\u')
    assert val(r"'it\'s\0'") == A.Lit("it's\0")
    assert val("TRUE") == A.Lit(True) and val("Null") == A.Lit(None)
    assert isinstance(val("[1, [2], {a: 1}]"), A.ListExpr)
    assert val("$3") == A.Param(3)
    assert val(str(2**63 - 1)) == A.Lit(2**63 - 1)
    assert val(str(-(2**63))) == A.Lit(-(2**63))


def test_operators_alike():
    assert one("get t where a == 1") == one("get t where a = 1")
    assert one("get t where a <> 1") == one("get t where a != 1")


# ---------------------------------------------------------------- refusals with named messages

def test_repeated_clause():
    refused("get jobs where id = 1 where id = 2", "twice")
    refused("set jobs {a: 1} limit 1 limit 2", "twice")
    refused("select id from jobs select id", "twice")


@pytest.mark.parametrize("text", ["set jobs {a: 1} offset 1", "del jobs count", "del jobs offset 2"])
def test_read_clauses_on_writes(text):
    refused(text)


@pytest.mark.parametrize("other", ["select id", "order id", "limit 1", "offset 1", "require 1"])
def test_count_with_other_clauses(other):
    refused(f"get jobs count {other}", "count")


def test_unterminated_text():
    refused('get t where s = "abc', "unterminated text")
    refused("get t where s = 'abc", "unterminated text")


def test_lone_bang():
    refused("get t where a ! 1", "lone `!`")


def test_decimals_need_digits_both_sides():
    refused("get t where a = .5", "digit before the point")
    refused("get t where a = 1.", "digit after the point")


def test_case_without_end():
    refused("get t select case when a = 1 then 2 else 3 as x", "`end`")
    refused("get t where case when a then 1", "`end`")


def test_keyword_as_name():
    msg = refused("create collection t (limit int)", "keyword")
    assert "line 1" in msg
    refused("get where", "keyword")
    refused("create collection order (a int)", "keyword")


def test_comparisons_do_not_chain():
    refused("get t where 1 < a < 3", "do not chain")


def test_unary_minus_only_on_literals():
    refused("get t where a = -b")


def test_int_out_of_range():
    refused(f"get t where a = {2**63}")


def test_param_zero_and_uint_params():
    refused("get t where a = $0", "$0")
    refused("get t limit $1")
    refused("get t require $1")
    refused("get t limit -1")


def test_select_item_needs_as():
    refused("get t select a + 1")
    assert one("get t select a + 1 as b").select[0].name == "b"
    refused("get t select *, a")


def test_else_set_needs_if_absent():
    refused("put t {a: 1} else set {a: 2}")


def test_entry_written_twice():
    refused("put t {a: 1, a: 2}", "twice")


def test_object_key_twice_refused():
    with pytest.raises(FenecError) as ei:
        parse('put t {j: {a: 1, "a": 2}}')
    assert ei.value.status == 400


def test_empty_text():
    refused("", "no statement")
    refused("  -- only a comment\n", "no statement")


def test_not_text():
    refused(None)  # type: ignore[arg-type]


# ---------------------------------------------------------------- positions

def test_line_column_and_caret():
    msg = refused("get jobs\n  where id = = 2")
    assert "line 2" in msg and "column 14" in msg
    lines = msg.split("\n")
    src, caret = lines[-2], lines[-1]
    assert src.strip() == "where id = = 2"
    assert caret.index("^") == src.index("= 2")


def test_position_is_a_character_offset():
    msg = refused("get t where a = .5")
    assert msg.startswith("position 16 (line 1, column 17)")


# ---------------------------------------------------------------- limits

def nested(depth):
    return "get t where " + "(" * (depth - 1) + "a = 1" + ")" * (depth - 1)


def test_depth_512_is_fine_513_is_refused():
    parse(nested(512))
    refused(nested(514), "too deep")
    refused("get t where " + "(" * 513 + "a = 1" + ")" * 513, "too deep")


def test_very_deep_is_400_not_recursion_error():
    refused("get t where " + "(" * 100_000 + "a" + ")" * 100_000, "too deep")
    try:  # a long `not` chain parses or is refused, never a RecursionError (compile counts it: test_compile)
        parse("get t where " + "not " * 5000 + "a")
    except FenecError as e:
        assert e.status == 400


def test_names_up_to_128():
    one("get " + "n" * 128)
    refused("get " + "n" * 129, "128")
    refused("create collection t (" + "f" * 129 + " int)", "128")


def test_path_up_to_64_keys():
    one("get t select " + "a" + ".k" * 64)
    refused("get t select " + "a" + ".k" * 65, "64")


def test_brackets_inside_text_are_not_nesting():
    s = one('put t {s: "' + "(" * 600 + '"}')
    assert s.documents[0][0].value.value == "(" * 600
    one("put t {s: '" + "[{" * 600 + "'}")
    one('put t {s: "\\"' + "(" * 600 + '\\""}')  # escaped quotes do not end the text
    one("put t {s: 'it\\'s " + ")" * 600 + "('}")
    one("get t where a = 1 -- " + "(" * 600 + "\n and b = 2 # " + "{" * 600)
    one("get t where s = '" + " and " * 3000 + "'")


def test_brackets_after_a_text_still_count():
    refused('get t where s = "a\\"b" or ' + "(" * 600 + "a" + ")" * 600, "too deep")
    refused("get t where s = 'x' and " + "(" * 513 + "a" + ")" * 513, "too deep")
    refused("get t where a = '--' and " + "[" * 600 + "1" + "]" * 600, "too deep")
    refused("get t where " + " and ".join(["a"] * 3000), "too deep")


def test_numbers_of_thousands_of_digits_are_400_not_a_crash():
    big = "9" * 5000  # past what int() reads: it raised a bare ValueError inside lark (a 500)
    for text in (f"get t where i = {big}", f"get t where i = -{big}", f"get t select bucket(t, {big}m)",
                 f"get t limit {big}", f"get t where i = ${big}", f"create collection u (t timestamp @ttl({big}m))"):
        refused(text, "out of range")
    one(f"get t where f = 0.{big}")  # a long decimal is still a float


def test_unicode_names():
    s = one("get çizelge where ağırlık > 1")
    assert s.collection == "çizelge"
