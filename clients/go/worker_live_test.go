package fenecdb

// Worker.Run against a real fenec-server: the heartbeat, a lost lease, the two stops, a panicking
// handler, dead letters, the concurrency bound, and a server restarted under a running worker (on a
// server of the test's own, on a file, behind a TCP proxy the test controls). Every wait is for a
// condition, with a generous deadline.

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// eventLog keeps a Worker's events for a test.
type eventLog struct {
	mu     sync.Mutex
	events []Event
}

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) count(kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Type == kind {
			n++
		}
	}
	return n
}

// eventually waits up to 60 s for cond, failing the test with what otherwise.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not so after 60 s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runWorker starts w.Run in a goroutine; the channel answers what Run returned.
func runWorker(ctx context.Context, w *Worker, handle func(context.Context, Job) error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, handle) }()
	return done
}

func returned(t *testing.T, done <-chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(within):
		t.Fatalf("Run did not return within %s", within)
	}
}

func rowOf(t *testing.T, db *Client, q string, id any) Row {
	t.Helper()
	row, err := db.From(q).Where("id", "=", id).First(bg)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// TestWorkerHeartbeatKeepsSlowJob: a job running for several leases keeps its lease while a second
// worker claims all along; it starts once and is acked.
func TestWorkerHeartbeatKeepsSlowJob(t *testing.T) {
	db := liveClient(t)
	q := liveQueue(t, db, "wbeat")
	var log eventLog
	w := &Worker{DB: db, Queue: q, Lease: time.Second, Heartbeat: 150 * time.Millisecond, Wait: time.Second, OnEvent: log.add}
	if _, err := w.Enqueue(bg, "slow", 0); err != nil {
		t.Fatal(err)
	}
	var starts atomic.Int32
	release := make(chan struct{})
	ctx, stop := context.WithCancel(bg)
	defer stop()
	done := runWorker(ctx, w, func(ctx context.Context, j Job) error {
		starts.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	eventually(t, "the job started", func() bool { return starts.Load() == 1 })
	thief := &Worker{DB: db, Queue: q, Name: "thief", Wait: 200 * time.Millisecond}
	for since := time.Now(); time.Since(since) < 4*w.Lease; {
		jobs, err := thief.Claim(bg)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) > 0 {
			t.Fatalf("a job under a live heartbeat was claimed again: %v", jobs[0].Row)
		}
	}
	close(release)
	eventually(t, "the slow job acked", func() bool { n, err := db.From(q).Count(bg); return err == nil && n == 0 })
	stop()
	returned(t, done, 30*time.Second)
	if starts.Load() != 1 || log.count("lost") != 0 || log.count("done") != 1 {
		t.Fatalf("starts %d, lost %d, done %d", starts.Load(), log.count("lost"), log.count("done"))
	}
}

// TestWorkerLostLeaseCancelsHandler: when another claim takes a running job, the next heartbeat finds
// out, the handler's ctx is cancelled, and the worker neither acks nor fails the job.
func TestWorkerLostLeaseCancelsHandler(t *testing.T) {
	db := liveClient(t)
	q := liveQueue(t, db, "wlost")
	var log eventLog
	w := &Worker{DB: db, Queue: q, Lease: 30 * time.Second, Heartbeat: 100 * time.Millisecond, Wait: time.Second, OnEvent: log.add}
	if _, err := w.Enqueue(bg, "taken", 0); err != nil {
		t.Fatal(err)
	}
	started := make(chan Job, 1)
	cancelled := make(chan error, 1)
	ctx, stop := context.WithCancel(bg)
	defer stop()
	done := runWorker(ctx, w, func(ctx context.Context, j Job) error {
		started <- j
		<-ctx.Done()
		cancelled <- ctx.Err()
		return errors.New("cut short") // must not fail the job: it is no longer ours
	})
	j := <-started
	if _, err := db.From(q).Where("id", "=", j.ID).Update(bg, D("owner", "another:1"), Require(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the handler's ctx ended with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the handler of a lost job was never told")
	}
	eventually(t, "the lost event", func() bool { return log.count("lost") == 1 })
	stop()
	returned(t, done, 30*time.Second)
	row := rowOf(t, db, q, j.ID)
	if row["owner"] != "another:1" || row["error"] != nil || log.count("failed") != 0 {
		t.Fatalf("the lost job after the worker let it go: %v (failed events %d)", row, log.count("failed"))
	}
}

// TestWorkerGracefulStop: a stop while a claim is held returns at once; a stop while a batch is in
// hand gives the unstarted jobs back at once (their claim uncounted) and lets the running one finish.
// Jobs start in the claim's order, oldest first.
func TestWorkerGracefulStop(t *testing.T) {
	db := liveClient(t)
	q := liveQueue(t, db, "wgrace")

	idle := &Worker{DB: db, Queue: q, Wait: 25 * time.Second}
	ctx, stop := context.WithCancel(bg)
	var claims eventLog
	claimed := make(chan struct{})
	idle.OnEvent = claims.add
	done := runWorker(ctx, idle, func(context.Context, Job) error { close(claimed); return nil })
	time.Sleep(200 * time.Millisecond) // most likely inside its held claim by now; either way it must stop
	stop()
	returned(t, done, 10*time.Second) // the held claim lasts 25 s: it was given up

	var log eventLog
	w := &Worker{DB: db, Queue: q, Batch: 5, Concurrency: 1, Wait: time.Second, DrainTimeout: time.Minute, OnEvent: log.add}
	for i := 0; i < 5; i++ {
		if _, err := w.Enqueue(bg, i, 0); err != nil {
			t.Fatal(err)
		}
	}
	started := make(chan Job, 5)
	finish := make(chan struct{})
	ctx, stop = context.WithCancel(bg)
	defer stop()
	done = runWorker(ctx, w, func(ctx context.Context, j Job) error {
		started <- j
		<-finish
		return ctx.Err() // nil: a graceful stop does not cancel a running job
	})
	running := <-started
	if running.Payload != int64(0) {
		t.Fatalf("the first job to start is %v, not the oldest of the claim", running.Payload)
	}
	stop()
	given := func() bool {
		n, err := db.From(q).Where("owner", "=", nil).Where("attempts", "=", 0).Count(bg)
		return err == nil && n == 4 && log.count("released") == 4 // the event follows the answer
	}
	eventually(t, "the four unstarted jobs given back while the fifth runs", given)
	if len(started) != 0 {
		t.Fatalf("%d jobs started after the stop", len(started))
	}
	close(finish)
	returned(t, done, 30*time.Second)
	if row := rowOf(t, db, q, running.ID); row != nil {
		t.Fatalf("the running job was not acked after the stop: %v", row)
	}
	if n, _ := db.From(q).Count(bg); n != 4 || log.count("stopped") != 1 {
		t.Fatalf("%d jobs left, stopped %d times", n, log.count("stopped"))
	}
	select {
	case <-claimed:
		t.Fatal("the idle worker ran a job")
	default:
	}
}

// TestWorkerHardStop: Close cancels running handlers and gives their jobs back; Shutdown whose ctx ends
// before the drain does the same.
func TestWorkerHardStop(t *testing.T) {
	db := liveClient(t)
	q := liveQueue(t, db, "whard")
	for _, hard := range []string{"close", "shutdown"} {
		w := &Worker{DB: db, Queue: q, Batch: 2, Concurrency: 2, Wait: time.Second, DrainTimeout: time.Hour}
		for i := 0; i < 2; i++ {
			if _, err := w.Enqueue(bg, i, 0); err != nil {
				t.Fatal(err)
			}
		}
		var running sync.WaitGroup
		running.Add(2)
		done := runWorker(bg, w, func(ctx context.Context, j Job) error {
			running.Done()
			<-ctx.Done()
			return ctx.Err()
		})
		running.Wait()
		if hard == "close" {
			w.Close()
		} else {
			sctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
			if err := w.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Shutdown past its ctx: %v", err)
			}
			cancel()
		}
		returned(t, done, 30*time.Second)
		if n, err := db.From(q).Where("owner", "=", nil).Where("attempts", "=", 0).Count(bg); err != nil || n != 2 {
			t.Fatalf("%s: %d jobs given back, want 2 (%v)", hard, n, err)
		}
		if err := w.Run(bg, func(context.Context, Job) error { return nil }); err != nil {
			t.Fatalf("Run after a stop: %v", err)
		}
		if _, err := db.From(q).Delete(bg, All()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWorkerPanicFailsJob: a panicking handler fails its job with the panic's text and the worker goes
// on to the next job.
func TestWorkerPanicFailsJob(t *testing.T) {
	db := liveClient(t)
	q := liveQueue(t, db, "wpanic")
	var log eventLog
	w := &Worker{DB: db, Queue: q, Batch: 1, Wait: time.Second, Backoff: func(int64) time.Duration { return time.Hour }, OnEvent: log.add}
	for _, p := range []string{"boom", "fine"} {
		if _, err := w.Enqueue(bg, p, 0); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(bg)
	defer stop()
	done := runWorker(ctx, w, func(ctx context.Context, j Job) error {
		if j.Payload == "boom" {
			panic("the handler blew up")
		}
		return nil
	})
	eventually(t, "the second job acked after the first panicked", func() bool { return log.count("done") == 1 })
	stop()
	returned(t, done, 30*time.Second)
	rows, err := db.From(q).Rows(bg)
	if err != nil || len(rows) != 1 {
		t.Fatalf("%v %v", rows, err)
	}
	if r := rows[0]; r["payload"] != "boom" || r["owner"] != nil || r["attempts"] != int64(1) ||
		r["error"] != "panic: the handler blew up" || r["run_at"] == nil {
		t.Fatalf("the panicked job: %v", r)
	}
}

// TestWorkerDeadLetters: a job claimed past MaxAttempts is dead-lettered without running; one that fails
// at MaxAttempts is dead with its error.
func TestWorkerDeadLetters(t *testing.T) {
	db := liveClient(t)
	q := liveQueue(t, db, "wdead")
	for payload, attempts := range map[string]int{"past": 3, "last": 2} {
		if _, err := db.From(q).Insert(bg, D("payload", payload, "run_at", Expr("now()"), "attempts", attempts)); err != nil {
			t.Fatal(err)
		}
	}
	var log eventLog
	w := &Worker{DB: db, Queue: q, MaxAttempts: 3, Wait: time.Second, OnEvent: log.add}
	var ran []any
	var mu sync.Mutex
	ctx, stop := context.WithCancel(bg)
	defer stop()
	done := runWorker(ctx, w, func(ctx context.Context, j Job) error {
		mu.Lock()
		ran = append(ran, j.Payload)
		mu.Unlock()
		return errors.New("smtp timeout")
	})
	eventually(t, "two dead letters", func() bool { return log.count("dead") == 2 })
	stop()
	returned(t, done, 30*time.Second)
	if len(ran) != 1 || ran[0] != "last" {
		t.Fatalf("ran %v, want only the job within its attempts", ran)
	}
	rows, err := db.From(q).Order("id", "asc").Rows(bg)
	if err != nil || len(rows) != 2 {
		t.Fatalf("%v %v", rows, err)
	}
	want := map[any]string{"past": "attempts exhausted", "last": "smtp timeout"}
	for _, r := range rows {
		if r["run_at"] != nil || r["owner"] != nil || r["error"] != want[r["payload"]] {
			t.Errorf("a dead letter: %v", r)
		}
	}
}

// TestWorkerGiveBackByOwner: what a claim took is given back by its owner alone (the claim a stop gave
// up, whose answer never came), uncounted; other owners' jobs are left alone.
func TestWorkerGiveBackByOwner(t *testing.T) {
	db := liveClient(t)
	q := liveQueue(t, db, "wowner")
	w := &Worker{DB: db, Queue: q, Batch: 2, Wait: time.Second}
	for i := 0; i < 3; i++ {
		if _, err := w.Enqueue(bg, i, 0); err != nil {
			t.Fatal(err)
		}
	}
	mine, err := w.Claim(bg)
	if err != nil || len(mine) != 2 {
		t.Fatalf("%v %v", mine, err)
	}
	other, err := w.Claim(bg)
	if err != nil || len(other) != 1 {
		t.Fatalf("%v %v", other, err)
	}
	rows, err := w.giveBackOwner(bg, db, mine[0].Owner)
	if err != nil || len(rows) != 2 {
		t.Fatalf("given back %v, %v", rows, err)
	}
	ready, err := db.From(q).Where("owner", "=", nil).Where("attempts", "=", 0).WhereCond(Raw("run_at <= now()")).Count(bg)
	if err != nil || ready != 2 || rowOf(t, db, q, other[0].ID)["owner"] != other[0].Owner {
		t.Fatalf("%d ready after the give back (%v), the other claim's job %v", ready, err, rowOf(t, db, q, other[0].ID))
	}
}

// TestWorkerKeepDone: with KeepDone an acked job stays, marked done, apart from dead letters.
func TestWorkerKeepDone(t *testing.T) {
	db := liveClient(t)
	q := "wkeep_" + randomHex()
	if _, err := db.Exec(bg, "create collection "+q+" (payload json, run_at timestamp @sorted, owner text, attempts int, error text, done_at timestamp)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(bg, "drop collection "+q) })
	var log eventLog
	w := &Worker{DB: db, Queue: q, KeepDone: true, MaxAttempts: 1, Wait: time.Second, OnEvent: log.add}
	for _, p := range []string{"ok", "bad"} {
		if _, err := w.Enqueue(bg, p, 0); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(bg)
	defer stop()
	done := runWorker(ctx, w, func(ctx context.Context, j Job) error {
		if j.Payload == "bad" {
			return errors.New("no such address")
		}
		return nil
	})
	eventually(t, "one done, one dead", func() bool { return log.count("done") == 1 && log.count("dead") == 1 })
	stop()
	returned(t, done, 30*time.Second)
	rows, err := db.From(q).Order("id", "asc").Rows(bg)
	if err != nil || len(rows) != 2 {
		t.Fatalf("%v %v", rows, err)
	}
	if r := rows[0]; r["payload"] != "ok" || r["owner"] != nil || r["run_at"] != nil || r["done_at"] == nil || r["error"] != nil {
		t.Fatalf("kept done: %v", r)
	}
	if r := rows[1]; r["payload"] != "bad" || r["run_at"] != nil || r["done_at"] != nil || r["error"] != "no such address" {
		t.Fatalf("dead letter: %v", r)
	}
}

// TestWorkerConcurrencyBound: ten jobs of one claim run three at a time, never more.
func TestWorkerConcurrencyBound(t *testing.T) {
	db := liveClient(t)
	q := liveQueue(t, db, "wconc")
	w := &Worker{DB: db, Queue: q, Batch: 10, Concurrency: 3, Wait: time.Second}
	for i := 0; i < 10; i++ {
		if _, err := w.Enqueue(bg, i, 0); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	active, most, ran := 0, 0, 0
	three := make(chan struct{})
	var once sync.Once
	ctx, stop := context.WithCancel(bg)
	defer stop()
	done := runWorker(ctx, w, func(ctx context.Context, j Job) error {
		mu.Lock()
		active++
		ran++
		if active > most {
			most = active
		}
		if active == 3 {
			once.Do(func() { close(three) })
		}
		mu.Unlock()
		<-three // the first three wait for each other: fewer slots than three never get past here
		mu.Lock()
		active--
		mu.Unlock()
		return nil
	})
	eventually(t, "every job acked", func() bool { n, err := db.From(q).Count(bg); return err == nil && n == 0 })
	stop()
	returned(t, done, 30*time.Second)
	if most != 3 || ran != 10 {
		t.Fatalf("at most %d at once (want 3), %d ran", most, ran)
	}
}

// TestWorkerSurvivesRestart: the server stopped and started again on its file, and every connection cut,
// under a running worker: it retries, goes on, and every job is acked; nothing is lost or left leased.
func TestWorkerSurvivesRestart(t *testing.T) {
	liveClient(t)
	file := filepath.Join(t.TempDir(), "queue.fenec")
	srv := startServer(t, "--file", file)
	px := newProxy(t, srv.addr)
	db := New(px.url())
	if _, err := db.Exec(bg, strings.ReplaceAll(defaultSchema, "{q}", "jobs")); err != nil {
		t.Fatal(err)
	}
	const jobs = 40
	var log eventLog
	w := &Worker{DB: db, Queue: "jobs", Batch: 4, Concurrency: 2, Lease: 5 * time.Second, Wait: 2 * time.Second,
		Timeout: 3 * time.Second, RetryMax: 500 * time.Millisecond, OnEvent: log.add}
	for i := 0; i < jobs; i++ {
		if _, err := w.Enqueue(bg, i, 0); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	handled := map[int64]int{}
	gate := make(chan struct{}) // the 11th job on waits for the restart
	ctx, stop := context.WithCancel(bg)
	defer stop()
	done := runWorker(ctx, w, func(ctx context.Context, j Job) error {
		mu.Lock()
		handled[j.Payload.(int64)]++
		n := len(handled)
		mu.Unlock()
		if n > 10 {
			<-gate
		}
		return nil
	})
	eventually(t, "ten jobs acked", func() bool { return log.count("done") >= 10 })

	px.cut()
	srv.stop()
	px.setTarget("") // connections accepted and closed at once, as a server going down
	eventually(t, "the worker retrying", func() bool { return log.count("retry") >= 3 })
	srv = startServer(t, "--file", file)
	px.setTarget(srv.addr)
	close(gate)
	eventually(t, "every job acked after the restart", func() bool {
		n, err := New(srv.url).From("jobs").Count(bg)
		return err == nil && n == 0
	})
	px.cut()
	direct := &Worker{DB: New(srv.url), Queue: "jobs"} // the test's own connections were cut too
	if _, err := direct.Enqueue(bg, int64(jobs), 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a job enqueued after the cut acked", func() bool {
		n, err := direct.DB.From("jobs").Count(bg)
		return err == nil && n == 0
	})
	stop()
	returned(t, done, 30*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != jobs+1 {
		t.Fatalf("%d of %d jobs handled", len(handled), jobs+1)
	}
}

// ownServer is a fenec-server of a test's own.
type ownServer struct {
	cmd  *exec.Cmd
	url  string // http://127.0.0.1:<port>
	addr string // 127.0.0.1:<port>
	once sync.Once
}

// startServer starts .venv/bin/fenec-server on 127.0.0.1:0 with args, and stops it when the test ends.
func startServer(t *testing.T, args ...string) *ownServer {
	t.Helper()
	exe := filepath.Join(repoRoot(), ".venv", "bin", "fenec-server")
	if _, err := os.Stat(exe); err != nil {
		t.Skip("no fenec-server at .venv/bin")
	}
	s := &ownServer{cmd: exec.Command(exe, append([]string{"--http", "127.0.0.1:0"}, args...)...)}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if i := strings.Index(sc.Text(), "listening on: "); i >= 0 {
				found <- strings.Fields(sc.Text()[i+len("listening on: "):])[0]
			}
		}
	}()
	select {
	case s.url = <-found:
	case <-time.After(60 * time.Second):
		t.Fatal("the server did not say where it listens")
	}
	s.addr = strings.TrimPrefix(s.url, "http://")
	return s
}

// stop sends SIGTERM and waits for the server to exit.
func (s *ownServer) stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		_ = s.cmd.Wait()
	})
}

// proxy forwards TCP connections to a target it may change, and cuts them on demand.
type proxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *proxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) setTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

// cut closes every connection open through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		var out net.Conn
		if target != "" {
			out, err = net.Dial("tcp", target)
		}
		if target == "" || err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(out, in)
		go pipe(in, out)
	}
}
