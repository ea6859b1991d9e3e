package fenecdb

// The worker scenarios runner (conformance.md Part B). It replays any scenarios file against the server
// at FENEC_URL, each scenario in a collection of its own (<prefix>_go_<8 hex>), performing every queue
// operation through the builder and its real write calls, with Wait, IdempotencyKey and ctx. Before the
// first operation of each kind in a scenario it writes the same call with the text-only twin and checks
// it against the template of B.3.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

const defaultSchema = "create collection {q} (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"

type scenarioTally struct{ ok, fail, skipped int }

type scenarioFile struct {
	Format    int               `json:"format"`
	Scenarios []json.RawMessage `json:"scenarios"`
}

type scenario struct {
	Name        string            `json:"name"`
	Kind        string            `json:"kind"`
	Prefix      string            `json:"prefix"`
	Schema      string            `json:"schema"`
	TimeoutMS   int64             `json:"timeout_ms"`
	ToleranceMS int64             `json:"tolerance_ms"`
	Steps       []json.RawMessage `json:"steps"`
	Jobs        []swarmJobs       `json:"jobs"`
	Producers   struct {
		Count    int   `json:"count"`
		SpreadMS int64 `json:"spread_ms"`
	} `json:"producers"`
	Workers struct {
		Count   int   `json:"count"`
		Batch   int64 `json:"batch"`
		LeaseMS int64 `json:"lease_ms"`
		WaitMS  int64 `json:"wait_ms"`
	} `json:"workers"`
	DeadAfter *int64                     `json:"dead_after"`
	BackoffMS *int64                     `json:"backoff_ms"`
	Expect    map[string]json.RawMessage `json:"expect"`
}

type swarmJobs struct {
	Count     int    `json:"count"`
	Behaviour string `json:"behaviour"`
	DelayMS   int64  `json:"delay_ms"`
}

// runScenariosFile runs every scenario of one file against url (empty: every scenario is skipped, or the
// run fails when require is set), printing a line per scenario and the part's tally.
func runScenariosFile(out io.Writer, path, url string, require bool) scenarioTally {
	var t scenarioTally
	data, err := os.ReadFile(path)
	var file scenarioFile
	if err == nil {
		err = json.Unmarshal(data, &file)
	}
	if err == nil && len(file.Scenarios) == 0 {
		err = errors.New("no scenario")
	}
	if err != nil {
		fmt.Fprintf(out, "FAIL %s: a scenarios file / %v\n", path, err)
		t.fail++
		fmt.Fprintf(out, "scenarios %s: %d ok, %d FAIL, %d skipped\n", path, t.ok, t.fail, t.skipped)
		return t
	}
	url = strings.TrimRight(url, "/")
	why := ""
	switch {
	case url == "":
		why = "FENEC_URL not set"
	case !reachable(url):
		why = "the server at " + url + " does not answer /_health"
	}
	if why != "" && require {
		fmt.Fprintf(out, "FAIL %s: a server (FENEC_REQUIRE_SERVER=1) / %s\n", path, why)
		t.fail++
		why = "no server"
	}
	var db *Client
	if why == "" {
		opts := []Option{WithTimeout(30 * time.Second)}
		if tok := os.Getenv("FENEC_TOKEN"); tok != "" {
			opts = append(opts, WithToken(tok))
		}
		db = New(url, opts...)
	}
	for i, raw := range file.Scenarios {
		var sc scenario
		if err := json.Unmarshal(raw, &sc); err != nil {
			fmt.Fprintf(out, "FAIL scenario %d: a scenario / %v\n", i, err)
			t.fail++
			continue
		}
		if !picked(sc.Name) {
			continue
		}
		if why != "" {
			fmt.Fprintf(out, "skipped %s: %s\n", sc.Name, why)
			t.skipped++
			continue
		}
		counts, problem := runScenario(db, sc)
		if problem != "" {
			fmt.Fprintf(out, "FAIL %s: %s\n", sc.Name, problem)
			t.fail++
		} else {
			fmt.Fprintf(out, "ok %s%s\n", sc.Name, counts)
			t.ok++
		}
	}
	fmt.Fprintf(out, "scenarios %s: %d ok, %d FAIL, %d skipped\n", path, t.ok, t.fail, t.skipped)
	return t
}

func reachable(url string) bool {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url + "/_health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// runScenario creates the scenario's collection, runs it, and drops the collection, pass or fail.
func runScenario(db *Client, sc scenario) (string, string) {
	q := sc.Prefix + "_go_" + randomHex()
	schema := sc.Schema
	if schema == "" {
		schema = defaultSchema
	}
	timeout := time.Duration(sc.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := db.Exec(ctx, strings.ReplaceAll(schema, "{q}", q)); err != nil {
		return "", "schema: " + err.Error()
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_, _ = db.Exec(dctx, "drop collection "+q)
	}()
	ops := &queueOps{db: db, q: q, checked: map[string]bool{}}
	tol := time.Duration(sc.ToleranceMS) * time.Millisecond
	if tol <= 0 {
		tol = 150 * time.Millisecond
	}
	var counts, problem string
	switch sc.Kind {
	case "script":
		s := &script{ops: ops, tol: tol, owners: map[string]map[string][]string{}, ids: map[string]any{},
			counters: map[string]int{}}
		problem = s.run(ctx, sc.Steps)
	case "swarm":
		counts, problem = runSwarm(ctx, ops, sc, tol)
	default:
		problem = "kind: script or swarm / " + sc.Kind
	}
	if problem == "" && ctx.Err() != nil {
		problem = fmt.Sprintf("timeout_ms: done within %d ms / not done", timeout.Milliseconds())
	}
	return counts, problem
}

// ---- the queue operations, through the builder (B.3)

type queueOps struct {
	db      *Client
	q       string
	mu      sync.Mutex
	checked map[string]bool
}

// templates of B.3; <n> stands for the claim's batch or the pop's limit.
var templates = map[string]string{
	"enqueue": "put {q} {payload: $1, run_at: now() + $2, attempts: $3}",
	"claim":   "set {q} {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3} where run_at <= now() order run_at asc limit <n> returning *",
	"ack":     "del {q} where id = $1 and owner = $2 require 1",
	"extend":  "set {q} {run_at: now() + $1} where id = $2 and owner = $3 require 1",
	"fail":    "set {q} {owner: $1, error: $2, run_at: case when attempts >= $3 then null else now() + $4 * attempts * attempts end} where id = $5 and owner = $6 require 1",
	"pop":     "del {q} where run_at <= now() order run_at asc limit <n> returning *",
	"resend":  "set {q} {run_at: now(), attempts: $1, error: $2} where id = $3 and run_at is null",
}

// check writes the call with its text-only twin once per kind, and compares it with the template.
func (o *queueOps) check(kind string, n int64, text func() (string, []any, error)) error {
	o.mu.Lock()
	done := o.checked[kind]
	o.checked[kind] = true
	o.mu.Unlock()
	if done {
		return nil
	}
	got, _, err := text()
	if err != nil {
		return fmt.Errorf("template %s: %v", kind, err)
	}
	want := strings.ReplaceAll(strings.ReplaceAll(templates[kind], "{q}", o.q), "<n>", strconv.FormatInt(n, 10))
	if got != want {
		return fmt.Errorf("template %s: %q / %q", kind, want, got)
	}
	return nil
}

func (o *queueOps) enqueue(ctx context.Context, payload Doc, delayMS int64) (Result, error) {
	doc := D("payload", payload, "run_at", Expr("now() + ?", delayMS), "attempts", 0)
	q := o.db.From(o.q)
	if err := o.check("enqueue", 0, func() (string, []any, error) { return q.ToInsert(doc) }); err != nil {
		return Result{}, err
	}
	return q.Insert(ctx, doc)
}

func (o *queueOps) claim(ctx context.Context, db *Client, owner string, batch, leaseMS int64) (Result, error) {
	q := db.From(o.q).WhereCond(Raw("run_at <= now()")).Order("run_at", "asc").Limit(batch)
	patch := D("owner", owner, "run_at", Expr("now() + ?", leaseMS), "attempts", Inc(1))
	if err := o.check("claim", batch, func() (string, []any, error) { return q.ToUpdate(patch, Returning("*")) }); err != nil {
		return Result{}, err
	}
	return q.Update(ctx, patch, Returning("*"))
}

func (o *queueOps) mine(id any, owner string) *Query {
	return o.db.From(o.q).Where("id", "=", id).Where("owner", "=", owner)
}

func (o *queueOps) ack(ctx context.Context, id any, owner string) (Result, error) {
	q := o.mine(id, owner)
	if err := o.check("ack", 0, func() (string, []any, error) { return q.ToDelete(Require(1)) }); err != nil {
		return Result{}, err
	}
	return q.Delete(ctx, Require(1))
}

func (o *queueOps) extend(ctx context.Context, id any, owner string, leaseMS int64) (Result, error) {
	q := o.mine(id, owner)
	patch := D("run_at", Expr("now() + ?", leaseMS))
	if err := o.check("extend", 0, func() (string, []any, error) { return q.ToUpdate(patch, Require(1)) }); err != nil {
		return Result{}, err
	}
	return q.Update(ctx, patch, Require(1))
}

func (o *queueOps) fail(ctx context.Context, id any, owner, reason string, deadAfter, backoffMS int64) (Result, error) {
	q := o.mine(id, owner)
	patch := D("owner", nil, "error", reason,
		"run_at", Expr("case when attempts >= ? then null else now() + ? * attempts * attempts end", deadAfter, backoffMS))
	if err := o.check("fail", 0, func() (string, []any, error) { return q.ToUpdate(patch, Require(1)) }); err != nil {
		return Result{}, err
	}
	return q.Update(ctx, patch, Require(1))
}

func (o *queueOps) pop(ctx context.Context, limit int64) (Result, error) {
	q := o.db.From(o.q).WhereCond(Raw("run_at <= now()")).Order("run_at", "asc").Limit(limit)
	if err := o.check("pop", limit, func() (string, []any, error) { return q.ToDelete(Returning("*")) }); err != nil {
		return Result{}, err
	}
	return q.Delete(ctx, Returning("*"))
}

func (o *queueOps) resend(ctx context.Context, id any) (Result, error) {
	q := o.db.From(o.q).Where("id", "=", id).Where("run_at", "=", nil)
	patch := D("run_at", Expr("now()"), "attempts", 0, "error", nil)
	if err := o.check("resend", 0, func() (string, []any, error) { return q.ToUpdate(patch) }); err != nil {
		return Result{}, err
	}
	return q.Update(ctx, patch)
}

// counts reads the counts of B.3 through the builder.
func (o *queueOps) counts(ctx context.Context) (map[string]int64, error) {
	base := o.db.From(o.q)
	reads := map[string]*Query{
		"dead":    base.Where("run_at", "=", nil),
		"ready":   base.WhereCond(Raw("run_at <= now()")),
		"leased":  base.WhereCond(Raw("run_at > now()")).Where("owner", "!=", nil),
		"delayed": base.WhereCond(Raw("run_at > now()")).Where("owner", "=", nil),
		"total":   base,
	}
	out := map[string]int64{}
	for name, q := range reads {
		n, err := q.Count(ctx)
		if err != nil {
			return nil, fmt.Errorf("count %s: %v", name, err)
		}
		out[name] = n
	}
	return out, nil
}

// snapshot describes the queue's rows for a failure report: key, owner and attempts.
func (o *queueOps) snapshot(ctx context.Context) string {
	rows, err := o.db.From(o.q).Select("payload.key", "owner", "attempts", "run_at").Order("id", "asc").Rows(ctx)
	if err != nil {
		return err.Error()
	}
	parts := make([]string, len(rows))
	for i, r := range rows {
		parts[i] = fmt.Sprintf("%v owner=%v attempts=%v run_at=%v", r["payload.key"], r["owner"], r["attempts"], r["run_at"])
	}
	return strings.Join(parts, "; ")
}

func keyOf(r Row) string {
	if p, ok := r["payload"].(map[string]any); ok {
		if k, ok := p["key"].(string); ok {
			return k
		}
	}
	return ""
}

// ---- scripts (B.4.1)

type script struct {
	ops      *queueOps
	tol      time.Duration
	owners   map[string]map[string][]string // worker -> key -> owners of its claims, in order
	ids      map[string]any                 // key -> id
	counters map[string]int                 // claims per worker
	lastKey  string                         // idempotency key of the last claim
	lastOwn  string                         // its owner
	mu       sync.Mutex
}

func (s *script) run(ctx context.Context, steps []json.RawMessage) string {
	for i, raw := range steps {
		if problem := s.step(ctx, raw); problem != "" {
			return fmt.Sprintf("step %d: %s", i+1, problem)
		}
	}
	return ""
}

func splitStep(raw json.RawMessage) (string, json.RawMessage, json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", nil, nil, err
	}
	expect := m["expect"]
	delete(m, "expect")
	if len(m) != 1 {
		return "", nil, nil, fmt.Errorf("a step has one action")
	}
	for k, v := range m {
		return k, v, expect, nil
	}
	return "", nil, nil, nil
}

type claimArgs struct {
	Worker         string `json:"worker"`
	Batch          int64  `json:"batch"`
	LeaseMS        int64  `json:"lease_ms"`
	WaitMS         *int64 `json:"wait_ms"`
	IdempotencyKey string `json:"idempotency_key"`
	CancelAfterMS  *int64 `json:"cancel_after_ms"`
}

type claimExpect struct {
	Keys      *[]string `json:"keys"`
	Attempts  *[]int64  `json:"attempts"`
	MinMS     *int64    `json:"min_ms"`
	MaxMS     *int64    `json:"max_ms"`
	Replayed  *bool     `json:"replayed"`
	Cancelled *bool     `json:"cancelled"`
}

func (s *script) step(ctx context.Context, raw json.RawMessage) string {
	action, args, expect, err := splitStep(raw)
	if err != nil {
		return err.Error()
	}
	switch action {
	case "enqueue":
		var jobs []struct {
			Key     string          `json:"key"`
			Payload json.RawMessage `json:"payload"`
			DelayMS int64           `json:"delay_ms"`
		}
		if err := json.Unmarshal(args, &jobs); err != nil {
			return "enqueue: " + err.Error()
		}
		var want *struct {
			Affected int64 `json:"affected"`
		}
		_ = json.Unmarshal(expect, &want)
		for _, j := range jobs {
			payload := D()
			if len(j.Payload) > 0 && string(j.Payload) != "null" {
				v, err := decodeOrdered(j.Payload)
				d, ok := v.(Doc)
				if err != nil || !ok {
					return "enqueue: a payload is an object"
				}
				payload = d
			}
			payload = withKey(payload, j.Key)
			res, err := s.ops.enqueue(ctx, payload, j.DelayMS)
			if err != nil {
				return "enqueue " + j.Key + ": " + err.Error()
			}
			if want != nil && res.Affected != want.Affected {
				return fmt.Sprintf("enqueue %s: affected %d / %d", j.Key, want.Affected, res.Affected)
			}
		}
	case "claim":
		return s.claimStep(ctx, args, expect, time.Now())
	case "ack", "extend", "fail":
		var a struct {
			Key       string          `json:"key"`
			Worker    string          `json:"worker"`
			Claim     json.RawMessage `json:"claim"`
			LeaseMS   *int64          `json:"lease_ms"`
			Error     *string         `json:"error"`
			DeadAfter *int64          `json:"dead_after"`
			BackoffMS *int64          `json:"backoff_ms"`
		}
		if err := json.Unmarshal(args, &a); err != nil {
			return action + ": " + err.Error()
		}
		s.mu.Lock()
		owners := s.owners[a.Worker][a.Key]
		id, known := s.ids[a.Key]
		s.mu.Unlock()
		if len(owners) == 0 || !known {
			return fmt.Sprintf("%s: %s never claimed %s", action, a.Worker, a.Key)
		}
		owner := owners[len(owners)-1]
		if len(a.Claim) > 0 && string(a.Claim) != `"last"` && string(a.Claim) != "null" {
			n, err := strconv.Atoi(string(a.Claim))
			if err != nil || n < 1 || n > len(owners) {
				return fmt.Sprintf("%s: claim %s of %d claims", action, a.Claim, len(owners))
			}
			owner = owners[n-1]
		}
		var res Result
		switch action {
		case "ack":
			res, err = s.ops.ack(ctx, id, owner)
		case "extend":
			res, err = s.ops.extend(ctx, id, owner, orInt(a.LeaseMS, 30000))
		case "fail":
			reason := "failed"
			if a.Error != nil {
				reason = *a.Error
			}
			res, err = s.ops.fail(ctx, id, owner, reason, orInt(a.DeadAfter, 5), orInt(a.BackoffMS, 1000))
		}
		got := "ok"
		switch {
		case IsStale(err):
			got = "unmet"
		case err != nil:
			return action + " " + a.Key + ": " + err.Error()
		case res.Affected != 1:
			got = fmt.Sprintf("affected %d", res.Affected)
		}
		var want string
		if len(expect) > 0 {
			if err := json.Unmarshal(expect, &want); err != nil {
				return action + ": expect is \"ok\" or \"unmet\""
			}
			if want != got {
				return fmt.Sprintf("%s %s: %s / %s", action, a.Key, want, got)
			}
		}
	case "pop":
		var a struct {
			Limit int64 `json:"limit"`
		}
		if err := json.Unmarshal(args, &a); err != nil {
			return "pop: " + err.Error()
		}
		res, err := s.ops.pop(ctx, a.Limit)
		if err != nil {
			return "pop: " + err.Error()
		}
		var want claimExpect
		_ = json.Unmarshal(expect, &want)
		if want.Keys != nil {
			if got := keysOf(res.Rows); !sameStrings(*want.Keys, got) {
				return fmt.Sprintf("pop: keys %v / %v", *want.Keys, got)
			}
		}
	case "resend":
		var a struct {
			Key string `json:"key"`
		}
		if err := json.Unmarshal(args, &a); err != nil {
			return "resend: " + err.Error()
		}
		s.mu.Lock()
		id, known := s.ids[a.Key]
		s.mu.Unlock()
		if !known {
			return "resend: " + a.Key + " was never claimed"
		}
		res, err := s.ops.resend(ctx, id)
		if err != nil {
			return "resend: " + err.Error()
		}
		var want *struct {
			Affected int64 `json:"affected"`
		}
		_ = json.Unmarshal(expect, &want)
		if want != nil && want.Affected != res.Affected {
			return fmt.Sprintf("resend %s: affected %d / %d", a.Key, want.Affected, res.Affected)
		}
	case "sleep_ms":
		var ms int64
		if err := json.Unmarshal(args, &ms); err != nil {
			return "sleep_ms: " + err.Error()
		}
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-ctx.Done():
		}
	case "counts":
		got, err := s.ops.counts(ctx)
		if err != nil {
			return "counts: " + err.Error()
		}
		var want map[string]int64
		_ = json.Unmarshal(expect, &want)
		names := make([]string, 0, len(want))
		for k := range want {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			have, known := got[k]
			if !known {
				return "counts: no count named " + k
			}
			if have != want[k] {
				return fmt.Sprintf("counts %s: %d / %d", k, want[k], have)
			}
		}
	case "during":
		var d struct {
			Step    json.RawMessage   `json:"step"`
			AfterMS int64             `json:"after_ms"`
			Then    []json.RawMessage `json:"then"`
		}
		if err := json.Unmarshal(args, &d); err != nil {
			return "during: " + err.Error()
		}
		inner, innerArgs, _, err := splitStep(d.Step)
		if err != nil || inner != "claim" {
			return "during: its step is a claim"
		}
		started := time.Now()
		claimDone := make(chan string, 1)
		go func() { claimDone <- s.claimStep(ctx, innerArgs, expect, started) }()
		select {
		case <-time.After(time.Duration(d.AfterMS) * time.Millisecond):
		case <-ctx.Done():
		}
		if problem := s.run(ctx, d.Then); problem != "" {
			<-claimDone
			return "during, then: " + problem
		}
		if problem := <-claimDone; problem != "" {
			return "during: " + problem
		}
	default:
		return "unknown action " + action
	}
	return ""
}

func withKey(payload Doc, key string) Doc {
	out := Doc{}
	for i, k := range payload.keys {
		if k != "key" {
			out.keys = append(out.keys, k)
			out.vals = append(out.vals, payload.vals[i])
		}
	}
	out.keys = append(out.keys, "key")
	out.vals = append(out.vals, key)
	return out
}

func orInt(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}

func keysOf(rows []Row) []string {
	keys := make([]string, len(rows))
	for i, r := range rows {
		keys[i] = keyOf(r)
	}
	return keys
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (s *script) claimStep(ctx context.Context, rawArgs, rawExpect json.RawMessage, started time.Time) string {
	var a claimArgs
	if err := json.Unmarshal(rawArgs, &a); err != nil {
		return "claim: " + err.Error()
	}
	var want claimExpect
	if len(rawExpect) > 0 {
		if err := json.Unmarshal(rawExpect, &want); err != nil {
			return "claim: expect: " + err.Error()
		}
	}
	s.mu.Lock()
	var owner string
	if a.IdempotencyKey != "" && a.IdempotencyKey == s.lastKey {
		owner = s.lastOwn // a retry resends its request unchanged
	} else {
		s.counters[a.Worker]++
		owner = fmt.Sprintf("%s:%d", a.Worker, s.counters[a.Worker])
	}
	s.lastKey, s.lastOwn = a.IdempotencyKey, owner
	s.mu.Unlock()

	db := s.ops.db
	if a.WaitMS != nil {
		db = db.Wait(time.Duration(*a.WaitMS) * time.Millisecond)
	}
	if a.IdempotencyKey != "" {
		// keys share one namespace on the server; the scenario's collection makes this run's keys its own,
		// so the SDKs (and a second run) can replay the same file against one server at once (B.2)
		db = db.IdempotencyKey(a.IdempotencyKey + ":" + s.ops.q)
	}
	cctx := ctx
	if a.CancelAfterMS != nil {
		var cancel context.CancelFunc
		cctx, cancel = context.WithCancel(ctx)
		timer := time.AfterFunc(time.Duration(*a.CancelAfterMS)*time.Millisecond, cancel)
		defer timer.Stop()
		defer cancel()
	}
	res, err := s.ops.claim(cctx, db, owner, a.Batch, a.LeaseMS)
	elapsed := time.Since(started)
	if want.Cancelled != nil && *want.Cancelled {
		if !errors.Is(err, context.Canceled) {
			return fmt.Sprintf("claim: cancelled / %v (%d rows)", err, len(res.Rows))
		}
		limit := time.Duration(orInt(a.CancelAfterMS, 0))*time.Millisecond + s.tol
		if elapsed > limit {
			return fmt.Sprintf("claim: cancelled within %d ms / after %d ms", limit.Milliseconds(), elapsed.Milliseconds())
		}
		return ""
	}
	if err != nil {
		return "claim: " + err.Error()
	}
	s.mu.Lock()
	for _, r := range res.Rows {
		k := keyOf(r)
		if s.owners[a.Worker] == nil {
			s.owners[a.Worker] = map[string][]string{}
		}
		s.owners[a.Worker][k] = append(s.owners[a.Worker][k], owner)
		s.ids[k] = r["id"]
	}
	s.mu.Unlock()
	if want.Keys != nil {
		if got := keysOf(res.Rows); !sameStrings(*want.Keys, got) {
			return fmt.Sprintf("claim: keys %v / %v (the queue now: %s)", *want.Keys, got, s.ops.snapshot(ctx))
		}
	}
	if want.Attempts != nil {
		got := make([]int64, len(res.Rows))
		for i, r := range res.Rows {
			got[i], _ = r["attempts"].(int64)
		}
		if fmt.Sprint(got) != fmt.Sprint(*want.Attempts) {
			return fmt.Sprintf("claim: attempts %v / %v", *want.Attempts, got)
		}
	}
	ms := elapsed.Milliseconds()
	if want.MinMS != nil && elapsed < time.Duration(*want.MinMS)*time.Millisecond-s.tol {
		return fmt.Sprintf("claim: at least %d ms / %d ms", *want.MinMS, ms)
	}
	if want.MaxMS != nil && elapsed > time.Duration(*want.MaxMS)*time.Millisecond+s.tol {
		return fmt.Sprintf("claim: at most %d ms / %d ms", *want.MaxMS, ms)
	}
	if want.Replayed != nil && *want.Replayed != res.Replayed {
		return fmt.Sprintf("claim: replayed %v / %v", *want.Replayed, res.Replayed)
	}
	return ""
}
