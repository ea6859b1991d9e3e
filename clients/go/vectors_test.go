package fenecdb

// The builder vectors runner (conformance.md Part A). It replays any vectors file in the spec's format:
// text-only terminals from the unbound builder, endpoints from a client bound to a capture server
// (httptest) that records the one request and answers it as A.4 says, so the headers of A.6 are checked
// here too and no case is "checked-elsewhere".

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// minProjectVectors is the fewest cases the project's own builder.json may hold: A.9 asks for at least
// one case per rule and per operator, far more than this.
const minProjectVectors = 60

// repoRoot is found from this file's place in the tree, never from the working directory (A.7).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

type vectorTally struct{ ok, fail, elsewhere int }

type vectorCase struct {
	Name    string            `json:"name"`
	Steps   []json.RawMessage `json:"steps"`
	Text    *string           `json:"text"`
	Params  json.RawMessage   `json:"params"`
	Error   *string           `json:"error"`
	Headers map[string]string `json:"headers"`
}

// runVectorsFile runs every case of one file, printing a line per case and the part's tally, and answers
// the tally; a file that cannot be read, is not a list of cases, or holds fewer than min counts one
// failure more.
func runVectorsFile(out io.Writer, path string, min int) vectorTally {
	var t vectorTally
	data, err := os.ReadFile(path)
	var cases []vectorCase
	if err == nil {
		err = json.Unmarshal(data, &cases)
	}
	switch {
	case err != nil:
		fmt.Fprintf(out, "FAIL %s: a vectors file / %v\n", path, err)
		t.fail++
	case len(cases) < min:
		fmt.Fprintf(out, "FAIL %s: at least %d cases / %d\n", path, min, len(cases))
		t.fail++
	}
	capture := newCapture()
	defer capture.close()
	for _, c := range cases {
		if !picked(c.Name) {
			continue
		}
		if problem := runVector(c, capture); problem != "" {
			fmt.Fprintf(out, "FAIL %s: %s\n", c.Name, problem)
			t.fail++
		} else {
			fmt.Fprintf(out, "ok %s\n", c.Name)
			t.ok++
		}
	}
	fmt.Fprintf(out, "vectors %s: %d ok, %d FAIL, %d checked-elsewhere\n", path, t.ok, t.fail, t.elsewhere)
	return t
}

// ---- the capture server

type captured struct {
	body    []byte
	headers http.Header
}

type capture struct {
	srv  *httptest.Server
	mu   sync.Mutex
	sent []captured
}

func newCapture() *capture {
	c := &capture{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.sent = append(c.sent, captured{body, r.Header.Clone()})
		c.mu.Unlock()
		var req struct {
			Query string `json:"query"`
		}
		_ = json.Unmarshal(body, &req)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		q := req.Query
		switch {
		case strings.HasPrefix(q, "put "):
			io.WriteString(w, `{"affected":0}`)
		case strings.HasPrefix(q, "set ") || strings.HasPrefix(q, "del "):
			if strings.Contains(q, " returning ") {
				io.WriteString(w, `[]`)
			} else {
				io.WriteString(w, `{"affected":0}`)
			}
		case strings.HasSuffix(q, " count"):
			io.WriteString(w, `[{"count":0}]`)
		default:
			io.WriteString(w, `[]`)
		}
	}))
	return c
}

func (c *capture) take() []captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sent
	c.sent = nil
	return s
}

func (c *capture) close() { c.srv.Close() }

// ---- decoding a case (A.3)

type malformed string

func (m malformed) Error() string { return string(m) }

type step struct {
	op   string
	args []any
}

func decodeSteps(raws []json.RawMessage) ([]step, error) {
	steps := make([]step, 0, len(raws))
	for _, raw := range raws {
		v, err := decodeOrdered(raw)
		if err != nil {
			return nil, malformed("malformed case")
		}
		d, ok := v.(Doc)
		if !ok {
			return nil, malformed("malformed case")
		}
		var s step
		for i, k := range d.keys {
			switch k {
			case "op":
				s.op, _ = d.vals[i].(string)
			case "args":
				list, ok := d.vals[i].([]any)
				if !ok {
					return nil, malformed("malformed case")
				}
				s.args = list
			}
		}
		steps = append(steps, s)
	}
	return steps, nil
}

// special reads an object with exactly one key starting with $ (A.3).
func special(v any) (string, any, bool) {
	d, ok := v.(Doc)
	if !ok || len(d.keys) != 1 || !strings.HasPrefix(d.keys[0], "$") {
		return "", nil, false
	}
	return d.keys[0], d.vals[0], true
}

// decodeValue decodes a json value: maps stay Docs (order kept), encodings become their Go values.
func decodeValue(v any) (any, error) {
	if key, arg, ok := special(v); ok {
		switch key {
		case "$expr", "$raw":
			list, ok := arg.([]any)
			if !ok || len(list) == 0 {
				return nil, malformed("malformed case")
			}
			text, ok := list[0].(string)
			if !ok {
				return nil, malformed("malformed case")
			}
			params, err := decodeList(list[1:])
			if err != nil {
				return nil, err
			}
			if key == "$expr" {
				return Expr(text, params...), nil
			}
			return Raw(text, params...), nil
		case "$inc":
			n, err := decodeValue(arg)
			if err != nil {
				return nil, err
			}
			return Inc(n), nil
		case "$date":
			s, _ := arg.(string)
			// with a zone, or naive (taken as UTC, R14), or a date alone
			for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02"} {
				if t, err := time.Parse(layout, s); err == nil {
					return t, nil
				}
			}
			return nil, malformed("malformed case: $date " + s)
		case "$f32":
			list, ok := arg.([]any)
			if !ok {
				return nil, malformed("malformed case")
			}
			out := make([]float32, len(list))
			for i, e := range list {
				n, ok := e.(json.Number)
				if !ok {
					return nil, malformed("malformed case")
				}
				f, _ := n.Float64()
				out[i] = float32(f)
			}
			return out, nil
		case "$or", "$and", "$not":
			return decodeCond(v)
		}
		return nil, malformed("unknown encoding " + key)
	}
	switch x := v.(type) {
	case Doc:
		out := Doc{keys: x.keys, vals: make([]any, len(x.vals))}
		for i, e := range x.vals {
			d, err := decodeValue(e)
			if err != nil {
				return nil, err
			}
			out.vals[i] = d
		}
		return out, nil
	case []any:
		return decodeList(x)
	}
	return v, nil
}

func decodeList(list []any) ([]any, error) {
	out := make([]any, len(list))
	for i, e := range list {
		d, err := decodeValue(e)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// decodeCond decodes a condition: an object condition (Fields) or an encoded or/and/not/raw.
func decodeCond(v any) (Cond, error) {
	if key, arg, ok := special(v); ok {
		switch key {
		case "$or", "$and":
			list, ok := arg.([]any)
			if !ok {
				return nil, malformed("malformed case")
			}
			conds := make([]Cond, len(list))
			for i, e := range list {
				c, err := decodeCond(e)
				if err != nil {
					return nil, err
				}
				conds[i] = c
			}
			if key == "$or" {
				return Or(conds...), nil
			}
			return And(conds...), nil
		case "$not":
			c, err := decodeCond(arg)
			if err != nil {
				return nil, err
			}
			return Not(c), nil
		case "$raw":
			r, err := decodeValue(v)
			if err != nil {
				return nil, err
			}
			return r.(Cond), nil
		}
		if _, err := decodeValue(v); err != nil {
			return nil, err
		}
		return nil, malformed("malformed case: " + key + " is not a condition")
	}
	d, ok := v.(Doc)
	if !ok {
		return nil, malformed("malformed case: a condition is an object")
	}
	pairs := make([]any, 0, 2*len(d.keys))
	for i, k := range d.keys {
		spec, err := decodeSpec(d.vals[i])
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, k, spec)
	}
	return Fields(pairs...), nil
}

// decodeSpec decodes a field's spec: an object is its operator map (Ops), anything else a value.
func decodeSpec(v any) (any, error) {
	d, isDoc := v.(Doc)
	if _, _, enc := special(v); enc || !isDoc {
		return decodeValue(v)
	}
	pairs := make([]any, 0, 2*len(d.keys))
	for i, k := range d.keys {
		var val any
		var err error
		if k == "not" {
			val, err = decodeSpec(d.vals[i])
		} else {
			val, err = decodeValue(d.vals[i])
		}
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, k, val)
	}
	return Ops(pairs...), nil
}

// decodeOptions reads a write's option object; wait is answered apart, as it goes on the client.
func decodeOptions(v any) ([]WriteOption, *time.Duration, error) {
	d, ok := v.(Doc)
	if !ok {
		return nil, nil, malformed("malformed case: options are an object")
	}
	var opts []WriteOption
	var wait *time.Duration
	for i, k := range d.keys {
		val := d.vals[i]
		switch k {
		case "all":
			if b, _ := val.(bool); b {
				opts = append(opts, All())
			}
		case "require":
			if val != nil {
				opts = append(opts, requireOption(val))
			}
		case "returning":
			switch r := val.(type) {
			case bool:
				if r {
					opts = append(opts, Returning("*"))
				}
			case []any:
				fields := make([]string, len(r))
				for j, f := range r {
					s, ok := f.(string)
					if !ok {
						return nil, nil, malformed("malformed case: returning names are texts")
					}
					fields[j] = s
				}
				opts = append(opts, Returning(fields...))
			case nil:
			default:
				return nil, nil, malformed("malformed case: returning is true or a list")
			}
		case "wait":
			n, ok := val.(json.Number)
			ms, err := strconv.ParseInt(string(n), 10, 64)
			if !ok || err != nil {
				return nil, nil, malformed("malformed case: wait is a whole number of milliseconds")
			}
			w := time.Duration(ms) * time.Millisecond
			wait = &w
		default:
			return nil, nil, malformed("unsupported option " + k)
		}
	}
	return opts, wait, nil
}

// ---- running a case

var terminals = map[string]bool{
	"toFenecQL": true, "toInsert": true, "toUpdate": true, "toDelete": true,
	"rows": true, "first": true, "count": true, "insert": true, "update": true, "delete": true,
}

var endpoints = map[string]bool{"rows": true, "first": true, "count": true, "insert": true, "update": true, "delete": true}

// outcome is what a chain produced: a statement, or an error.
type outcome struct {
	text    string
	params  []byte // the parameter list as the wire encoder writes it
	headers http.Header
	err     error
}

func runVector(c vectorCase, capture *capture) string {
	steps, err := decodeSteps(c.Steps)
	if err != nil {
		return err.Error()
	}
	if len(steps) < 2 || steps[0].op != "from" || !terminals[steps[len(steps)-1].op] {
		return "malformed case"
	}
	for _, s := range steps[1 : len(steps)-1] {
		if terminals[s.op] || s.op == "from" {
			return "malformed case"
		}
	}
	got := play(steps, capture)
	var mal malformed
	if errors.As(got.err, &mal) {
		return mal.Error()
	}
	if c.Error != nil {
		var qe *QueryError
		switch {
		case got.err == nil:
			return fmt.Sprintf("error %q / text %q %s", *c.Error, got.text, got.params)
		case !errors.As(got.err, &qe):
			return fmt.Sprintf("error %q / a %T: %v", *c.Error, got.err, got.err)
		case qe.Message != *c.Error:
			return fmt.Sprintf("error %q / error %q", *c.Error, qe.Message)
		}
		return ""
	}
	if c.Text == nil {
		return "malformed case: neither text nor error"
	}
	if got.err != nil {
		return fmt.Sprintf("text %q / error %v", *c.Text, got.err)
	}
	if got.text != *c.Text {
		return fmt.Sprintf("text %q / text %q", *c.Text, got.text)
	}
	if problem := sameJSON(c.Params, got.params); problem != "" {
		return fmt.Sprintf("params %s / params %s (%s)", compact(c.Params), got.params, problem)
	}
	for name, want := range c.Headers {
		if got.headers == nil {
			return fmt.Sprintf("header %s: %s / a text-only terminal sends no request", name, want)
		}
		if have := got.headers.Get(name); have != want {
			return fmt.Sprintf("header %s: %q / %q", name, want, have)
		}
	}
	return ""
}

func compact(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// play runs the chain: the builder steps, then the terminal.
func play(steps []step, capture *capture) outcome {
	last := steps[len(steps)-1]
	collection, ok := argString(steps[0].args, 0)
	if !ok {
		return outcome{err: malformed("malformed case")}
	}
	var q *Query
	var db *Client
	if endpoints[last.op] {
		db = New(capture.srv.URL)
		// a wait goes on the client before From (A.6)
		if len(last.args) > 0 {
			if _, wait, err := decodeOptions(last.args[len(last.args)-1]); err == nil && wait != nil {
				db = db.Wait(*wait)
			}
		}
		q = db.From(collection)
	} else {
		q = From(collection)
	}
	for _, s := range steps[1 : len(steps)-1] {
		var err error
		if q, err = applyStep(q, s); err != nil {
			return outcome{err: err}
		}
	}
	return terminal(q, last, capture)
}

func argString(args []any, i int) (string, bool) {
	if i >= len(args) {
		return "", false
	}
	s, ok := args[i].(string)
	return s, ok
}

func applyStep(q *Query, s step) (*Query, error) {
	switch s.op {
	case "select":
		fields := make([]string, len(s.args))
		for i := range s.args {
			f, ok := argString(s.args, i)
			if !ok {
				return nil, malformed("malformed case")
			}
			fields[i] = f
		}
		return q.Select(fields...), nil
	case "where", "orWhere":
		var c Cond
		switch len(s.args) {
		case 1:
			cond, err := decodeCond(s.args[0])
			if err != nil {
				return nil, err
			}
			c = cond
		case 2:
			field, ok := argString(s.args, 0)
			if !ok {
				return nil, malformed("malformed case")
			}
			spec, err := decodeSpec(s.args[1])
			if err != nil {
				return nil, err
			}
			c = Fields(field, spec)
		case 3:
			field, ok1 := argString(s.args, 0)
			op, ok2 := argString(s.args, 1)
			if !ok1 || !ok2 {
				return nil, malformed("malformed case")
			}
			v, err := decodeValue(s.args[2])
			if err != nil {
				return nil, err
			}
			if s.op == "where" {
				return q.Where(field, op, v), nil
			}
			return q.OrWhere(field, op, v), nil
		default:
			return nil, malformed("malformed case")
		}
		if s.op == "where" {
			return q.WhereCond(c), nil
		}
		return q.OrWhereCond(c), nil
	case "order":
		field, ok := argString(s.args, 0)
		if !ok || len(s.args) > 2 {
			return nil, malformed("malformed case")
		}
		dir := "asc"
		if len(s.args) == 2 {
			if dir, ok = argString(s.args, 1); !ok {
				return nil, malformed("malformed case")
			}
		}
		return q.Order(field, dir), nil
	case "limit", "offset", "require":
		if len(s.args) != 1 {
			return nil, malformed("malformed case")
		}
		switch s.op {
		case "limit":
			return q.limitAny(s.args[0]), nil
		case "offset":
			return q.offsetAny(s.args[0]), nil
		}
		return q.requireAny(s.args[0]), nil
	}
	return nil, malformed("unsupported op " + s.op)
}

// docsArg decodes an insert's documents: an object is one document, a list several.
func docsArg(v any) (any, error) {
	d, err := decodeValue(v)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func terminal(q *Query, s step, capture *capture) outcome {
	var opts []WriteOption
	optionsAt := map[string]int{"toInsert": 1, "insert": 1, "toUpdate": 1, "update": 1, "toDelete": 0, "delete": 0}
	if i, ok := optionsAt[s.op]; ok && len(s.args) > i {
		o, _, err := decodeOptions(s.args[i])
		if err != nil {
			return outcome{err: err}
		}
		opts = o
	}
	var text string
	var params []any
	var err error
	switch s.op {
	case "toFenecQL":
		text, params, err = q.ToFenecQL()
	case "toInsert", "insert":
		if len(s.args) < 1 {
			return outcome{err: malformed("malformed case")}
		}
		docs, derr := docsArg(s.args[0])
		if derr != nil {
			return outcome{err: derr}
		}
		args := []any{docs}
		for _, o := range opts {
			args = append(args, o)
		}
		if s.op == "insert" {
			return sent(capture, func() error { _, err := q.Insert(context.Background(), args...); return err })
		}
		text, params, err = q.ToInsert(args...)
	case "toUpdate", "update":
		if len(s.args) < 1 {
			return outcome{err: malformed("malformed case")}
		}
		patch, derr := decodeValue(s.args[0])
		if derr != nil {
			return outcome{err: derr}
		}
		if s.op == "update" {
			return sent(capture, func() error { _, err := q.Update(context.Background(), patch, opts...); return err })
		}
		text, params, err = q.ToUpdate(patch, opts...)
	case "toDelete":
		text, params, err = q.ToDelete(opts...)
	case "delete":
		return sent(capture, func() error { _, err := q.Delete(context.Background(), opts...); return err })
	case "rows":
		return sent(capture, func() error { _, err := q.Rows(context.Background()); return err })
	case "first":
		return sent(capture, func() error { _, err := q.First(context.Background()); return err })
	case "count":
		return sent(capture, func() error { _, err := q.Count(context.Background()); return err })
	}
	if err != nil {
		return outcome{err: err}
	}
	var b bytes.Buffer
	if err := encodeValue(&b, params); err != nil {
		return outcome{err: err}
	}
	return outcome{text: text, params: b.Bytes()}
}

// sent runs an endpoint against the capture and reads back the one statement it sent.
func sent(capture *capture, call func() error) outcome {
	capture.take()
	err := call()
	reqs := capture.take()
	if err != nil {
		if len(reqs) > 0 {
			return outcome{err: fmt.Errorf("refused (%v) after sending %d requests", err, len(reqs))}
		}
		return outcome{err: err}
	}
	if len(reqs) != 1 {
		return outcome{err: fmt.Errorf("sent %d requests, not one", len(reqs))}
	}
	var body struct {
		Query  string          `json:"query"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(reqs[0].body, &body); err != nil {
		return outcome{err: fmt.Errorf("the request body is not JSON: %v", err)}
	}
	return outcome{text: body.Query, params: body.Params, headers: reqs[0].headers}
}

// ---- comparing parameters (A.5)

// sameJSON compares two JSON texts: integers and floats apart, lists in order, maps as sets of pairs.
func sameJSON(want, got []byte) string {
	w, err := decodeOrdered(want)
	if err != nil {
		return "the expected params are not JSON"
	}
	g, err := decodeOrdered(got)
	if err != nil {
		return "the sent params are not JSON"
	}
	return sameValue(w, g, "params")
}

func isInteger(n json.Number) bool { return !strings.ContainsAny(string(n), ".eE") }

func sameValue(w, g any, at string) string {
	switch wv := w.(type) {
	case json.Number:
		gv, ok := g.(json.Number)
		if !ok {
			return at + " is not a number"
		}
		if isInteger(wv) != isInteger(gv) {
			return at + " is not of the same kind of number"
		}
		if isInteger(wv) {
			if string(wv) != string(gv) {
				wi, e1 := strconv.ParseInt(string(wv), 10, 64)
				gi, e2 := strconv.ParseInt(string(gv), 10, 64)
				if e1 != nil || e2 != nil || wi != gi {
					return at + " differs"
				}
			}
			return ""
		}
		wf, _ := wv.Float64()
		gf, _ := gv.Float64()
		if wf != gf {
			return at + " differs"
		}
		return ""
	case []any:
		gv, ok := g.([]any)
		if !ok || len(gv) != len(wv) {
			return at + " is not a list of the same length"
		}
		for i := range wv {
			if p := sameValue(wv[i], gv[i], fmt.Sprintf("%s[%d]", at, i)); p != "" {
				return p
			}
		}
		return ""
	case Doc:
		gv, ok := g.(Doc)
		if !ok || len(gv.keys) != len(wv.keys) {
			return at + " is not a map of the same size"
		}
		for i, k := range wv.keys {
			j := indexOf(gv.keys, k)
			if j < 0 {
				return at + "." + k + " is missing"
			}
			if p := sameValue(wv.vals[i], gv.vals[j], at+"."+k); p != "" {
				return p
			}
		}
		return ""
	}
	if !reflect.DeepEqual(w, g) {
		return at + " differs"
	}
	return ""
}

func indexOf(list []string, s string) int {
	for i, e := range list {
		if e == s {
			return i
		}
	}
	return -1
}

// ---- the tests

// TestVectorsOwn runs the package's own vectors: every example of the text rules, written by hand.
func TestVectorsOwn(t *testing.T) {
	var out bytes.Buffer
	tally := runVectorsFile(&out, filepath.Join("testdata", "builder.json"), 100)
	if tally.fail > 0 || tally.ok == 0 {
		t.Fatalf("own vectors:\n%s", failLines(out.String()))
	}
}

func failLines(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "ok ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
