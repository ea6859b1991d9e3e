package fenecdb

// The builder: an immutable chain that writes one FenecQL statement and its parameters (clients.md §5).
//
// Every step hands back a new *Query and leaves the old one untouched, so one base query may be shared by
// many goroutines. A refused step keeps its refusal on the chain (the first one wins) and whatever ends
// the chain returns it as a *QueryError, before any request is made.
//
// Shapes (R1):
//
//	get <c>[ select <list>][ where <cond>][ order <keys>][ limit <n>][ offset <n>][ require <n>][ count]
//	put <c> <doc>|[<doc>, ...][ require <n>]
//	set <c> <doc>[ where <cond>][ order <keys>][ limit <n>][ returning <list>|*][ require <n>]
//	del <c>[ where <cond>][ order <keys>][ limit <n>][ returning <list>|*][ require <n>]

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// maxLiteral is the largest limit, offset or require: 2^53-1, exact in every SDK's numbers.
const maxLiteral = 1<<53 - 1

// Query is one chain of the builder. Start it with Client.From, or with From for text only.
type Query struct {
	db         *Client
	collection string
	err        *QueryError
	cond       Cond // nil: no condition yet
	conditions bool // some where step was given (even one that added nothing)
	sel        []string
	hasSelect  bool
	order      []string // "field dir"
	limit      int64
	hasLimit   bool
	offset     int64
	hasOffset  bool
	require    int64
	hasRequire bool
}

// From starts a query that is not bound to a client: its text-only endings (ToFenecQL, ToInsert,
// ToUpdate, ToDelete) work; its endpoints refuse.
func From(collection string) *Query {
	q := &Query{collection: collection}
	q.err = checkCollection(collection)
	return q
}

func (q *Query) step(f func(n *Query) *QueryError) *Query {
	n := *q
	if n.err == nil {
		n.err = f(&n)
	}
	return &n
}

// Where adds field op value, joined with and. op is a symbol or its word (R5); = nil is `is null`,
// != nil is `is not null`; in takes a slice.
func (q *Query) Where(field, op string, value any) *Query { return q.WhereCond(Cmp(field, op, value)) }

// WhereCond adds a condition made by Fields, Cmp, Raw, Or, And or Not, joined with and.
func (q *Query) WhereCond(c Cond) *Query {
	return q.step(func(n *Query) *QueryError {
		if _, err := condCheck(c); err != nil {
			return err
		}
		if n.cond == nil {
			n.cond = c
		} else {
			n.cond = And(n.cond, c)
		}
		return nil
	})
}

// OrWhere joins everything conditioned so far with or to field op value (R9).
func (q *Query) OrWhere(field, op string, value any) *Query {
	return q.OrWhereCond(Cmp(field, op, value))
}

// OrWhereCond joins everything conditioned so far with or to c. On a query with no condition it is
// WhereCond.
func (q *Query) OrWhereCond(c Cond) *Query {
	return q.step(func(n *Query) *QueryError {
		if _, err := condCheck(c); err != nil {
			return err
		}
		if n.cond == nil {
			n.cond = c
		} else {
			n.cond = Or(n.cond, c)
		}
		return nil
	})
}

func condCheck(c Cond) (node, *QueryError) {
	if c == nil {
		return nil, nil
	}
	return c.simplify()
}

// Select names the fields a read answers (R4). No field, or "*" among them, answers every field. A later
// Select replaces an earlier one.
func (q *Query) Select(fields ...string) *Query {
	return q.step(func(n *Query) *QueryError {
		for _, f := range fields {
			if f == "*" {
				n.sel, n.hasSelect = nil, false
				return nil
			}
		}
		for _, f := range fields {
			if err := checkField(f); err != nil {
				return err
			}
		}
		n.sel = append([]string(nil), fields...)
		n.hasSelect = len(fields) > 0
		return nil
	})
}

// Order adds a sort key; dir is "asc" or "desc", in any case (R11).
func (q *Query) Order(field, dir string) *Query {
	return q.step(func(n *Query) *QueryError {
		if err := checkField(field); err != nil {
			return err
		}
		d := strings.ToLower(dir)
		if d != "asc" && d != "desc" {
			return refuse("order direction must be 'asc' or 'desc': %s", dir)
		}
		n.order = append(n.order[:len(n.order):len(n.order)], field+" "+d)
		return nil
	})
}

// Limit bounds the rows (R12): a whole number from 0 to 2^53-1. A later Limit replaces an earlier one.
func (q *Query) Limit(n int64) *Query { return q.limitAny(n) }

// Offset skips rows (R12); offset 0 is left out of the text.
func (q *Query) Offset(n int64) *Query { return q.offsetAny(n) }

// Require makes a read refuse (412) unless it answers exactly n rows (R13). A write takes its require
// as an option: Update(ctx, patch, Require(1)).
func (q *Query) Require(n int64) *Query { return q.requireAny(n) }

// The *Any forms take the value as it came (a conformance vector may hold 1.5 or "5") and refuse what is
// not a whole number in range, quoting it.
func (q *Query) limitAny(v any) *Query {
	return q.step(func(n *Query) *QueryError {
		i, ok := literalCount(v)
		if !ok {
			return refuse("limit must be a non-negative integer: %s", plainText(v))
		}
		n.limit, n.hasLimit = i, true
		return nil
	})
}

func (q *Query) offsetAny(v any) *Query {
	return q.step(func(n *Query) *QueryError {
		i, ok := literalCount(v)
		if !ok {
			return refuse("offset must be a non-negative integer: %s", plainText(v))
		}
		n.offset, n.hasOffset = i, true
		return nil
	})
}

func (q *Query) requireAny(v any) *Query {
	return q.step(func(n *Query) *QueryError {
		i, ok := literalCount(v)
		if !ok {
			return refuse("require takes a count of rows, a whole number from 0 (got %s)", plainText(v))
		}
		n.require, n.hasRequire = i, true
		return nil
	})
}

// literalCount reads a whole number from 0 to 2^53-1.
func literalCount(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		i, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil {
			f, ferr := strconv.ParseFloat(string(x), 64)
			if ferr != nil || f != math.Trunc(f) {
				return 0, false
			}
			return literalCount(f)
		}
		return literalCount(i)
	case float64:
		if x != math.Trunc(x) || x < 0 || x > maxLiteral {
			return 0, false
		}
		return int64(x), true
	case float32:
		return literalCount(float64(x))
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i := rv.Int()
		return i, i >= 0 && i <= maxLiteral
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u := rv.Uint()
		return int64(u), u <= maxLiteral
	}
	return 0, false
}

// plainText writes a refused count the way the other SDKs quote it: numbers and texts bare.
func plainText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return string(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case nil:
		return "null"
	}
	return fmt.Sprint(v)
}

// ---- rendering

// renderer numbers the parameters of one statement in the order their placeholders stand (R2).
type renderer struct{ params []any }

func (r *renderer) bind(v any) string {
	r.params = append(r.params, v)
	return "$" + strconv.Itoa(len(r.params))
}

// value writes a value: a parameter, or the text of an Expr.
func (r *renderer) value(v any) string {
	if c, ok := v.(Computed); ok && !c.inc {
		return substitute(c.text, c.params, r.bind)
	}
	return r.bind(v)
}

func (q *Query) whereText(r *renderer) (string, *QueryError) {
	n, err := condCheck(q.cond)
	if err != nil || n == nil {
		return "", err
	}
	return " where " + n.render(r), nil
}

func (q *Query) orderLimitText() string {
	var b strings.Builder
	if len(q.order) > 0 {
		b.WriteString(" order " + strings.Join(q.order, ", "))
	}
	if q.hasLimit {
		b.WriteString(" limit " + strconv.FormatInt(q.limit, 10))
	}
	return b.String()
}

// ToFenecQL writes the read: its text and parameters.
func (q *Query) ToFenecQL() (string, []any, error) { return q.readText(false, false) }

func (q *Query) readText(first, count bool) (string, []any, error) {
	if q.err != nil {
		return "", nil, q.err
	}
	if count {
		for _, c := range []struct {
			held bool
			name string
		}{{len(q.order) > 0, "order"}, {q.hasLimit, "limit"}, {q.hasOffset, "offset"}, {q.hasSelect, "select"}, {q.hasRequire, "require"}} {
			if c.held {
				return "", nil, refuse("count cannot be used with `%s`", c.name)
			}
		}
	}
	r := &renderer{params: []any{}}
	var b strings.Builder
	b.WriteString("get " + q.collection)
	if q.hasSelect {
		b.WriteString(" select " + strings.Join(q.sel, ", "))
	}
	where, err := q.whereText(r)
	if err != nil {
		return "", nil, err
	}
	b.WriteString(where)
	if len(q.order) > 0 {
		b.WriteString(" order " + strings.Join(q.order, ", "))
	}
	switch {
	case first:
		b.WriteString(" limit 1")
	case q.hasLimit:
		b.WriteString(" limit " + strconv.FormatInt(q.limit, 10))
	}
	if q.hasOffset && q.offset > 0 {
		b.WriteString(" offset " + strconv.FormatInt(q.offset, 10))
	}
	if q.hasRequire {
		b.WriteString(" require " + strconv.FormatInt(q.require, 10))
	}
	if count {
		b.WriteString(" count")
	}
	return b.String(), r.params, nil
}

// ---- write options

// WriteOption is an option of Insert, Update and Delete (and their To... twins): All, Require, Returning.
type WriteOption interface{ apply(*writeOptions) }

type writeOptions struct {
	all          bool
	require      any
	hasRequire   bool
	returning    []string
	hasReturning bool
}

type optionFunc func(*writeOptions)

func (f optionFunc) apply(o *writeOptions) { f(o) }

// All lets an update or a delete with no condition cover the whole collection (R17).
func All() WriteOption { return optionFunc(func(o *writeOptions) { o.all = true }) }

// Require makes the write refuse (412), and land nothing, unless it writes exactly n rows (R20).
func Require(n int64) WriteOption { return requireOption(n) }

func requireOption(v any) WriteOption {
	return optionFunc(func(o *writeOptions) { o.require, o.hasRequire = v, true })
}

// Returning makes an update or a delete answer its rows, as written (update) or as they were (delete),
// in Result.Rows: Returning("*") for every field, or the fields and paths to answer (R19).
func Returning(fields ...string) WriteOption {
	return optionFunc(func(o *writeOptions) {
		o.returning, o.hasReturning = append([]string{}, fields...), true
	})
}

func collectOptions(opts []WriteOption) writeOptions {
	var o writeOptions
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	return o
}

// writeChecks refuses the clauses a write cannot take (R13, R18).
func (q *Query) writeChecks(verb string) *QueryError {
	if q.err != nil {
		return q.err
	}
	if q.hasRequire {
		return refuse("%s takes require as its option: %s(..., { require: n })", verb, verb)
	}
	clauses := []struct {
		held bool
		name string
	}{{len(q.order) > 0, "order"}, {q.hasLimit, "limit"}, {q.hasOffset, "offset"}, {q.hasSelect, "select"}}
	for _, c := range clauses {
		if !c.held {
			continue
		}
		if verb == "insert" || c.name == "offset" || c.name == "select" {
			return refuse("%s cannot be used with `%s`", verb, c.name)
		}
	}
	if n, _ := condCheck(q.cond); verb == "insert" && n != nil {
		return refuse("insert cannot be used with `where`")
	}
	return nil
}

func (o writeOptions) tailText(verb string) (string, *QueryError) {
	var b strings.Builder
	if o.hasReturning {
		if verb == "insert" {
			return "", refuse("insert cannot be used with `returning`")
		}
		if len(o.returning) == 0 {
			return "", refuse("returning names the fields it answers, or * for every one")
		}
		star := false
		for _, f := range o.returning {
			star = star || f == "*"
		}
		if star && len(o.returning) > 1 {
			return "", refuse("returning * answers every field: it takes no other")
		}
		if star {
			b.WriteString(" returning *")
		} else {
			for _, f := range o.returning {
				if err := checkField(f); err != nil {
					return "", err
				}
			}
			b.WriteString(" returning " + strings.Join(o.returning, ", "))
		}
	}
	if o.hasRequire {
		n, ok := literalCount(o.require)
		if !ok {
			return "", refuse("require takes a count of rows, a whole number from 0 (got %s)", plainText(o.require))
		}
		b.WriteString(" require " + strconv.FormatInt(n, 10))
	}
	return b.String(), nil
}

// docText writes one document (R15, R16). inUpdate allows Inc.
func docText(r *renderer, d Doc, inUpdate bool) (string, *QueryError) {
	if d.err != nil {
		return "", d.err
	}
	if len(d.keys) == 0 {
		return "", refuse("cannot write an empty document")
	}
	parts := make([]string, len(d.keys))
	for i, k := range d.keys {
		if err := checkField(k); err != nil {
			return "", err
		}
		v := d.vals[i]
		var text string
		switch c := v.(type) {
		case Computed:
			if c.err != nil {
				return "", c.err
			}
			if c.inc {
				if !inUpdate {
					return "", refuse("inc() reads the row it changes: use it in update (field: %s)", k)
				}
				text = "coalesce(" + k + ", 0) + " + r.bind(c.by)
			} else {
				text = substitute(c.text, c.params, r.bind)
			}
		default:
			text = r.bind(v)
		}
		parts[i] = k + ": " + text
	}
	return "{" + strings.Join(parts, ", ") + "}", nil
}

// ToInsert writes the put of one document or several (R15): ToInsert(doc), ToInsert(d1, d2),
// ToInsert([]fenecdb.Doc{...}), with Require(n) among the arguments.
func (q *Query) ToInsert(docsAndOptions ...any) (string, []any, error) {
	text, params, _, err := q.insertText(docsAndOptions)
	if err != nil {
		return "", nil, err
	}
	return text, params, nil
}

func splitArgs(args []any) (docs []any, opts []WriteOption) {
	for _, a := range args {
		if o, ok := a.(WriteOption); ok {
			opts = append(opts, o)
			continue
		}
		docs = append(docs, a)
	}
	return docs, opts
}

// insertText answers the text, its parameters and the number of documents.
func (q *Query) insertText(args []any) (string, []any, int, error) {
	if err := q.writeChecks("insert"); err != nil {
		return "", nil, 0, err
	}
	docs, opts := splitArgs(args)
	o := collectOptions(opts)
	bracket := len(docs) != 1
	if len(docs) == 1 {
		if _, isDoc := docs[0].(Doc); !isDoc {
			if list, ok := listOf(docs[0]); ok {
				docs, bracket = list, len(list) != 1
			}
		}
	}
	if len(docs) == 0 {
		return "", nil, 0, refuse("cannot write an empty document list")
	}
	r := &renderer{params: []any{}}
	texts := make([]string, len(docs))
	for i, raw := range docs {
		d, err := toDoc(raw)
		if err != nil {
			return "", nil, 0, err
		}
		if texts[i], err = docText(r, d, false); err != nil {
			return "", nil, 0, err
		}
	}
	body := strings.Join(texts, ", ")
	if bracket {
		body = "[" + body + "]"
	}
	tail, err := o.tailText("insert")
	if err != nil {
		return "", nil, 0, err
	}
	return "put " + q.collection + " " + body + tail, r.params, len(docs), nil
}

// ToUpdate writes the set of patch over the rows the chain picks (R16–R21).
func (q *Query) ToUpdate(patch any, opts ...WriteOption) (string, []any, error) {
	return q.updateText(patch, collectOptions(opts))
}

func (q *Query) unfiltered(verb string, o writeOptions) *QueryError {
	n, err := condCheck(q.cond)
	if err != nil {
		return err
	}
	if n == nil && !o.all && !q.hasLimit {
		return refuse("an unfiltered %s covers the whole collection; if you mean it, %s({ all: true })", verb, verb)
	}
	return nil
}

func (q *Query) updateText(patch any, o writeOptions) (string, []any, error) {
	if err := q.writeChecks("update"); err != nil {
		return "", nil, err
	}
	if err := q.unfiltered("update", o); err != nil {
		return "", nil, err
	}
	d, qerr := toDoc(patch)
	if qerr != nil {
		return "", nil, qerr
	}
	r := &renderer{params: []any{}}
	doc, qerr := docText(r, d, true)
	if qerr != nil {
		return "", nil, qerr
	}
	where, qerr := q.whereText(r)
	if qerr != nil {
		return "", nil, qerr
	}
	tail, qerr := o.tailText("update")
	if qerr != nil {
		return "", nil, qerr
	}
	return "set " + q.collection + " " + doc + where + q.orderLimitText() + tail, r.params, nil
}

// ToDelete writes the del of the rows the chain picks (R17–R21).
func (q *Query) ToDelete(opts ...WriteOption) (string, []any, error) {
	return q.deleteText(collectOptions(opts))
}

func (q *Query) deleteText(o writeOptions) (string, []any, error) {
	if err := q.writeChecks("delete"); err != nil {
		return "", nil, err
	}
	if err := q.unfiltered("delete", o); err != nil {
		return "", nil, err
	}
	r := &renderer{params: []any{}}
	where, qerr := q.whereText(r)
	if qerr != nil {
		return "", nil, qerr
	}
	tail, qerr := o.tailText("delete")
	if qerr != nil {
		return "", nil, qerr
	}
	return "del " + q.collection + where + q.orderLimitText() + tail, r.params, nil
}
