// Command faultworker is the Go SDK's worker for the shared fault harness (conformance/faults.py),
// built and started by clients/go/fault-worker.sh. It runs one fenecdb.Worker configured from the
// environment, with a handler that does what each job's payload asks, and prints every event as one
// JSON line on stdout. SIGTERM stops it gracefully, SIGINT at once; either way it exits 0.
//
// Environment: FENEC_URL, FENEC_SERVERS (when set, the client's servers, comma-separated, the primary
// first: its `ready` line then names them, `servers`), FENEC_QUEUE, FENEC_WORKER, FENEC_BATCH, FENEC_CONCURRENCY, FENEC_LEASE_MS,
// FENEC_WAIT_MS, FENEC_HEARTBEAT_MS, FENEC_MAX_ATTEMPTS, FENEC_DRAIN_MS, FENEC_BACKOFF_MS (a failed job
// comes back after FENEC_BACKOFF_MS × attempts²), FENEC_TIMEOUT_MS (each request; a held claim gets the
// wait on top), FENEC_KEEP_DONE=1 (acked jobs kept, marked done). A payload is {"sleep_ms": n, "throw": bool, "fail": "message", "fail_times": n}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"fenecdb.dev/go/fenecdb"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fault worker:", err)
		os.Exit(1)
	}
}

func run() error {
	url, queue := os.Getenv("FENEC_URL"), os.Getenv("FENEC_QUEUE")
	if list := os.Getenv("FENEC_SERVERS"); list != "" {
		url = list
	}
	if url == "" || queue == "" {
		return errors.New("FENEC_URL and FENEC_QUEUE are required")
	}
	out := &lines{worker: os.Getenv("FENEC_WORKER"), out: os.Stdout}
	backoff := ms("FENEC_BACKOFF_MS")
	w := &fenecdb.Worker{
		DB:           client(url),
		Queue:        queue,
		Name:         out.worker,
		Batch:        int64(num("FENEC_BATCH")),
		Concurrency:  num("FENEC_CONCURRENCY"),
		Lease:        ms("FENEC_LEASE_MS"),
		Wait:         ms("FENEC_WAIT_MS"),
		Heartbeat:    ms("FENEC_HEARTBEAT_MS"),
		MaxAttempts:  int64(num("FENEC_MAX_ATTEMPTS")),
		DrainTimeout: ms("FENEC_DRAIN_MS"),
		Timeout:      ms("FENEC_TIMEOUT_MS"),
		KeepDone:     os.Getenv("FENEC_KEEP_DONE") == "1",
		OnEvent:      out.event,
	}
	if backoff > 0 {
		w.Backoff = func(attempts int64) time.Duration { return backoff * time.Duration(attempts*attempts) }
	}

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for sig := range signals {
			if sig == syscall.SIGINT {
				go w.Close()
			} else {
				go func() { _ = w.Shutdown(context.Background()) }() // bounded by DrainTimeout, then hard
			}
		}
	}()
	out.print(map[string]any{"event": "ready", "servers": w.DB.Servers()})
	return w.Run(context.Background(), out.handle)
}

// client is the worker's client of the servers in urls (comma-separated, the primary first). Its timeout is off: the
// worker's Timeout bounds each request.
func client(urls string) *fenecdb.Client {
	list := strings.Split(urls, ",")
	for i := range list {
		list[i] = strings.TrimSpace(list[i])
	}
	return fenecdb.New(list[0], fenecdb.WithTimeout(0), fenecdb.WithServers(list[1:]...))
}

// handle does what the payload asks: sleep (cut short when the job's ctx ends), then panic, fail or succeed.
func (o *lines) handle(ctx context.Context, j fenecdb.Job) (err error) {
	o.running.Add(1)
	defer o.running.Done()
	p, _ := j.Payload.(map[string]any)
	defer func() {
		v := recover()
		o.print(map[string]any{"event": "end", "id": j.ID, "owner": j.Owner, "attempts": j.Attempts,
			"ok": v == nil && err == nil})
		if v != nil {
			panic(v) // the worker's to recover: it fails the job
		}
	}()
	if d := time.Duration(intOf(p["sleep_ms"])) * time.Millisecond; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	failTimes, limited := p["fail_times"]
	due := !limited || j.Attempts <= intOf(failTimes)
	if throw, _ := p["throw"].(bool); throw && due {
		panic(fmt.Sprintf("thrown on attempt %d", j.Attempts))
	}
	if msg, ok := p["fail"].(string); ok && due {
		return errors.New(msg)
	}
	return nil
}

// lines prints JSON lines, one write each, so that lines from several goroutines never mix.
type lines struct {
	mu      sync.Mutex
	worker  string
	out     io.Writer
	running sync.WaitGroup // handlers not yet returned
}

func (o *lines) event(e fenecdb.Event) {
	if e.Type == "stopped" {
		// after a hard stop Run returns without waiting for the handlers it cancelled; theirs are the
		// `end` lines, and `stopped` is the last line
		done := make(chan struct{})
		go func() { o.running.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
	m := map[string]any{"event": e.Type}
	if e.Owner != "" {
		m["owner"] = e.Owner
	}
	if e.ID != nil {
		m["id"] = e.ID
	}
	if e.Type != "claimed" && e.Type != "retry" && e.Type != "stopped" && e.Type != "primary" {
		m["attempts"] = e.Attempts
	}
	if e.Type == "claimed" {
		m["n"] = e.Count
	}
	if e.Error != "" {
		m["error"] = e.Error
	}
	if e.Call != "" {
		m["call"] = e.Call
	}
	if e.URL != "" {
		m["url"] = e.URL
	}
	if e.Type == "retry" || e.Type == "failed" {
		m["delay_ms"] = e.Delay.Milliseconds()
	}
	o.print(m)
}

func (o *lines) print(m map[string]any) {
	m["worker"] = o.worker
	m["t"] = time.Now().UnixMilli()
	line, err := json.Marshal(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault worker: an event that is not JSON:", err)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.out.Write(append(line, '\n'))
}

func num(name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return 0
	}
	return n
}

func ms(name string) time.Duration { return time.Duration(num(name)) * time.Millisecond }

func intOf(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}
