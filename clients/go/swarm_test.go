package fenecdb

// The swarm scenarios (conformance.md B.4.2): producers and workers at once, then invariants over a log
// of every claim, extension, ack and fail.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// claimRecord is one claim of one job. Times are on the server's clock where the server says them: the
// claim answers run_at, its lease end, so the claim ran at run_at - lease (server and runner share the
// host's clock). Where the runner only knows when it sent and heard back, it takes the bound that cannot
// raise a false alarm: a release counts from when its ack or fail was sent.
type claimRecord struct {
	key      string
	owner    string
	attempts int64
	at       time.Time // when the claim ran
	leaseEnd time.Time // moved on by extensions
	released time.Time // when its ack or fail that answered 1 was sent (zero: never)
}

type swarmLog struct {
	mu        sync.Mutex
	claims    map[string][]*claimRecord // key -> claims in order
	acks      map[string]int            // key -> acks answered 1
	stale     int
	enqueued  map[string]time.Time // key -> when its insert was sent
	delay     map[string]time.Duration
	behaviour map[string]string
	errs      []string
}

func (l *swarmLog) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 5 {
		l.errs = append(l.errs, fmt.Sprintf(format, args...))
	}
}

func (l *swarmLog) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.acks {
		if c > 0 {
			n++
		}
	}
	return n
}

func runSwarm(ctx context.Context, ops *queueOps, sc scenario, tol time.Duration) (string, string) {
	log := &swarmLog{claims: map[string][]*claimRecord{}, acks: map[string]int{}, enqueued: map[string]time.Time{},
		delay: map[string]time.Duration{}, behaviour: map[string]string{}}
	type job struct {
		key   string
		delay int64
	}
	var jobs []job
	failAlways, forget := 0, 0
	for _, g := range sc.Jobs {
		for i := 0; i < g.Count; i++ {
			k := fmt.Sprintf("j%d", len(jobs)+1)
			jobs = append(jobs, job{k, g.DelayMS})
			log.behaviour[k] = g.Behaviour
			log.delay[k] = time.Duration(g.DelayMS) * time.Millisecond
		}
		switch g.Behaviour {
		case "fail_always":
			failAlways += g.Count
		case "forget":
			forget += g.Count
		}
	}
	deadAfter, backoff := orInt(sc.DeadAfter, 5), orInt(sc.BackoffMS, 1000)
	w := sc.Workers
	lease := time.Duration(w.LeaseMS) * time.Millisecond

	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var workers sync.WaitGroup
	for i := 0; i < w.Count; i++ {
		workers.Add(1)
		go func(name string) {
			defer workers.Done()
			swarmWorker(wctx, ops, log, name, w.Batch, w.LeaseMS, w.WaitMS, deadAfter, backoff, lease)
		}(fmt.Sprintf("w%d", i+1))
	}

	// producers: jobs dealt to the producers in turn, each sent at its share of spread_ms
	start := time.Now()
	var producers sync.WaitGroup
	pc := sc.Producers.Count
	if pc < 1 {
		pc = 1
	}
	spread := time.Duration(sc.Producers.SpreadMS) * time.Millisecond
	for p := 0; p < pc; p++ {
		producers.Add(1)
		go func(p int) {
			defer producers.Done()
			for i := p; i < len(jobs); i += pc {
				at := start.Add(time.Duration(int64(spread) * int64(i) / int64(len(jobs))))
				select {
				case <-time.After(time.Until(at)):
				case <-ctx.Done():
					return
				}
				j := jobs[i]
				sent := time.Now()
				log.mu.Lock()
				log.enqueued[j.key] = sent
				log.mu.Unlock()
				if _, err := ops.enqueue(ctx, withKey(D(), j.key), j.delay); err != nil {
					log.problem("enqueue %s: %v", j.key, err)
					return
				}
			}
		}(p)
	}
	producers.Wait()

	// until every job is acked or dead
	deadRead := ops.db.From(ops.q).Where("run_at", "=", nil)
	var dead int64
	for {
		n, err := deadRead.Count(ctx)
		if err == nil {
			dead = n
		}
		if log.acked()+int(dead) >= len(jobs) {
			break
		}
		if ctx.Err() != nil {
			stopWorkers()
			workers.Wait()
			return "", fmt.Sprintf("timeout_ms: %d acked or dead / %d acked, %d dead", len(jobs), log.acked(), dead)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopWorkers()
	workers.Wait()

	endCtx, endCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer endCancel()
	got := map[string]int64{"acked": 0, "acked_twice": 0, "dead": 0, "left": 0, "claimed_while_leased": 0,
		"claimed_before_due": 0, "reclaimed_after_lapse": 0, "stale": 0, "max_attempts": 0}
	got["dead"], _ = ops.db.From(ops.q).Where("run_at", "=", nil).Count(endCtx)
	got["left"], _ = ops.db.From(ops.q).Where("run_at", "!=", nil).Count(endCtx)
	unexplained, _ := ops.db.From(ops.q).Where("run_at", "=", nil).Where("error", "=", nil).Count(endCtx)

	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.errs) > 0 {
		return "", "workers: no error / " + strings.Join(log.errs, "; ")
	}
	if unexplained > 0 {
		return "", fmt.Sprintf("dead: each keeps its error / %d without one", unexplained)
	}
	for _, c := range log.acks {
		if c > 0 {
			got["acked"]++
		}
		if c > 1 {
			got["acked_twice"]++
		}
	}
	got["stale"] = int64(log.stale)
	for key, claims := range log.claims {
		for i, c := range claims {
			if c.attempts > got["max_attempts"] {
				got["max_attempts"] = c.attempts
			}
			if d := log.delay[key]; d > 0 && c.at.Before(log.enqueued[key].Add(d-tol)) {
				got["claimed_before_due"]++
			}
			if i == 0 {
				continue
			}
			p := claims[i-1]
			releasedBefore := !p.released.IsZero() && !p.released.After(c.at)
			if !releasedBefore && c.at.Before(p.leaseEnd.Add(-tol)) {
				got["claimed_while_leased"]++
			}
			if log.behaviour[key] == "forget" && !c.at.Before(p.leaseEnd.Add(-tol)) {
				got["reclaimed_after_lapse"]++
			}
		}
	}
	names := make([]string, 0, len(sc.Expect))
	for k := range sc.Expect {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		have, known := got[name]
		if !known {
			return "", "expect: no invariant named " + name
		}
		if p := checkBound(name, sc.Expect[name], have); p != "" {
			return "", p
		}
	}
	if got["dead"] != int64(failAlways) {
		return "", fmt.Sprintf("dead: the %d fail_always jobs / %d", failAlways, got["dead"])
	}
	counts := fmt.Sprintf(" (acked %d, dead %d, stale %d, reclaimed after lapse %d of %d forgotten, max attempts %d)",
		got["acked"], got["dead"], got["stale"], got["reclaimed_after_lapse"], forget, got["max_attempts"])
	return counts, ""
}

// checkBound compares an invariant with its expectation: a number, {"min": n} or {"max": n}.
func checkBound(name string, raw json.RawMessage, have int64) string {
	var exact int64
	if json.Unmarshal(raw, &exact) == nil {
		if have != exact {
			return fmt.Sprintf("%s: %d / %d", name, exact, have)
		}
		return ""
	}
	var b struct {
		Min *int64 `json:"min"`
		Max *int64 `json:"max"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return fmt.Sprintf("%s: a number or {min, max} / %s", name, raw)
	}
	if b.Min != nil && have < *b.Min {
		return fmt.Sprintf("%s: at least %d / %d", name, *b.Min, have)
	}
	if b.Max != nil && have > *b.Max {
		return fmt.Sprintf("%s: at most %d / %d", name, *b.Max, have)
	}
	return ""
}

// swarmWorker runs the loop of B.4.2: claim, work each job of the batch by its behaviour, claim again.
func swarmWorker(ctx context.Context, ops *queueOps, log *swarmLog, name string, batch, leaseMS, waitMS, deadAfter,
	backoff int64, lease time.Duration) {
	held := ops.db.Wait(time.Duration(waitMS) * time.Millisecond)
	for n := 1; ctx.Err() == nil; n++ {
		owner := fmt.Sprintf("%s:%d", name, n)
		res, err := ops.claim(ctx, held, owner, batch, leaseMS)
		if err != nil {
			if ctx.Err() == nil {
				log.problem("claim %s: %v", owner, err)
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		heard := time.Now()
		var records []*claimRecord
		log.mu.Lock()
		for _, r := range res.Rows {
			attempts, _ := r["attempts"].(int64)
			end := heard.Add(lease)
			if s, ok := r["run_at"].(string); ok {
				if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
					end = t
				}
			}
			c := &claimRecord{key: keyOf(r), owner: owner, attempts: attempts, at: end.Add(-lease), leaseEnd: end}
			log.claims[c.key] = append(log.claims[c.key], c)
			records = append(records, c)
		}
		log.mu.Unlock()
		var jobs sync.WaitGroup
		for i, r := range res.Rows {
			jobs.Add(1)
			go func(r Row, c *claimRecord) {
				defer jobs.Done()
				work(ctx, ops, log, r, c, leaseMS, deadAfter, backoff, lease)
			}(r, records[i])
		}
		jobs.Wait()
	}
}

// answered reads an ack, extend or fail: true when it wrote its row; a 412 counts as stale.
func answered(log *swarmLog, what string, res Result, err error) bool {
	if IsStale(err) {
		log.mu.Lock()
		log.stale++
		log.mu.Unlock()
		return false
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			log.problem("%s: %v", what, err)
		}
		return false
	}
	return res.Affected == 1
}

func work(ctx context.Context, ops *queueOps, log *swarmLog, r Row, c *claimRecord, leaseMS, deadAfter, backoff int64,
	lease time.Duration) {
	id := r["id"]
	ack := func() {
		sent := time.Now()
		res, err := ops.ack(ctx, id, c.owner)
		if answered(log, "ack "+c.key, res, err) {
			log.mu.Lock()
			log.acks[c.key]++
			c.released = sent
			log.mu.Unlock()
		}
	}
	fail := func() {
		sent := time.Now()
		res, err := ops.fail(ctx, id, c.owner, "failed on attempt "+fmt.Sprint(c.attempts), deadAfter, backoff)
		if answered(log, "fail "+c.key, res, err) {
			log.mu.Lock()
			c.released = sent
			log.mu.Unlock()
		}
	}
	log.mu.Lock()
	behaviour := log.behaviour[c.key]
	log.mu.Unlock()
	switch behaviour {
	case "ok":
		ack()
	case "fail_once":
		if c.attempts <= 1 {
			fail()
		} else {
			ack()
		}
	case "fail_always":
		fail()
	case "forget":
		if c.attempts > 1 {
			ack()
		}
	case "slow":
		until := time.Now().Add(lease * 5 / 2)
		for time.Now().Before(until) {
			select {
			case <-time.After(lease / 3):
			case <-ctx.Done():
				return
			}
			res, err := ops.extend(ctx, id, c.owner, leaseMS)
			if !answered(log, "extend "+c.key, res, err) {
				return
			}
			log.mu.Lock()
			c.leaseEnd = time.Now().Add(lease)
			log.mu.Unlock()
		}
		ack()
	default:
		log.problem("behaviour %q is not one of ok, fail_once, fail_always, forget, slow", behaviour)
	}
}
