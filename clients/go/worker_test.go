package fenecdb

// Worker.Run on a fake server: what it sends when answers go missing or come back refused.

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
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
		case strings.Contains(body, " in ["):
			others = append(others, "extend")
			io.WriteString(w, `[{"id":7}]`)
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
	if len(others) != 3 || others[0] != "extend" || !strings.HasPrefix(others[1], "ack ack:a:1:7") || others[2] != others[1] {
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
