package fenecdb

// The worker contract, checked: conformance/worker-contract.json names every option, its type and its
// default, the events and their fields, the methods and what was removed, for every SDK. This file reads
// it and checks the Worker against it by reflection, so an option renamed, missing, added or typed
// otherwise (or a default changed on one side) fails here.

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

type workerContract struct {
	Languages   []string `json:"languages"`
	Constructor map[string]json.RawMessage
	Options     []struct {
		Option    string            `json:"option"`
		Type      string            `json:"type"`
		Default   any               `json:"default"`
		DefaultMS *int64            `json:"default_ms"`
		Names     map[string]string `json:"names"`
		Off       map[string]string `json:"off"`
		Unset     map[string]string `json:"unset"`
		Sigs      map[string]string `json:"signatures"`
	} `json:"options"`
	Deprecated  map[string]json.RawMessage   `json:"deprecated"`
	Removed     map[string]json.RawMessage   `json:"removed"`
	Methods     map[string]map[string]string `json:"-"`
	MethodNames map[string][]string          `json:"method_names"`
	Events      struct {
		Types     map[string]struct{ Fields []string } `json:"types"`
		TypeNames map[string]map[string]string         `json:"type_names"`
		Fields    map[string]map[string]any            `json:"fields"`
	} `json:"events"`
	StopBoundMarginMS int64 `json:"stop_bound_margin_ms"`
}

func loadContract(t *testing.T) workerContract {
	t.Helper()
	c, err := readContract()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readContract() (workerContract, error) {
	var c workerContract
	data, err := os.ReadFile(filepath.Join(repoRoot(), "conformance", "worker-contract.json"))
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, err
	}
	var raw struct {
		Methods map[string]json.RawMessage `json:"methods"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return c, err
	}
	c.Methods = map[string]map[string]string{}
	for k, v := range raw.Methods {
		var m map[string]string
		if json.Unmarshal(v, &m) == nil {
			c.Methods[k] = m
		}
	}
	if !slices.Contains(c.Languages, "go") || len(c.Options) == 0 {
		return c, fmt.Errorf("the contract names no options for go: %v", c.Languages)
	}
	return c, nil
}

// goName is an option's, field's or event's Go name in the contract; "names" wins over the plain key.
func goName(m map[string]any) string {
	if names, ok := m["names"].(map[string]any); ok {
		return names["go"].(string)
	}
	s, _ := m["go"].(string)
	return s
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	workerType   = reflect.TypeOf(Worker{})
	eventType    = reflect.TypeOf(Event{})
)

// TestWorkerOptionsFollowTheContract: the Worker's exported fields are exactly DB, Queue, the contract's
// options and its deprecated names, each of the type the option's type names.
func TestWorkerOptionsFollowTheContract(t *testing.T) {
	c := loadContract(t)
	want := map[string]string{"DB": "constructor", "Queue": "constructor"}
	for _, o := range c.Options {
		name := o.Names["go"]
		if name == "" {
			t.Errorf("option %q has no Go name", o.Option)
			continue
		}
		want[name] = o.Option
		f, ok := workerType.FieldByName(name)
		if !ok {
			t.Errorf("option %q: Worker has no field %s", o.Option, name)
			continue
		}
		var wantType reflect.Type
		switch {
		case o.Type == "duration":
			wantType = durationType
		case o.Type == "boolean":
			wantType = reflect.TypeOf(false)
		case o.Type == "text":
			wantType = reflect.TypeOf("")
		case o.Type == "count":
			if k := f.Type.Kind(); k != reflect.Int && k != reflect.Int64 {
				t.Errorf("option %q: %s is a %s, not a whole number", o.Option, name, f.Type)
			}
		case strings.HasPrefix(o.Type, "function: event"):
			wantType = reflect.TypeOf(func(Event) {})
		case o.Sigs["go"] != "":
			wantType = parseFuncType(t, o.Sigs["go"])
		default:
			t.Errorf("option %q: no Go type for %q", o.Option, o.Type)
		}
		if wantType != nil && f.Type != wantType {
			t.Errorf("option %q: %s is a %s, the contract says %s", o.Option, name, f.Type, wantType)
		}
	}
	var deprecated map[string]string
	if err := json.Unmarshal(c.Deprecated["go"], &deprecated); err != nil {
		t.Fatal(err)
	}
	for name, of := range deprecated {
		want[name] = "deprecated: " + of
	}
	for i := 0; i < workerType.NumField(); i++ {
		f := workerType.Field(i)
		if f.IsExported() && want[f.Name] == "" {
			t.Errorf("Worker has a field %s that the contract does not name", f.Name)
		}
	}
	for _, k := range []string{"DB", "Queue"} {
		if _, ok := workerType.FieldByName(k); !ok || !strings.Contains(string(c.Constructor["go"]), k+":") {
			t.Errorf("the constructor's field %s: in Worker %v, in the contract %s", k, ok, c.Constructor["go"])
		}
	}
	var removed []string
	if err := json.Unmarshal(c.Removed["go"], &removed); err != nil {
		t.Fatal(err)
	}
	for _, r := range removed {
		// "Name: ..." is a field that must be gone; "Name as a T: ..." a field that must not be a T
		shape, _, _ := strings.Cut(r, ":")
		name, asType, typed := strings.Cut(shape, " as a ")
		f, ok := workerType.FieldByName(name)
		if ok && (!typed || f.Type.String() == asType) {
			t.Errorf("Worker still has the removed %q", r)
		}
	}
}

// parseFuncType turns the contract's "func(attempts int64) time.Duration" into the reflect type.
func parseFuncType(t *testing.T, sig string) reflect.Type {
	t.Helper()
	known := map[string]reflect.Type{"int64": reflect.TypeOf(int64(0)), "int": reflect.TypeOf(0),
		"time.Duration": durationType, "error": reflect.TypeOf((*error)(nil)).Elem()}
	m := regexp.MustCompile(`^func\((.*)\) (\S+)$`).FindStringSubmatch(sig)
	if m == nil {
		t.Fatalf("a signature the test cannot read: %q", sig)
	}
	var in []reflect.Type
	for _, p := range strings.Split(m[1], ",") {
		fields := strings.Fields(p)
		in = append(in, known[fields[len(fields)-1]])
	}
	return reflect.FuncOf(in, []reflect.Type{known[m[2]]}, false)
}

// TestWorkerDefaultsFollowTheContract: a zero Worker takes every default the contract gives, and the
// heartbeat's off switch turns it off. An option with no check here fails the test.
func TestWorkerDefaultsFollowTheContract(t *testing.T) {
	c := loadContract(t)
	w := &Worker{}
	w.defaults()
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	effective := map[string]func() any{
		"batch":           func() any { return w.batch() },
		"concurrency":     func() any { return int64(w.concurrency()) },
		"lease":           func() any { return ms(w.lease()) },
		"wait":            func() any { return ms(w.wait()) },
		"max attempts":    func() any { return w.maxAttempts() },
		"drain timeout":   func() any { return ms(w.drainTimeout()) },
		"request timeout": func() any { return ms(w.requestTimeout()) },
		"retry min":       func() any { return ms(w.retryMin()) },
		"retry max":       func() any { return ms(w.retryMax()) },
		"keep done":       func() any { return w.KeepDone },
	}
	described := map[string]func() bool{ // defaults given in words
		"name":      func() bool { return regexp.MustCompile(`^w-[0-9a-f]{8}$`).MatchString(w.name) },
		"heartbeat": func() bool { return w.heartbeat() == w.lease()/3 },
		"backoff":   func() bool { return w.backoff(1) == time.Second && w.backoff(3) == 9*time.Second },
		"on event":  func() bool { return w.OnEvent == nil },
	}
	for _, o := range c.Options {
		var want any
		switch {
		case o.DefaultMS != nil:
			want = *o.DefaultMS
		case o.Default != nil:
			want = o.Default
		}
		if get, ok := effective[o.Option]; ok {
			got := get()
			if n, isNum := want.(float64); isNum {
				want = int64(n)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("option %q defaults to %v, the contract says %v", o.Option, got, want)
			}
			continue
		}
		if check, ok := described[o.Option]; ok {
			if !check() {
				t.Errorf("option %q does not default to %v", o.Option, want)
			}
			continue
		}
		t.Errorf("option %q: no default check here", o.Option)
	}
	if off := (&Worker{Heartbeat: -time.Nanosecond}).heartbeat(); off > 0 || !strings.Contains(c.optionOff("heartbeat"), "negative") {
		t.Errorf("a negative Heartbeat is not off: %s", off)
	}
	if got := (&Worker{Concurrency: 50, Batch: 3}).concurrency(); got != 3 {
		t.Errorf("concurrency above batch: %d", got)
	}
	if stopGrace.Milliseconds() != c.StopBoundMarginMS {
		t.Errorf("the stop's grace is %s, the contract's margin %d ms", stopGrace, c.StopBoundMarginMS)
	}
}

func (c workerContract) optionOff(option string) string {
	for _, o := range c.Options {
		if o.Option == option {
			return o.Off["go"]
		}
	}
	return ""
}

// TestWorkerMethodsFollowTheContract: Run, Shutdown, Close and Enqueue, with the contract's shapes.
func TestWorkerMethodsFollowTheContract(t *testing.T) {
	c := loadContract(t)
	ptr := reflect.TypeOf(&Worker{})
	for _, name := range c.MethodNames["go"] {
		m, ok := ptr.MethodByName(name)
		if !ok {
			t.Errorf("Worker has no method %s", name)
			continue
		}
		var shape string
		for _, per := range c.Methods {
			if s, _, _ := strings.Cut(per["go"], "("); s == name {
				shape = per["go"]
			}
		}
		// "Enqueue(ctx, payload, delay) (int64, error)": the count of parameters and the results
		sm := regexp.MustCompile(`^\w+\(([^)]*)\)\s*(\([^)]*\)|\w*)`).FindStringSubmatch(shape)
		if sm == nil {
			t.Errorf("the contract gives %s no shape: %q", name, shape)
			continue
		}
		params := 0
		if strings.TrimSpace(sm[1]) != "" {
			params = len(strings.Split(sm[1], ","))
		}
		var outs []string
		for i := 0; i < m.Type.NumOut(); i++ {
			outs = append(outs, strings.TrimPrefix(m.Type.Out(i).String(), "fenecdb."))
		}
		results := strings.Join(outs, ", ")
		if len(outs) > 1 {
			results = "(" + results + ")"
		}
		if m.Type.NumIn()-1 != params || results != sm[2] {
			t.Errorf("%s is %s, the contract says %s", name, m.Type, shape)
		}
		if params > 0 && m.Type.In(1) != reflect.TypeOf((*context.Context)(nil)).Elem() {
			t.Errorf("%s does not take a ctx first", name)
		}
	}
}

// TestWorkerEventsFollowTheContract: Event's fields are the contract's, error a text and delay a
// duration; the event types are the contract's, and the code sets Type only from them.
func TestWorkerEventsFollowTheContract(t *testing.T) {
	c := loadContract(t)
	want := map[string]bool{}
	for key, f := range c.Events.Fields {
		name := goName(f)
		want[name] = true
		sf, ok := eventType.FieldByName(name)
		if !ok {
			t.Errorf("event field %q: Event has no %s", key, name)
			continue
		}
		switch key {
		case "error", "type", "worker", "owner", "call", "url":
			if sf.Type.Kind() != reflect.String {
				t.Errorf("Event.%s is a %s, not a text", name, sf.Type)
			}
		case "delay":
			if sf.Type != durationType {
				t.Errorf("Event.%s is a %s, not a time.Duration", name, sf.Type)
			}
		}
	}
	for i := 0; i < eventType.NumField(); i++ {
		if f := eventType.Field(i); !want[f.Name] {
			t.Errorf("Event has a field %s the contract does not name", f.Name)
		}
	}
	var types []string
	for kind := range c.Events.Types {
		types = append(types, c.Events.TypeNames["go"][kind])
	}
	sort.Strings(types)
	got := slices.Clone(eventTypes)
	sort.Strings(got)
	if !slices.Equal(got, types) {
		t.Errorf("event types %v, the contract's %v", got, types)
	}
	// every Event literal's Type is one of the named constants, never a string of its own
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]bool{"evClaimed": true, "evStart": true, "evDone": true, "evFailed": true, "evDead": true,
		"evReleased": true, "evLost": true, "evRetry": true, "evPrimary": true, "evStopped": true, "kind": true}
	for _, f := range pkgs["fenecdb"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			var key, value ast.Expr
			switch x := n.(type) {
			case *ast.KeyValueExpr:
				key, value = x.Key, x.Value
			case *ast.AssignStmt:
				if len(x.Lhs) == 1 && len(x.Rhs) == 1 {
					key, value = x.Lhs[0], x.Rhs[0]
				}
			}
			if sel, ok := key.(*ast.SelectorExpr); ok {
				key = sel.Sel
			}
			if id, ok := key.(*ast.Ident); ok && id.Name == "Type" {
				if v, ok := value.(*ast.Ident); !ok || !consts[v.Name] {
					t.Errorf("%s: an event's Type set from something else than the named types", fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
}

// checkEventFields fails the test for an event that carries a field its type does not have in the
// contract (a field that does not apply is its zero value).
func checkEventFields(t *testing.T, events []Event) {
	t.Helper()
	for _, p := range eventFieldProblems(loadContract(t), events) {
		t.Error(p)
	}
}

func eventFieldProblems(c workerContract, events []Event) []string {
	var problems []string
	byGo := map[string]string{}
	for key, f := range c.Events.Fields {
		byGo[goName(f)] = key
	}
	for _, e := range events {
		spec, ok := c.Events.Types[e.Type]
		if !ok {
			problems = append(problems, fmt.Sprintf("an event of no contract type: %+v", e))
			continue
		}
		allowed := append([]string{"type"}, spec.Fields...)
		if e.Type == "retry" && e.ID != nil {
			allowed = append(allowed, "id", "owner", "attempts")
		}
		v := reflect.ValueOf(e)
		for i := 0; i < v.NumField(); i++ {
			key := byGo[eventType.Field(i).Name]
			if !v.Field(i).IsZero() && !slices.Contains(allowed, key) {
				problems = append(problems, fmt.Sprintf("a %s event carries %s: %+v", e.Type, key, e))
			}
		}
		if e.Worker == "" {
			problems = append(problems, fmt.Sprintf("an event without its worker: %+v", e))
		}
	}
	return problems
}
