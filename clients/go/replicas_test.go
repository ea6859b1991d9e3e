package fenecdb

// A primary and its replicas, played by fake servers: a replica's 403 followed to the primary it names,
// a server that cannot be reached left for the next, reads sent to a replica with Fenec-After and back
// to the primary on a 504, and the worker's primary event (the SDKs' contract for replicas, rules 1-6).

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

// replicaOf plays a replica of primary: every request is refused 403 naming it, nothing done.
func replicaOf(t *testing.T, primary string) *fakeServer {
	return fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		w.Header().Set("Fenec-Primary", primary)
		w.WriteHeader(403)
		io.WriteString(w, `{"error":"a replica takes no writes: send them to its primary `+primary+`"}`)
	})
}

// nobody answers a URL where every connection is refused.
func nobody(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	return url
}

// TestReplicaRefusalIsFollowed: a 403 with Fenec-Primary sends the same request to the primary at once,
// which stays the client's primary (for its copies too); a 403 without it is the caller's, sent once.
func TestReplicaRefusalIsFollowed(t *testing.T) {
	p := fake(t, nil)
	r := replicaOf(t, p.URL+"/")
	db := New(r.URL)
	keyed := db.IdempotencyKey("k1")
	res, err := keyed.Exec(bg, "put jobs {a: 1}")
	if err != nil || res.Affected != 1 {
		t.Fatalf("Exec: %+v %v", res, err)
	}
	req, body := p.last()
	if body != `{"query":"put jobs {a: 1}","params":[]}` || req.Header.Get("Idempotency-Key") != "k1" {
		t.Fatalf("the primary was sent %s with key %q", body, req.Header.Get("Idempotency-Key"))
	}
	if db.URL() != p.URL || keyed.URL() != p.URL {
		t.Fatalf("primary %s and %s, want %s", db.URL(), keyed.URL(), p.URL)
	}
	if _, err := db.Exec(bg, "put jobs {a: 2}"); err != nil || r.count() != 1 || p.count() != 2 {
		t.Fatalf("second write: %v; replica asked %d times, primary %d", err, r.count(), p.count())
	}

	plain := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		w.WriteHeader(403)
		io.WriteString(w, `{"error":"outside the token's rules"}`)
	})
	_, err = New(plain.URL, WithServers(p.URL)).Exec(bg, "put jobs {a: 3}")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeForbidden || e.Primary != "" || plain.count() != 1 || p.count() != 2 {
		t.Fatalf("a plain 403: %v, sent %d times, primary asked %d", err, plain.count(), p.count())
	}
}

// TestReplicaHopsAreBounded: two servers that name each other are followed twice, then the 403 is the
// caller's, naming the primary.
func TestReplicaHopsAreBounded(t *testing.T) {
	var b *fakeServer
	a := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		w.Header().Set("Fenec-Primary", b.URL)
		w.WriteHeader(403)
	})
	b = replicaOf(t, a.URL)
	_, err := New(a.URL).Exec(bg, "put jobs {a: 1}")
	var e *Error
	if !errors.As(err, &e) || e.Status != 403 || e.Primary == "" || a.count()+b.count() != 1+maxHops {
		t.Fatalf("%v after %d + %d requests", err, a.count(), b.count())
	}
}

// TestUnreachableServerMovesOn: a connection refused moves the client to the next server, round robin,
// which stays its primary; with every server refused once, the call fails with the network's error.
func TestUnreachableServerMovesOn(t *testing.T) {
	live := fake(t, nil)
	down1, down2 := nobody(t), nobody(t)
	db := New(down1, WithServers(down2, live.URL))
	if _, err := db.Exec(bg, "put jobs {a: 1}"); err != nil || live.count() != 1 || db.URL() != live.URL {
		t.Fatalf("Exec: %v; the live server asked %d times; primary %s", err, live.count(), db.URL())
	}
	// from the last server, round robin wraps to the first
	db = New(down1, WithServers(live.URL, down2))
	db.route.set(down2)
	if _, err := db.Exec(bg, "put jobs {a: 2}"); err != nil || db.URL() != live.URL {
		t.Fatalf("Exec: %v; primary %s", err, db.URL())
	}

	// a replica naming a server this call could not reach: that server's failure is the caller's
	r := replicaOf(t, down1)
	db = New(down1, WithServers(r.URL))
	if _, err := db.Exec(bg, "put jobs {a: 3}"); !notSent(err) || r.count() != 1 || db.URL() != r.URL {
		t.Fatalf("a replica naming a primary that is gone: %v after %d requests, primary %s", err, r.count(), db.URL())
	}

	start := time.Now()
	_, err := New(down1, WithServers(down2)).Exec(bg, "put jobs {a: 3}")
	if !notSent(err) {
		t.Fatalf("every server down: %v", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatalf("every server down took %s: the list was walked more than once", time.Since(start))
	}
}

// TestUnavailableMovesTheNextAttempt: a 503 with Retry-After is the caller's, and the next call goes to
// the next server of the list.
func TestUnavailableMovesTheNextAttempt(t *testing.T) {
	busy := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(503)
		io.WriteString(w, `{"error":"too few sync replicas"}`)
	})
	other := fake(t, nil)
	db := New(busy.URL, WithServers(other.URL))
	_, err := db.Exec(bg, "put jobs {a: 1}")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeUnavailable || other.count() != 0 {
		t.Fatalf("first call: %v; the other asked %d times", err, other.count())
	}
	if _, err := db.Exec(bg, "put jobs {a: 1}"); err != nil || other.count() != 1 || busy.count() != 1 {
		t.Fatalf("second call: %v; asked %d and %d times", err, busy.count(), other.count())
	}
}

// TestReplicaReadsCarryTheSeq: with WithReadFrom(Replica), builder reads and Read go to the server that
// is not the primary with Fenec-After: the highest seq seen; writes and Query go to the primary; a 504
// or a replica that cannot be reached sends the read to the primary.
func TestReplicaReadsCarryTheSeq(t *testing.T) {
	p := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		w.Header().Set("Fenec-Seq", "41")
		if strings.Contains(body, `"get `) {
			io.WriteString(w, `[{"id":1,"from":"primary"}]`)
			return
		}
		io.WriteString(w, `{"affected":1}`)
	})
	var mu sync.Mutex
	behind := false
	r := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		mu.Lock()
		defer mu.Unlock()
		if behind {
			w.WriteHeader(504)
			io.WriteString(w, `{"error":"the replica is behind","seq":40}`)
			return
		}
		io.WriteString(w, `[{"id":1,"from":"replica"}]`)
	})
	db := New(p.URL, WithServers(r.URL), WithReadFrom(Replica))
	if _, err := db.From("jobs").Insert(bg, D("a", 1)); err != nil || p.count() != 1 {
		t.Fatalf("Insert: %v; primary asked %d times", err, p.count())
	}
	row, err := db.From("jobs").Where("id", "=", 1).First(bg)
	req, _ := r.last()
	if err != nil || row["from"] != "replica" || req.Header.Get("Fenec-After") != "41" {
		t.Fatalf("First: %v %v, Fenec-After %q", row, err, req.Header.Get("Fenec-After"))
	}
	if rows, err := db.Read(bg, "get jobs"); err != nil || rows[0]["from"] != "replica" || r.count() != 2 {
		t.Fatalf("Read: %v %v", rows, err)
	}
	if rows, err := db.Query(bg, "get jobs"); err != nil || rows[0]["from"] != "primary" || r.count() != 2 {
		t.Fatalf("Query: %v %v", rows, err)
	}

	mu.Lock()
	behind = true
	mu.Unlock()
	if n, err := db.From("jobs").Count(bg); err == nil || r.count() != 3 {
		// the primary's fake answers a count with rows, not a count: what matters is where it went
		t.Fatalf("Count: %d %v; replica asked %d times", n, err, r.count())
	}
	rows, err := db.From("jobs").Rows(bg)
	if err != nil || rows[0]["from"] != "primary" || r.count() != 4 || p.count() != 4 {
		t.Fatalf("Rows after a 504: %v %v; asked %d and %d times", rows, err, p.count(), r.count())
	}

	down := New(p.URL, WithServers(nobody(t)), WithReadFrom(Replica))
	if rows, err := down.From("jobs").Rows(bg); err != nil || rows[0]["from"] != "primary" || down.URL() != p.URL {
		t.Fatalf("Rows with the replica down: %v %v, primary %s", rows, err, down.URL())
	}
	// a client never given a seq sends no Fenec-After; one server alone reads from it
	fresh := New(r.URL, WithServers(p.URL), WithReadFrom(Replica))
	fresh.route.set(p.URL)
	mu.Lock()
	behind = false
	mu.Unlock()
	if _, err := fresh.Read(bg, "get jobs"); err != nil {
		t.Fatal(err)
	}
	if req, _ := r.last(); req.Header.Get("Fenec-After") != "" {
		t.Fatalf("a first read sent Fenec-After %q", req.Header.Get("Fenec-After"))
	}
	if _, err := New(p.URL, WithReadFrom(Replica)).Read(bg, "get jobs"); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerGivenAReplicaWorksThePrimary: a worker given a replica alone sends its held claim on to the
// primary the 403 names, never held on the replica, tells it in a primary event, and acks there.
func TestWorkerGivenAReplicaWorksThePrimary(t *testing.T) {
	var mu sync.Mutex
	claimed, acked := false, false
	p := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasPrefix(body, `{"query":"set jobs {owner: $1, run_at: now() + $2, attempts`) && !claimed:
			claimed = true
			io.WriteString(w, `[{"id":7,"payload":"x","attempts":1}]`)
		case strings.HasPrefix(body, `{"query":"set jobs {owner`):
			io.WriteString(w, `[]`)
		case strings.HasPrefix(body, `{"query":"del jobs`):
			acked = true
			io.WriteString(w, `{"affected":1}`)
		default:
			io.WriteString(w, `{"affected":1}`)
		}
	})
	r := replicaOf(t, p.URL)
	var log eventLog
	w := &Worker{DB: New(r.URL), Queue: "jobs", Wait: 50 * time.Millisecond, OnEvent: log.add}
	ctx, stop := context.WithCancel(bg)
	done := runWorker(ctx, w, func(context.Context, Job) error { return nil })
	eventually(t, "the job acked on the primary", func() bool { mu.Lock(); defer mu.Unlock(); return acked })
	stop()
	returned(t, done, 30*time.Second)
	if r.count() != 1 {
		t.Fatalf("the replica was asked %d times, want the first claim alone", r.count())
	}
	p.mu.Lock()
	req := p.requests[0]
	p.mu.Unlock()
	if req.Header.Get("Fenec-Wait") != "50" {
		t.Fatalf("the claim re-sent to the primary is not held: Fenec-Wait %q", req.Header.Get("Fenec-Wait"))
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	var primaries []string
	for _, e := range log.events {
		if e.Type == evPrimary {
			primaries = append(primaries, e.URL)
		}
	}
	if len(primaries) != 1 || primaries[0] != p.URL {
		t.Fatalf("primary events %v, want one with %s", primaries, p.URL)
	}
	if last := log.events[len(log.events)-1]; last.Type != evStopped {
		t.Fatalf("the last event is %+v", last)
	}
	checkEventFields(t, log.events)
}

// TestWorkerRetriesWhileTheReplicaNamesAGonePrimary: while the replica names a primary that cannot be
// reached (a failover under way), each call fails with that connection's error, which the worker
// retries, never the end of Run; once the replica takes writes (promoted), the worker goes on there.
func TestWorkerRetriesWhileTheReplicaNamesAGonePrimary(t *testing.T) {
	gone := nobody(t)
	var mu sync.Mutex
	promoted, acked := false, false
	r := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !promoted:
			w.Header().Set("Fenec-Primary", gone)
			w.WriteHeader(403)
		case strings.HasPrefix(body, `{"query":"set jobs {owner`):
			io.WriteString(w, `[{"id":7,"payload":"x","attempts":1}]`)
		default:
			acked = acked || strings.HasPrefix(body, `{"query":"del jobs`)
			io.WriteString(w, `{"affected":1}`)
		}
	})
	var log eventLog
	w := &Worker{DB: New(gone, WithServers(r.URL)), Queue: "jobs", Wait: -1, RetryMin: time.Millisecond,
		RetryMax: 20 * time.Millisecond, OnEvent: log.add}
	ctx, stop := context.WithCancel(bg)
	done := runWorker(ctx, w, func(context.Context, Job) error { return nil })
	eventually(t, "claims retried", func() bool { return log.count(evRetry) >= 3 })
	mu.Lock()
	promoted = true
	mu.Unlock()
	eventually(t, "the job acked on the promoted replica", func() bool { mu.Lock(); defer mu.Unlock(); return acked })
	stop()
	returned(t, done, 30*time.Second)
	if db := w.DB; db.URL() != r.URL {
		t.Fatalf("primary %s, want the promoted %s", db.URL(), r.URL)
	}
	checkEventFields(t, log.events)
}
