package fenecdb

// Worker.Run on a fake server: what it sends when answers go missing or come back refused.

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWorkerClaimRetriedUnderItsKey: a claim whose answer was lost (the connection closed) and then
// refused 503 is sent again, the same body under the same Idempotency-Key; a replayed answer is checked
// by an extend before its job runs, and the job is then acked; an ack whose answer was lost is sent
// again under its key.
func TestWorkerClaimRetriedUnderItsKey(t *testing.T) {
	var mu sync.Mutex
	claims := 0
	var keys, claimBodies, others []string
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.Contains(body, " limit "):
			claims++
			keys = append(keys, r.Header.Get("Idempotency-Key"))
			claimBodies = append(claimBodies, body)
			switch claims {
			case 1: // the claim ran, its answer never came
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
			case 2:
				w.WriteHeader(503)
				io.WriteString(w, `{"error":"the server is starting"}`)
			case 3:
				w.Header().Set("Idempotent-Replayed", "true")
				io.WriteString(w, `[{"id":7,"payload":"x","run_at":"2026-12-03T10:00:00.000Z","owner":"a:1","attempts":1,"error":null}]`)
			default:
				io.WriteString(w, `[]`)
			}
		case strings.Contains(body, "{run_at: now() + $1} where id = $2 and owner = $3 require 1"):
			others = append(others, "extend "+r.Header.Get("Idempotency-Key"))
			io.WriteString(w, `{"affected":1}`)
		case strings.HasPrefix(body, `{"query":"del `):
			others = append(others, "ack "+r.Header.Get("Idempotency-Key"))
			if len(others) == 2 { // the first ack ran, its answer never came (on a kept-alive connection)
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
				return
			}
			io.WriteString(w, `{"affected":1}`)
		case strings.Contains(body, "and owner = $3 returning"):
			io.WriteString(w, `[]`) // the give back of a claim cut short by the stop: it took nothing
		default:
			others = append(others, body)
			io.WriteString(w, `{"affected":1}`)
		}
	})
	var log eventLog
	ran := make(chan Job, 1)
	w := &Worker{DB: New(f.URL), Queue: "jobs", Name: "a", Wait: 50 * time.Millisecond, RetryMin: time.Millisecond,
		Heartbeat: -1, OnEvent: log.add}
	ctx, stop := context.WithCancel(bg)
	defer stop()
	done := runWorker(ctx, w, func(ctx context.Context, j Job) error { ran <- j; return nil })
	select {
	case j := <-ran:
		if j.ID != int64(7) || j.Owner != "a:1" || j.Attempts != 1 {
			t.Fatalf("ran %+v", j)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the replayed job never ran")
	}
	eventually(t, "the job acked", func() bool { return log.count("done") == 1 })
	stop()
	returned(t, done, 30*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if keys[0] == "" || !strings.HasPrefix(keys[0], "claim:a:1") || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Fatalf("claim keys %q", keys)
	}
	if claimBodies[1] != claimBodies[0] || claimBodies[2] != claimBodies[0] {
		t.Fatalf("a retried claim changed: %q", claimBodies[:3])
	}
	if len(others) != 3 || !strings.HasPrefix(others[0], "extend extend:a:1:7:0/") || !strings.HasPrefix(others[1], "ack ack:a:1:7") || others[2] != others[1] {
		t.Fatalf("after the claim: %q", others)
	}
	// every lost answer is Run's to retry, after its pause and told: none is re-sent unseen by net/http
	if log.count("retry") != 3 || log.count("claimed") != 1 {
		t.Fatalf("retry %d, claimed %d", log.count("retry"), log.count("claimed"))
	}
}

// TestWorkerRefusedClaimEndsRun: a refusal no retry mends (here a 404: no such queue) ends Run with it.
func TestWorkerRefusedClaimEndsRun(t *testing.T) {
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		w.WriteHeader(404)
		io.WriteString(w, `{"error":"no collection jobs"}`)
	})
	w := &Worker{DB: New(f.URL), Queue: "jobs"}
	err := w.Run(bg, func(context.Context, Job) error { return nil })
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotFound || f.count() != 1 {
		t.Fatalf("Run: %v after %d requests", err, f.count())
	}
}

// TestWorkerRetryDelay: the pause after n failures in a row is at most RetryMin·2ⁿ, capped by RetryMax.
func TestWorkerRetryDelay(t *testing.T) {
	w := &Worker{RetryMin: 10 * time.Millisecond, RetryMax: 300 * time.Millisecond}
	for n := 0; n < 12; n++ {
		limit := min(300*time.Millisecond, 10*time.Millisecond<<n)
		for i := 0; i < 50; i++ {
			if d := w.retryDelay(n); d < 0 || d > limit {
				t.Fatalf("retry %d paused %s, over %s", n, d, limit)
			}
		}
	}
}

// TestWorkerRunStoppedBeforeItBegins: Run with a ctx already cancelled sends nothing and returns nil.
func TestWorkerRunStoppedBeforeItBegins(t *testing.T) {
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) { io.WriteString(w, `[]`) })
	ctx, cancel := context.WithCancel(bg)
	cancel()
	w := &Worker{DB: New(f.URL), Queue: "jobs"}
	if err := w.Run(ctx, func(context.Context, Job) error { return nil }); err != nil || f.count() != 0 {
		t.Fatalf("Run: %v after %d requests", err, f.count())
	}
}

// TestWorkerStopsWhileServerAway: a worker retrying against a server that is not there stops at once
// when told, not after its drain timeout.
func TestWorkerStopsWhileServerAway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nobody listens there now: every connection is refused
	var log eventLog
	w := &Worker{DB: New(url), Queue: "jobs", DrainTimeout: time.Hour, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond,
		OnEvent: log.add}
	ctx, stop := context.WithCancel(bg)
	done := runWorker(ctx, w, func(context.Context, Job) error { return nil })
	eventually(t, "the worker retrying", func() bool { return log.count("retry") >= 3 })
	stop()
	returned(t, done, 30*time.Second) // the drain timeout is an hour
}

var extendOf = regexp.MustCompile(`^\{"query":"set jobs \{run_at: now\(\) \+ \$1\} where id = \$2 and owner = \$3 require 1",` +
	`"params":\[\d+,(\d+),"s:1"\]`)

var extendKey = regexp.MustCompile(`^extend:s:1:(\d+):(\d+)/[0-9a-f]+$`)

// TestWorkerExtendsEachJobOnItsOwn: the heartbeat extends each job in hand in a statement of its own,
// under a key of its own for each beat, one extend of a job in flight at a time; a 412 on one job's
// extend loses that job alone (its handler's ctx cancelled, a lost event with Call extend, no ack), and
// the others run on, extended, to their acks.
func TestWorkerExtendsEachJobOnItsOwn(t *testing.T) {
	var mu sync.Mutex
	claims := 0
	keys := map[string][]string{} // the keys of each job's extends, in the order they came
	holdFirst := make(chan struct{})
	var holding sync.Once
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		switch {
		case strings.Contains(body, " limit "):
			mu.Lock()
			answer := threeJobs(&claims)
			mu.Unlock()
			io.WriteString(w, answer)
		case extendOf.MatchString(body):
			id := extendOf.FindStringSubmatch(body)[1]
			mu.Lock()
			keys[id] = append(keys[id], r.Header.Get("Idempotency-Key"))
			first := id == "1" && len(keys[id]) == 1
			mu.Unlock()
			switch {
			case id == "2":
				w.WriteHeader(412)
				io.WriteString(w, `{"error":"`+"`set jobs`"+` wrote 0 rows, and requires 1"}`)
				return
			case first: // job 1's first extend is held: no other extend of job 1 may go out meanwhile
				select {
				case <-holdFirst:
				case <-r.Context().Done():
				}
			}
			io.WriteString(w, `{"affected":1}`)
		case strings.HasPrefix(body, `{"query":"set jobs {run_at:`) || strings.Contains(body, " in ["):
			t.Errorf("an extend of more than one job: %s", body)
			w.WriteHeader(400)
		default:
			io.WriteString(w, `{"affected":1}`)
		}
	})
	t.Cleanup(func() { holding.Do(func() { close(holdFirst) }) }) // before the server's own cleanup
	var log eventLog
	w := &Worker{DB: New(f.URL), Queue: "jobs", Name: "s", Batch: 3, Concurrency: 3, Wait: 50 * time.Millisecond,
		Heartbeat: 10 * time.Millisecond, OnEvent: log.add}
	ctx, stop := context.WithCancel(bg)
	defer stop()
	finish := make(chan struct{})
	cancelled := make(chan any, 3)
	done := runWorker(ctx, w, func(ctx context.Context, j Job) error {
		select {
		case <-finish:
			return nil
		case <-ctx.Done():
			cancelled <- j.ID
			return ctx.Err()
		}
	})
	extends := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(keys[id])
	}
	eventually(t, "job 3 extended at every beat while job 1's first extend is out", func() bool { return extends("3") >= 4 })
	if n := extends("1"); n != 1 {
		t.Errorf("%d extends of job 1 while its first was unanswered", n)
	}
	holding.Do(func() { close(holdFirst) })
	eventually(t, "job 1 extended again", func() bool { return extends("1") >= 3 })
	select {
	case id := <-cancelled:
		if id != int64(2) {
			t.Fatalf("the handler of job %v was cancelled", id)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the handler of the lost job was never told")
	}
	close(finish)
	eventually(t, "jobs 1 and 3 acked", func() bool { return log.count("done") == 2 })
	stop()
	returned(t, done, 60*time.Second)

	mu.Lock()
	defer mu.Unlock()
	if len(keys["2"]) != 1 {
		t.Errorf("job 2 was extended %d times: its lease was lost at the first", len(keys["2"]))
	}
	// each extend's key names its job and its beat: a beat that found the job's last extend still out
	// sent none of that job, so a job's beats rise, with gaps
	for id, ks := range keys {
		last := 0
		for _, k := range ks {
			m := extendKey.FindStringSubmatch(k)
			if m == nil || m[1] != id {
				t.Errorf("job %s's extend went under the key %q", id, k)
				continue
			}
			beat, _ := strconv.Atoi(m[2])
			if beat <= last {
				t.Errorf("job %s's extends went under the keys %q: a beat's number again", id, ks)
			}
			last = beat
		}
	}
	if n := log.count("lost"); n != 1 {
		t.Errorf("%d lost events", n)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	checkEventFields(t, log.events)
	for _, e := range log.events {
		settled := e.Type == "done" || e.Type == "failed" || e.Type == "dead" || e.Type == "released"
		if (e.Type == "lost" && (e.ID != int64(2) || e.Call != "extend" || e.Owner != "s:1")) || (settled && e.ID == int64(2)) {
			t.Errorf("event %+v", e)
		}
	}
}
