package fenecdb

// The worker helper: the "A worker" loop of the job-queues page, on the builder.
//
// A queue is a collection (payload json, run_at timestamp @sorted, owner text, attempts int, error text,
// and done_at timestamp when finished jobs are kept). Every step is one statement, and each names the
// owner its claim wrote, so a worker whose lease lapsed finds out with a 412 instead of acking a job
// another worker holds:
//
//	enqueue   put q {payload: $1, run_at: now() + $2, attempts: $3}
//	claim     set q {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3}
//	          where run_at <= now() order run_at asc limit <batch> returning *      (held with Fenec-Wait)
//	ack       del q where id = $1 and owner = $2 require 1
//	          (KeepDone: set q {owner: $1, run_at: $2, done_at: now()} where id = $3 and owner = $4 require 1,
//	          owner and run_at null)
//	extend    set q {run_at: now() + $1} where id = $2 and owner = $3 require 1
//	          (Run: each job in hand every Heartbeat, see worker_run.go)
//	fail      set q {owner: $1, error: $2, run_at: case when attempts >= $3 then null
//	          else now() + $4 end} where id = $5 and owner = $6 require 1
//	          ($4: Backoff of the attempts the claim read, in ms)
//	dead      set q {owner: $1, error: $2, run_at: $3} where id = $4 and owner = $5 require 1
//	          (null, "attempts exhausted", null: claimed past MaxAttempts, not run)
//	give back set q {owner: $1, run_at: now(), attempts: coalesce(attempts, 0) + $2} where id = $3 and owner = $4
//	          (null, -1: the job never ran, or was cut short by a stop; no require); and for a claim
//	          given up on a stop, whose answer may have been lost, by its owner alone:
//	          set q {...the same...} where run_at > now() and owner = $3 returning id, attempts
//
// Owners are claim tokens, "<name>:<counter>", unique for each claim, so two claims of one job by the
// same worker are told apart too. Run (worker_run.go) drives these; Claim, Ack, Extend and Fail are here
// for loops of one's own.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Worker claims jobs of one queue and acks, extends or fails them: the worker of the contract every SDK
// follows (conformance/worker-contract.json, docs/workers.md). Zero fields take their defaults. Set the
// fields before the first call and leave them; Run, Shutdown and Close may be called from several
// goroutines.
type Worker struct {
	DB          *Client       // the client it sends through (required)
	Queue       string        // the queue's collection (required)
	Name        string        // owners are Name:<counter>; a random "w-<8 hex digits>" when empty
	Batch       int64         // jobs one claim takes at most; 10 when 0
	Concurrency int           // Run runs up to this many jobs of a batch at once; 1 when 0, at most Batch
	Lease       time.Duration // how long a claimed job stays the worker's; 30 s when 0
	Wait        time.Duration // how long a claim is held at the server for a job; 30 s when 0, not held when < 0
	Heartbeat   time.Duration // Run extends every job in hand this often; Lease/3 when 0, never when < 0
	MaxAttempts int64         // a job failed at this many attempts is dead (run_at null); 5 when 0
	// Backoff is how long a failed job waits before it is ready again, from the attempts its claim read;
	// attempts² seconds when nil.
	Backoff func(attempts int64) time.Duration
	// DrainTimeout: once Run is told to stop gracefully, how long the jobs already running may go on
	// (and the stop's calls be retried) before their ctx is cancelled and they are given back; 30 s when
	// 0, none when < 0.
	DrainTimeout time.Duration
	// RetryMin and RetryMax: after a connection error, a timeout or a 5xx, Run pauses a random time up to
	// RetryMin doubled at each failure in a row, at most RetryMax (100 ms and 5 s when 0), and tries again.
	RetryMin, RetryMax time.Duration
	// Timeout bounds each request Run sends (10 s when 0); a held claim gets Wait on top. The client's
	// own timeout bounds it too.
	Timeout time.Duration
	// KeepDone: an acked job is kept, marked done (owner null, run_at null, done_at now()), not deleted.
	KeepDone bool
	// OnEvent, when set, is told what Run does (see Event). Calls are one at a time; keep it short. A
	// panic in it is logged and ignored.
	OnEvent func(Event)

	// DeadAfter is the old name of MaxAttempts, read when MaxAttempts is 0.
	//
	// Deprecated: use MaxAttempts.
	DeadAfter int64

	once    sync.Once
	name    string
	nonce   string // this Worker value's, in its idempotency keys: a name reused by a restarted process never replays
	counter atomic.Int64
	stops   stopper
	eventMu sync.Mutex
}

// Job is one claimed job.
type Job struct {
	ID       any    // the row's id
	Owner    string // the claim token its claim wrote; ack, extend and fail require it
	Attempts int64  // claims of this job so far, this one included
	Payload  any    // the payload field as answered
	Row      Row    // the whole row as the claim wrote it
}

// Event is one thing Run did, told to OnEvent. A field that does not apply is its zero value. Type is
// one of:
//
//	claimed   a claim took Count jobs (Owner is its token); never for an empty claim
//	start     a job's handler is about to run
//	done      a job was acked (deleted, or kept done)
//	failed    a job failed (Error: why); it is ready again after Delay
//	dead      a job became a dead letter: failed at MaxAttempts, or claimed past it (not run)
//	released  a job was given back on a stop: unstarted, or cancelled at the drain's end or a hard stop
//	lost      a job's lease was lost (Call: the extend, ack, fail or dead answered 412); its handler's ctx is cancelled
//	retry     a call (Call) failed on the network, by its timeout or with a 5xx (Error); sent again after Delay
//	primary   the client's primary changed (URL: the server writes and claims go to now)
//	stopped   Run is about to return; the last event of a Run
type Event struct {
	Type     string        // one of the types above
	Worker   string        // the worker's name
	ID       any           // the job's id
	Owner    string        // the claim's owner token
	Attempts int64         // the job's attempts, this claim's included
	Count    int           // claimed: jobs the claim took
	Error    string        // failed, dead: the handler's message; retry: the network's or the server's
	Delay    time.Duration // retry: the pause before the next try; failed: until the job is ready again
	Call     string        // lost, retry: claim, ack, extend, fail, dead or release
	URL      string        // primary: the new primary's URL
}

// The event types, as the contract names them (Event.Type).
const (
	evClaimed  = "claimed"
	evStart    = "start"
	evDone     = "done"
	evFailed   = "failed"
	evDead     = "dead"
	evReleased = "released"
	evLost     = "lost"
	evRetry    = "retry"
	evPrimary  = "primary"
	evStopped  = "stopped"
)

// eventTypes lists every type an Event may have; the contract test checks it against the contract.
var eventTypes = []string{evClaimed, evStart, evDone, evFailed, evDead, evReleased, evLost, evRetry, evPrimary,
	evStopped}

// The calls a retry or lost event names (Event.Call), and the first word of each call's Idempotency-Key.
const (
	callClaim   = "claim"
	callAck     = "ack"
	callExtend  = "extend"
	callFail    = "fail"
	callDead    = "dead"
	callRelease = "release"
)

func (w *Worker) defaults() {
	w.once.Do(func() {
		var b [8]byte
		_, _ = rand.Read(b[:])
		w.nonce = hex.EncodeToString(b[:])
		w.name = w.Name
		if w.name == "" {
			w.name = "w-" + w.nonce[:8]
		}
		w.stops.init()
	})
}

func orDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func (w *Worker) lease() time.Duration { return orDuration(w.Lease, 30*time.Second) }

func (w *Worker) wait() time.Duration { return max(0, orDuration(w.Wait, 30*time.Second)) }

func (w *Worker) drainTimeout() time.Duration {
	return max(0, orDuration(w.DrainTimeout, 30*time.Second))
}

func (w *Worker) requestTimeout() time.Duration { return orDuration(w.Timeout, 10*time.Second) }

// backoff is how long a failed job of these attempts waits: Backoff, or attempts² seconds.
func (w *Worker) backoff(attempts int64) time.Duration {
	if w.Backoff != nil {
		return w.Backoff(attempts)
	}
	return time.Second * time.Duration(attempts*attempts)
}

func (w *Worker) batch() int64 {
	if w.Batch <= 0 {
		return 10
	}
	return w.Batch
}

func (w *Worker) maxAttempts() int64 {
	switch {
	case w.MaxAttempts > 0:
		return w.MaxAttempts
	case w.DeadAfter > 0:
		return w.DeadAfter
	}
	return 5
}

func (w *Worker) concurrency() int {
	n := w.Concurrency
	if n <= 0 {
		n = 1
	}
	if int64(n) > w.batch() {
		n = int(w.batch())
	}
	return n
}

func (w *Worker) heartbeat() time.Duration {
	if w.Heartbeat == 0 {
		return w.lease() / 3
	}
	return w.Heartbeat
}

func (w *Worker) nextOwner() string {
	return w.name + ":" + strconv.FormatInt(w.counter.Add(1), 10)
}

func (w *Worker) queue() *Query { return w.queueOn(w.DB) }

func (w *Worker) queueOn(db *Client) *Query {
	if db == nil {
		q := From(w.Queue)
		q.err = refuse("a Worker needs its DB")
		return q
	}
	return db.From(w.Queue)
}

func (w *Worker) mine(db *Client, j Job) *Query {
	return w.queueOn(db).Where("id", "=", j.ID).Where("owner", "=", j.Owner)
}

// Enqueue puts one job into the queue, ready after delay (0: at once), and answers the put's Result:
// its Affected is the count written, 1 (a put answers no id). It is the one way to make a job a worker
// claims (one without run_at, or with attempts null, is never claimed). Under a policy, a producer
// token's put gets the fields its token pins (the queue) filled in.
func (w *Worker) Enqueue(ctx context.Context, payload any, delay time.Duration) (Result, error) {
	return w.queue().Insert(ctx, D("payload", payload, "run_at", Expr("now() + ?", delay.Milliseconds()), "attempts", 0))
}

// Claim takes up to Batch ready jobs, oldest first, each the worker's for Lease. It is held at the server
// for up to Wait while no job is ready, and answers no job when the wait runs out. Cancelling ctx gives
// the held claim up.
func (w *Worker) Claim(ctx context.Context) ([]Job, error) {
	w.defaults()
	jobs, _, err := w.claimAs(ctx, w.DB, w.nextOwner())
	return jobs, err
}

// claimAs sends the claim for owner through db (which may carry an idempotency key) and answers its jobs
// and whether the answer was a replay.
func (w *Worker) claimAs(ctx context.Context, db *Client, owner string) ([]Job, bool, error) {
	if db != nil && w.wait() > 0 {
		db = db.Wait(w.wait())
	}
	res, err := w.queueOn(db).WhereCond(Raw("run_at <= now()")).Order("run_at", "asc").Limit(w.batch()).
		Update(ctx, D("owner", owner, "run_at", Expr("now() + ?", w.lease().Milliseconds()), "attempts", Inc(1)),
			Returning("*"))
	if err != nil {
		return nil, false, err
	}
	jobs := make([]Job, len(res.Rows))
	for i, r := range res.Rows {
		attempts, _ := r["attempts"].(int64)
		jobs[i] = Job{ID: r["id"], Owner: owner, Attempts: attempts, Payload: r["payload"], Row: r}
	}
	return jobs, res.Replayed, nil
}

// Ack finishes a job: deletes it, or with KeepDone marks it done. A *Error with CodeUnmet means the job
// is no longer the worker's: its lease lapsed and another claim took it.
func (w *Worker) Ack(ctx context.Context, j Job) error { return w.ackOn(ctx, w.DB, j) }

func (w *Worker) ackOn(ctx context.Context, db *Client, j Job) error {
	var err error
	if w.KeepDone {
		_, err = w.mine(db, j).Update(ctx, D("owner", nil, "run_at", nil, "done_at", Expr("now()")), Require(1))
	} else {
		_, err = w.mine(db, j).Delete(ctx, Require(1))
	}
	return err
}

// Extend moves the job's lease to Lease from now. CodeUnmet: the job is no longer the worker's.
func (w *Worker) Extend(ctx context.Context, j Job) error { return w.extendOn(ctx, w.DB, j) }

func (w *Worker) extendOn(ctx context.Context, db *Client, j Job) error {
	_, err := w.mine(db, j).Update(ctx, D("run_at", Expr("now() + ?", w.lease().Milliseconds())), Require(1))
	return err
}

// Fail gives the job back with reason, ready again after its backoff (Backoff(attempts), attempts²
// seconds by default), or dead (run_at null, taken by no claim) once it has been tried MaxAttempts times.
// CodeUnmet: the job is no longer the worker's.
func (w *Worker) Fail(ctx context.Context, j Job, reason string) error {
	return w.failOn(ctx, w.DB, j, reason)
}

func (w *Worker) failOn(ctx context.Context, db *Client, j Job, reason string) error {
	runAt := Expr("case when attempts >= ? then null else now() + ? end", w.maxAttempts(), w.backoff(j.Attempts).Milliseconds())
	_, err := w.mine(db, j).Update(ctx, D("owner", nil, "error", reason, "run_at", runAt), Require(1))
	return err
}

// failDelay is the backoff Fail gives a job of these attempts (0 for one it makes dead).
func (w *Worker) failDelay(attempts int64) time.Duration {
	if attempts >= w.maxAttempts() {
		return 0
	}
	return w.backoff(attempts)
}

// deadOn fails a job claimed past MaxAttempts for good, without running it.
func (w *Worker) deadOn(ctx context.Context, db *Client, j Job) error {
	_, err := w.mine(db, j).Update(ctx, D("owner", nil, "error", "attempts exhausted", "run_at", nil), Require(1))
	return err
}

// errGone is a give back that touched nothing: the job was no longer this claim's.
var errGone = errors.New("the job is no longer this claim's")

// giveBackOn makes a job ready again at once, its claim uncounted. It has no require: a job that is no
// longer ours is left as it is (errGone), not refused.
func (w *Worker) giveBackOn(ctx context.Context, db *Client, j Job) error {
	res, err := w.mine(db, j).Update(ctx, D("owner", nil, "run_at", Expr("now()"), "attempts", Inc(-1)))
	if err == nil && res.Affected == 0 {
		return errGone
	}
	return err
}

// giveBackOwner gives back whatever a claim of this owner took: the claim whose answer never came. Its
// jobs are leased, run_at ahead: the @sorted run_at walks those alone, not the ready backlog.
func (w *Worker) giveBackOwner(ctx context.Context, db *Client, owner string) ([]Row, error) {
	res, err := w.queueOn(db).WhereCond(Raw("run_at > now()")).Where("owner", "=", owner).
		Update(ctx, D("owner", nil, "run_at", Expr("now()"), "attempts", Inc(-1)), Returning("id", "attempts"))
	return res.Rows, err
}

// IsStale tells whether err is the 412 of an ack, extend or fail whose job is no longer the worker's.
func IsStale(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeUnmet
}
