package fenecdb

// The worker helper: the "A worker" loop of the job-queues page, on the builder.
//
// A queue is a collection (payload json, run_at timestamp @sorted, owner text, attempts int, error text).
// Every step is one statement, and each names the owner its claim wrote, so a worker whose lease lapsed
// finds out with a 412 instead of acking a job another worker holds:
//
//	enqueue  put q {payload: $1, run_at: now() + $2, attempts: $3}
//	claim    set q {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3}
//	         where run_at <= now() order run_at asc limit <batch> returning *      (held with Fenec-Wait)
//	ack      del q where id = $1 and owner = $2 require 1
//	extend   set q {run_at: now() + $1} where id = $2 and owner = $3 require 1
//	fail     set q {owner: $1, error: $2, run_at: case when attempts >= $3 then null
//	         else now() + $4 * attempts * attempts end} where id = $5 and owner = $6 require 1
//
// Owners are claim tokens, "<name>:<counter>", unique for each claim, so two claims of one job by the
// same worker are told apart too. Run may be called from several goroutines on one Worker.

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

// Worker claims jobs of one queue and acks, extends or fails them. Zero fields take their defaults.
type Worker struct {
	DB        *Client       // the client it sends through (required)
	Queue     string        // the queue's collection (required)
	Name      string        // owners are Name:<counter>; a random "w-<hex>" when empty
	Batch     int64         // jobs one claim takes; 10 when 0
	Lease     time.Duration // how long a claimed job stays the worker's; 30 s when 0
	Wait      time.Duration // how long a claim is held at the server for a job; 30 s when 0
	Heartbeat time.Duration // Run extends a running job's lease this often; Lease/3 when 0, never when < 0
	Backoff   time.Duration // a failed job comes back after Backoff * attempts²; 1 s when 0
	DeadAfter int64         // a job failed at this many attempts is dead (run_at null); 5 when 0

	once    sync.Once
	name    string
	counter atomic.Int64
}

// Job is one claimed job.
type Job struct {
	ID       any    // the row's id
	Owner    string // the claim token its claim wrote; ack, extend and fail require it
	Attempts int64  // claims of this job so far, this one included
	Payload  any    // the payload field as answered
	Row      Row    // the whole row as the claim wrote it
}

func (w *Worker) defaults() {
	w.once.Do(func() {
		w.name = w.Name
		if w.name == "" {
			var b [4]byte
			_, _ = rand.Read(b[:])
			w.name = "w-" + hex.EncodeToString(b[:])
		}
	})
}

func orDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func (w *Worker) lease() time.Duration { return orDuration(w.Lease, 30*time.Second) }

func (w *Worker) queue() *Query {
	if w.DB == nil {
		q := From(w.Queue)
		q.err = refuse("a Worker needs its DB")
		return q
	}
	return w.DB.From(w.Queue)
}

// Enqueue puts one job, ready after delay (0: at once).
func (w *Worker) Enqueue(ctx context.Context, payload any, delay time.Duration) (Result, error) {
	return w.queue().Insert(ctx, D("payload", payload, "run_at", Expr("now() + ?", delay.Milliseconds()), "attempts", 0))
}

// Claim takes up to Batch ready jobs, oldest first, each the worker's for Lease. It is held at the server
// for up to Wait while no job is ready, and answers no job when the wait runs out. Cancelling ctx gives
// the held claim up.
func (w *Worker) Claim(ctx context.Context) ([]Job, error) {
	w.defaults()
	owner := w.name + ":" + strconv.FormatInt(w.counter.Add(1), 10)
	batch := w.Batch
	if batch == 0 {
		batch = 10
	}
	q := w.queue()
	if w.DB != nil {
		q.db = w.DB.Wait(orDuration(w.Wait, 30*time.Second))
	}
	res, err := q.WhereCond(Raw("run_at <= now()")).Order("run_at", "asc").Limit(batch).
		Update(ctx, D("owner", owner, "run_at", Expr("now() + ?", w.lease().Milliseconds()), "attempts", Inc(1)),
			Returning("*"))
	if err != nil {
		return nil, err
	}
	jobs := make([]Job, len(res.Rows))
	for i, r := range res.Rows {
		attempts, _ := r["attempts"].(int64)
		jobs[i] = Job{ID: r["id"], Owner: owner, Attempts: attempts, Payload: r["payload"], Row: r}
	}
	return jobs, nil
}

// Ack deletes a finished job. A *Error with CodeUnmet means the job is no longer the worker's: its lease
// lapsed and another claim took it.
func (w *Worker) Ack(ctx context.Context, j Job) error {
	_, err := w.queue().Where("id", "=", j.ID).Where("owner", "=", j.Owner).Delete(ctx, Require(1))
	return err
}

// Extend moves the job's lease to Lease from now. CodeUnmet: the job is no longer the worker's.
func (w *Worker) Extend(ctx context.Context, j Job) error {
	_, err := w.queue().Where("id", "=", j.ID).Where("owner", "=", j.Owner).
		Update(ctx, D("run_at", Expr("now() + ?", w.lease().Milliseconds())), Require(1))
	return err
}

// Fail gives the job back with reason, ready again after Backoff * attempts², or dead (run_at null,
// taken by no claim) once it has been tried DeadAfter times. CodeUnmet: the job is no longer the worker's.
func (w *Worker) Fail(ctx context.Context, j Job, reason string) error {
	deadAfter := w.DeadAfter
	if deadAfter == 0 {
		deadAfter = 5
	}
	backoff := orDuration(w.Backoff, time.Second).Milliseconds()
	_, err := w.queue().Where("id", "=", j.ID).Where("owner", "=", j.Owner).
		Update(ctx, D("owner", nil, "error", reason,
			"run_at", Expr("case when attempts >= ? then null else now() + ? * attempts * attempts end", deadAfter, backoff)),
			Require(1))
	return err
}

// IsStale tells whether err is the 412 of an ack, extend or fail whose job is no longer the worker's.
func IsStale(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeUnmet
}

// Run claims and handles jobs until ctx is cancelled, then answers nil. Each claimed job runs handle in
// a goroutine of its own; while it runs its lease is extended every Heartbeat (a job lost meanwhile
// cancels the ctx handle got). A nil from handle acks the job, an error fails it with the error's text.
// Once ctx is cancelled, a held claim is given up and no new one is sent; a job whose handler still
// returns nil is acked, one whose handler returns an error is left for its lease to lapse. A stale ack,
// extend or fail (another claim holds the job) is not an error of the loop; any other refusal or network
// error ends Run with it, after the jobs in hand are settled.
func (w *Worker) Run(ctx context.Context, handle func(ctx context.Context, j Job) error) error {
	for {
		if ctx.Err() != nil {
			return nil
		}
		jobs, err := w.Claim(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		errs := make([]error, len(jobs))
		var wg sync.WaitGroup
		for i := range jobs {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				errs[i] = w.handleOne(ctx, jobs[i], handle)
			}(i)
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
}

func (w *Worker) handleOne(ctx context.Context, j Job, handle func(context.Context, Job) error) error {
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost atomic.Bool
	beat := w.Heartbeat
	if beat == 0 {
		beat = w.lease() / 3
	}
	done := make(chan struct{})
	var beating sync.WaitGroup
	if beat > 0 {
		beating.Add(1)
		go func() {
			defer beating.Done()
			t := time.NewTicker(beat)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-jctx.Done():
					return
				case <-t.C:
					if err := w.Extend(jctx, j); IsStale(err) {
						lost.Store(true)
						cancel()
						return
					}
				}
			}
		}()
	}
	herr := handle(jctx, j)
	close(done)
	beating.Wait()
	if lost.Load() {
		return nil
	}
	if herr != nil && ctx.Err() != nil {
		// stopped mid-job: the job is left as it is, and its lease lapses for another claim (at least once)
		return nil
	}
	// the work is done even when the loop is being stopped: tell the server so, within a short bound
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), orDuration(w.DB.timeout, 30*time.Second))
	defer fcancel()
	var err error
	if herr == nil {
		err = w.Ack(fctx, j)
	} else {
		err = w.Fail(fctx, j, herr.Error())
	}
	if err == nil || IsStale(err) {
		return nil
	}
	return err
}
