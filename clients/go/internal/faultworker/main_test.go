package main

// The handler does what a payload asks, and prints its `end` line; events print as the harness reads them.

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"fenecdb.dev/go/fenecdb"
)

func TestHandlerDoesWhatThePayloadAsks(t *testing.T) {
	for _, c := range []struct {
		payload  map[string]any
		attempts int64
		want     string // "" ok, "panic: ..." a panic, else the error
	}{
		{map[string]any{}, 1, ""},
		{map[string]any{"fail": "smtp timeout"}, 4, "smtp timeout"},
		{map[string]any{"fail": "flaky", "fail_times": int64(1)}, 1, "flaky"},
		{map[string]any{"fail": "flaky", "fail_times": int64(1)}, 2, ""},
		{map[string]any{"throw": true}, 3, "panic: thrown on attempt 3"},
		{map[string]any{"throw": true, "fail_times": int64(2)}, 2, "panic: thrown on attempt 2"},
		{map[string]any{"throw": true, "fail_times": int64(2)}, 3, ""},
		{map[string]any{"sleep_ms": int64(10)}, 1, ""},
	} {
		var out bytes.Buffer
		o := &lines{worker: "t", out: &out}
		got := call(context.Background(), o, fenecdb.Job{ID: int64(1), Owner: "t:1", Attempts: c.attempts, Payload: c.payload})
		if got != c.want {
			t.Errorf("%v at attempts %d: %q, want %q", c.payload, c.attempts, got, c.want)
		}
		var end map[string]any
		if err := json.Unmarshal(out.Bytes(), &end); err != nil || end["event"] != "end" || end["ok"] != (c.want == "") {
			t.Errorf("%v: the end line %q (%v)", c.payload, out.String(), err)
		}
	}
}

// A sleep ends early when the job's ctx does (a lost lease, a hard stop).
func TestHandlerSleepEndsWithItsCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o := &lines{worker: "t", out: &bytes.Buffer{}}
	begun := time.Now()
	got := call(ctx, o, fenecdb.Job{Payload: map[string]any{"sleep_ms": int64(600_000)}})
	if got != context.Canceled.Error() || time.Since(begun) > time.Minute {
		t.Fatalf("%q after %s", got, time.Since(begun))
	}
}

func TestEventLines(t *testing.T) {
	var out bytes.Buffer
	o := &lines{worker: "w", out: &out}
	o.event(fenecdb.Event{Type: "retry", Owner: "w:3", Error: "refused", Call: "claim", Delay: 250 * time.Millisecond})
	o.event(fenecdb.Event{Type: "done", ID: int64(4), Owner: "w:3", Attempts: 2})
	o.event(fenecdb.Event{Type: "primary", URL: "http://127.0.0.1:8081"})
	o.event(fenecdb.Event{Type: "stopped"})
	var got []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["t"].(float64); !ok || m["worker"] != "w" {
			t.Fatalf("line %s", l)
		}
		got = append(got, m)
	}
	if got[0]["event"] != "retry" || got[0]["error"] != "refused" || got[0]["delay_ms"] != 250.0 || got[0]["owner"] != "w:3" {
		t.Errorf("retry: %v", got[0])
	}
	if got[1]["event"] != "done" || got[1]["id"] != 4.0 || got[1]["attempts"] != 2.0 {
		t.Errorf("done: %v", got[1])
	}
	if _, has := got[2]["attempts"]; got[2]["event"] != "primary" || got[2]["url"] != "http://127.0.0.1:8081" || has {
		t.Errorf("primary: %v", got[2])
	}
	if _, has := got[3]["owner"]; got[3]["event"] != "stopped" || has {
		t.Errorf("stopped: %v", got[3])
	}
}

// TestClientOfSeveralServers: FENEC_SERVERS's servers, comma-separated, are the client's, the first its primary.
func TestClientOfSeveralServers(t *testing.T) {
	db := client("http://127.0.0.1:1/, http://127.0.0.1:2")
	if db.URL() != "http://127.0.0.1:1" || strings.Join(db.Servers(), " ") != "http://127.0.0.1:1 http://127.0.0.1:2" {
		t.Fatalf("primary %s of %v", db.URL(), db.Servers())
	}
}

// call runs the handler as the Worker does, a panic turned into its text.
func call(ctx context.Context, o *lines, j fenecdb.Job) (got string) {
	defer func() {
		if p := recover(); p != nil {
			got = "panic: " + p.(string)
		}
	}()
	if err := o.handle(ctx, j); err != nil {
		return err.Error()
	}
	return ""
}
