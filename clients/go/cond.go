package fenecdb

// Conditions: the where clause as a small tree (R5–R10).
//
// A Cond is a comparison, a raw text, a junction (and / or) or a not. A refusal found while building a
// condition travels inside it and comes out at whatever ends the chain. Before rendering, a junction with
// one member becomes that member and an empty one disappears; an and inside an or, or an or inside an
// and, is written in parentheses; not always writes `not (...)`.

import "strings"

// Cond is a condition for WhereCond and OrWhereCond. Make one with Cmp, Fields, Raw, Or, And or Not.
type Cond interface {
	// simplify gives the condition with empty junctions dropped and one-member junctions unwrapped
	// (nil when nothing is left), or the first refusal inside it.
	simplify() (node, *QueryError)
}

// node is a simplified condition, ready to render.
type node interface {
	render(r *renderer) string
}

// The operators of R5: symbols, and the words that stand for them.
var operatorWords = map[string]string{
	"=": "=", "eq": "=",
	"!=": "!=", "ne": "!=", "neq": "!=",
	"<": "<", "lt": "<",
	"<=": "<=", "lte": "<=", "le": "<=",
	">": ">", "gt": ">",
	">=": ">=", "gte": ">=", "ge": ">=",
	"~": "~", "like": "~", "contains": "~",
	"has": "has",
	"in":  "in",
}

// ---- comparisons

type cmpCond struct {
	field string
	op    string // as given
	value any
}

// Cmp is the comparison field op value; op is a symbol or its word (R5): Cmp("attempts", "<", 3).
func Cmp(field, op string, value any) Cond { return cmpCond{field: field, op: op, value: value} }

type cmpNode struct {
	field  string
	symbol string
	value  any
	list   []any // for in
}

func (c cmpCond) simplify() (node, *QueryError) {
	symbol, ok := operatorWords[c.op]
	if !ok {
		return nil, refuse("unknown operator `%s`", c.op)
	}
	return compare(c.field, symbol, c.value)
}

// compare checks a comparison whose operator is known: the field name, then the value (R6, R7).
func compare(field, symbol string, value any) (node, *QueryError) {
	if err := checkField(field); err != nil {
		return nil, err
	}
	if isNull(value) && symbol != "=" && symbol != "!=" {
		return nil, refuse("`%s` cannot be used with null (field: %s)", symbol, field)
	}
	if symbol == "in" {
		list, ok := listOf(value)
		if !ok {
			return nil, refuse("`in` expects an array (field: %s)", field)
		}
		if len(list) == 0 {
			return nil, refuse("`in` does not accept an empty array (field: %s)", field)
		}
		return cmpNode{field: field, symbol: symbol, list: list}, nil
	}
	if c, ok := value.(Computed); ok {
		if c.err != nil {
			return nil, c.err
		}
		if c.inc {
			return nil, refuse("inc() reads the row it changes: use it in update (field: %s)", field)
		}
	}
	return cmpNode{field: field, symbol: symbol, value: value}, nil
}

func (n cmpNode) render(r *renderer) string {
	switch {
	case n.symbol == "in":
		marks := make([]string, len(n.list))
		for i, e := range n.list {
			marks[i] = r.bind(e)
		}
		return n.field + " in [" + strings.Join(marks, ", ") + "]"
	case isNull(n.value) && n.symbol == "=":
		return n.field + " is null"
	case isNull(n.value):
		return n.field + " is not null"
	}
	return n.field + " " + n.symbol + " " + r.value(n.value)
}

// ---- object conditions and operator maps

// OpMap is a field's operator map, in order: Ops("gte", 2, "lte", 5). Each key is an operator symbol or
// word, or "not" (not: nil is `is not null`, not: v is `!= v`, not: Ops(...) is `not (...)`).
type OpMap struct {
	ops  []string
	vals []any
	err  *QueryError
}

// Ops makes an operator map from operators and values in turn, for Fields.
func Ops(opValue ...any) OpMap {
	var m OpMap
	m.ops = []string{}
	if len(opValue)%2 != 0 {
		m.err = refuse("Ops takes operators and values in pairs (got %d arguments)", len(opValue))
		return m
	}
	for i := 0; i < len(opValue); i += 2 {
		op, ok := opValue[i].(string)
		if !ok {
			m.err = refuse("an operator is a text (got %T)", opValue[i])
			return m
		}
		m.ops = append(m.ops, op)
		m.vals = append(m.vals, opValue[i+1])
	}
	return m
}

type fieldsCond struct {
	names []string
	specs []any
	err   *QueryError
}

// Fields is the object condition: names and specs in turn, joined with and (R5). A spec is a value
// (equality; nil is `is null`), or an operator map made by Ops (a map[string]any is one too, in sorted
// key order). Fields() adds nothing.
func Fields(nameSpec ...any) Cond {
	var f fieldsCond
	if len(nameSpec)%2 != 0 {
		f.err = refuse("Fields takes names and specs in pairs (got %d arguments)", len(nameSpec))
		return f
	}
	for i := 0; i < len(nameSpec); i += 2 {
		name, ok := nameSpec[i].(string)
		if !ok {
			f.err = refuse("a field name is a text (got %T)", nameSpec[i])
			return f
		}
		f.names = append(f.names, name)
		f.specs = append(f.specs, nameSpec[i+1])
	}
	return f
}

func (f fieldsCond) simplify() (node, *QueryError) {
	if f.err != nil {
		return nil, f.err
	}
	var parts []Cond
	for i, name := range f.names {
		parts = append(parts, fieldSpec{name, f.specs[i]})
	}
	return And(parts...).simplify()
}

// fieldSpec is one field of an object condition.
type fieldSpec struct {
	field string
	spec  any
}

func asOpMap(spec any) (OpMap, bool) {
	switch m := spec.(type) {
	case OpMap:
		return m, true
	case *OpMap:
		if m != nil {
			return *m, true
		}
	case map[string]any:
		d := sortedDoc(m)
		return OpMap{ops: d.keys, vals: d.vals}, true
	}
	return OpMap{}, false
}

func (s fieldSpec) simplify() (node, *QueryError) {
	m, ok := asOpMap(s.spec)
	if !ok {
		return compare(s.field, "=", s.spec)
	}
	if m.err != nil {
		return nil, m.err
	}
	if len(m.ops) == 0 {
		return nil, refuse("empty condition object (field: %s)", s.field)
	}
	// each key in turn, so the first wrong one is the refusal, as in every SDK
	var parts []Cond
	for i, op := range m.ops {
		v := m.vals[i]
		if op == "not" {
			if inner, isMap := asOpMap(v); isMap {
				parts = append(parts, Not(fieldSpec{s.field, inner}))
			} else {
				parts = append(parts, symbolCond{s.field, "!=", v})
			}
			continue
		}
		symbol, known := operatorWords[op]
		if !known {
			parts = append(parts, refusedCond{refuse("unknown operator `%s` (field: %s)", op, s.field)})
			continue
		}
		parts = append(parts, symbolCond{s.field, symbol, v})
	}
	return And(parts...).simplify()
}

// refusedCond carries a refusal to its place among its siblings.
type refusedCond struct{ err *QueryError }

func (c refusedCond) simplify() (node, *QueryError) { return nil, c.err }

// symbolCond is a comparison whose operator is already a known symbol.
type symbolCond struct {
	field, symbol string
	value         any
}

func (c symbolCond) simplify() (node, *QueryError) { return compare(c.field, c.symbol, c.value) }

// ---- raw

type rawCond struct {
	text   string
	params []any
	err    *QueryError
}

// Raw is a condition written as given, each `?` replaced by the next parameter (R10):
// Raw("run_at <= now()"), Raw("attempts * ? < ?", 2, 10). A literal `?` must be a parameter.
func Raw(text string, params ...any) Cond {
	return rawCond{text: text, params: params, err: countPlaceholders("raw", text, len(params))}
}

type rawNode struct {
	text   string
	params []any
}

func (c rawCond) simplify() (node, *QueryError) {
	if c.err != nil {
		return nil, c.err
	}
	return rawNode{c.text, c.params}, nil
}

func (n rawNode) render(r *renderer) string { return substitute(n.text, n.params, r.bind) }

// ---- junctions and not

type junctionCond struct {
	kind    string // "and" | "or"
	members []Cond
}

// And joins conditions with and.
func And(conds ...Cond) Cond { return junctionCond{kind: "and", members: conds} }

// Or joins conditions with or.
func Or(conds ...Cond) Cond { return junctionCond{kind: "or", members: conds} }

type junctionNode struct {
	kind    string
	members []node
}

func (j junctionCond) simplify() (node, *QueryError) {
	var kept []node
	for _, m := range j.members {
		if m == nil {
			continue
		}
		n, err := m.simplify()
		if err != nil {
			return nil, err
		}
		if n == nil {
			continue
		}
		// a junction of the same kind inside another reads the same without its parentheses
		if inner, ok := n.(junctionNode); ok && inner.kind == j.kind {
			kept = append(kept, inner.members...)
			continue
		}
		kept = append(kept, n)
	}
	switch len(kept) {
	case 0:
		return nil, nil
	case 1:
		return kept[0], nil
	}
	return junctionNode{kind: j.kind, members: kept}, nil
}

func (n junctionNode) render(r *renderer) string {
	parts := make([]string, len(n.members))
	for i, m := range n.members {
		s := m.render(r)
		if inner, ok := m.(junctionNode); ok && inner.kind != n.kind {
			s = "(" + s + ")"
		}
		parts[i] = s
	}
	return strings.Join(parts, " "+n.kind+" ")
}

type notCond struct{ inner Cond }

// Not negates a condition: not (<c>).
func Not(c Cond) Cond { return notCond{c} }

type notNode struct{ inner node }

func (c notCond) simplify() (node, *QueryError) {
	if c.inner == nil {
		return nil, nil
	}
	n, err := c.inner.simplify()
	if err != nil || n == nil {
		return nil, err
	}
	return notNode{n}, nil
}

func (n notNode) render(r *renderer) string { return "not (" + n.inner.render(r) + ")" }
