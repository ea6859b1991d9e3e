package fenecdb

// Worker.Run on a fake server: the contract's rules on slots, on stops bounded whatever the server does,
// and on what is retried.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// threeJobs answers a claim three ready jobs once, then none.
func threeJobs(claims *int) string {
	*claims++
	if *claims > 1 {
		return `[]`
	}
	return `[{"id":1,"payload":"a","owner":"s:1","attempts":1},{"id":2,"payload":"b","owner":"s:1","attempts":1},` +
		`{"id":3,"payload":"c","owner":"s:1","attempts":1}]`
}

var ackedID = regexp.MustCompile(`^\{"query":"del .*"params":\[(\d+),`)

// TestWorkerSlotFreedOnlyOnceAcked: with one slot, the second job does not start while the first one's
// ack is unanswered (the server is away): a slot is freed once its job is settled, not when its handler
// returns, so an outage re-runs at most Concurrency jobs.
func TestWorkerSlotFreedOnlyOnceAcked(t *testing.T) {
	release := make(chan struct{})
	ackArrived := make(chan struct{}, 8)
	var mu sync.Mutex
	claims := 0
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		switch {
		case strings.Contains(body, " limit "):
			mu.Lock()
			answer := threeJobs(&claims)
			mu.Unlock()
			io.WriteString(w, answer)
		case ackedID.MatchString(body):
			if ackedID.FindStringSubmatch(body)[1] == "1" {
				ackArrived <- struct{}{}
				<-release // the first ack is held: the server is away
			}
			io.WriteString(w, `{"affected":1}`)
		default:
			io.WriteString(w, `[]`)
		}
	})
	var log eventLog
	w := &Worker{DB: New(f.URL), Queue: "jobs", Name: "s", Batch: 3, Concurrency: 1, Wait: 50 * time.Millisecond,
		Heartbeat: -1, OnEvent: log.add}
	ctx, stop := context.WithCancel(bg)
	defer stop()
	done := runWorker(ctx, w, func(context.Context, Job) error { return nil })
	select {
	case <-ackArrived:
	case <-time.After(60 * time.Second):
		t.Fatal("the first ack never came")
	}
	// the first ack is unanswered: whatever the time given, the second job must not start
	time.Sleep(500 * time.Millisecond)
	if n := log.count("start"); n != 1 {
		t.Errorf("%d jobs started while the first one's ack was unanswered, with one slot", n)
	}
	close(release)
	eventually(t, "every job acked", func() bool { return log.count("done") == 3 })
	stop()
	returned(t, done, 60*time.Second)
	log.mu.Lock()
	defer log.mu.Unlock()
	checkEventFields(t, log.events)
}

// frozenAfterClaim answers one claim three jobs and then holds every other request until the test ends:
// a server that stopped answering.
func frozenAfterClaim(t *testing.T) *fakeServer {
	frozen := make(chan struct{})
	var mu sync.Mutex
	claims := 0
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		if strings.Contains(body, " limit ") {
			mu.Lock()
			answer := threeJobs(&claims)
			mu.Unlock()
			if answer != `[]` {
				io.WriteString(w, answer)
				return
			}
		}
		select {
		case <-frozen:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(frozen) }) // before the server's own cleanup, which waits for its handlers
	return f
}

// TestWorkerGracefulStopBoundedWhenServerFrozen: a graceful stop returns within the drain timeout and
// its grace although no call of the stop (ack, release) is ever answered and calls have a long timeout.
func TestWorkerGracefulStopBoundedWhenServerFrozen(t *testing.T) {
	f := frozenAfterClaim(t)
	var log eventLog
	w := &Worker{DB: New(f.URL, WithTimeout(0)), Queue: "jobs", Name: "g", Batch: 3, Concurrency: 1,
		Wait: 50 * time.Millisecond, Heartbeat: -1, Timeout: time.Hour, DrainTimeout: 200 * time.Millisecond,
		OnEvent: log.add}
	ctx, stop := context.WithCancel(bg)
	defer stop()
	handled := make(chan struct{}, 3)
	done := runWorker(ctx, w, func(context.Context, Job) error { handled <- struct{}{}; return nil })
	<-handled // the first job ran; its ack is now held by the frozen server
	stop()
	// the bound is drain (0.2 s) + grace (1 s); an hour-long request timeout must not stretch it
	returned(t, done, 30*time.Second)
	log.mu.Lock()
	defer log.mu.Unlock()
	if last := log.events[len(log.events)-1]; last.Type != "stopped" {
		t.Errorf("the last event is %+v", last)
	}
}

// TestWorkerHardStopBoundedWhenServerFrozen: Close returns within its grace of a second although the
// give backs it sends are never answered.
func TestWorkerHardStopBoundedWhenServerFrozen(t *testing.T) {
	f := frozenAfterClaim(t)
	w := &Worker{DB: New(f.URL, WithTimeout(0)), Queue: "jobs", Name: "h", Batch: 3, Concurrency: 2,
		Wait: 50 * time.Millisecond, Heartbeat: -1, Timeout: time.Hour, DrainTimeout: time.Hour}
	started := make(chan struct{}, 3)
	done := runWorker(bg, w, func(ctx context.Context, j Job) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	<-started
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	returned(t, done, 30*time.Second)
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
}

// TestWorkerOnly5xxRetried: a 429 is an answer like a 404: it ends Run, it is not retried.
func TestWorkerOnly5xxRetried(t *testing.T) {
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		w.WriteHeader(429)
		io.WriteString(w, `{"error":"slow down"}`)
	})
	w := &Worker{DB: New(f.URL), Queue: "jobs", RetryMin: time.Millisecond}
	err := w.Run(bg, func(context.Context, Job) error { return nil })
	var e *Error
	if !errors.As(err, &e) || e.Status != 429 || f.count() != 1 {
		t.Fatalf("Run: %v after %d requests", err, f.count())
	}
}
