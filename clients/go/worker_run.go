package fenecdb

// Run: the worker loop, its heartbeat and its two stops.
//
// One Run is a loop of batches: a held claim, then the batch's jobs. A dispatcher hands them one of
// Concurrency slots each in the claim's order (oldest first); each then runs its handler in a goroutine
// of its own and settles the job (ack, fail, dead-letter, give back). While a batch is in hand a heartbeat
// goroutine extends each unsettled job of it every Heartbeat, started or not, in a statement of its own
// under a key of its own (the beat's number counts from 1 in each batch):
//
//	set q {run_at: now() + $1} where id = $2 and owner = $3 require 1      key extend:<owner>:<id>:<beat>
//
// with one extend of a job in flight at a time: a beat that finds the last one still trying leaves that
// job to it. A 412 loses that job alone: another claim holds it.
//
// Each job is settled exactly once: whoever wins its settled flag (the handler's ack or fail, the
// heartbeat's lost, a stop's give back) sends the one statement, and closes the job's finished channel
// when it is done; a batch is over when every job's channel is closed.
//
// Slots: a job holds its Concurrency slot until it is settled (its ack or fail answered, or the job
// lost or given back), not merely until its handler returns. So while the server is away a worker never
// has more than Concurrency jobs run and unacknowledged, and an outage re-runs at most that many.
//
// The stops. Graceful (Run's ctx cancelled, or Shutdown): the held claim is given up, no claim is sent,
// jobs not started are given back at once, started ones run on, heartbeats and all, until the drain
// deadline (DrainTimeout after the stop); every call is retried until then. Hard (Close, Shutdown's ctx
// ended, or the drain deadline): every unsettled job's handler ctx is cancelled and the job given back,
// one try each, and every call still out is cut a grace of one second later, so Run returns within that
// second whether the server answers or not. A handler that ignores its ctx may still be running then;
// what it returns is dropped.
//
// The server going away is not an error of the loop: a call that fails on the way, times out or is
// answered a 5xx is tried again after a pause (RetryMin doubled at each failure in a row up to RetryMax,
// full jitter), the claim under the same owner and Idempotency-Key so that a retry after a lost answer is
// answered the jobs the first try took. Acks, fails, dead letters and give backs have keys of their own,
// and so has each job's extend at each beat; an extend is tried again after at most a Heartbeat.
// Any other refusal (a 4xx but a lost lease's 412) stops the run gracefully and Run returns it. A
// replica's 403 never reaches the worker while a failover is under way: the client follows it, and one
// naming a primary that cannot be reached answers that connection's failure, retried as above.
//
// Every call goes through the client's primary (client.go: it follows a replica's 403 and a server that
// cannot be reached); each time the primary changes while Run runs, a primary event tells its URL.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Run claims and handles jobs until it is stopped, and answers nil then. Each claimed job runs handle,
// at most Concurrency at once, with a ctx that is cancelled when the job's lease is lost (the heartbeat
// was refused: another claim holds it) or on a hard stop. A nil from handle acks the job; an error or a
// panic fails it with its text, and the worker goes on. A job claimed past MaxAttempts is failed for
// good without running.
//
// Cancelling ctx stops Run gracefully: no new claim, unstarted jobs given back at once, running ones
// finished within DrainTimeout (then cancelled and given back); Run returns when its jobs are settled.
// Shutdown does the same for every Run of the Worker, Close stops them at once. ctx's values reach the
// handlers' ctx, its cancellation does not.
//
// Connection errors, timeouts and 5xx answers are retried, never returned. Run returns an error only
// for a refusal no retry can mend (a 4xx other than a lost lease: a missing queue, a token the policy
// refuses, an expired one), after a graceful stop.
func (w *Worker) Run(ctx context.Context, handle func(ctx context.Context, j Job) error) error {
	w.defaults()
	if _, _, err := w.queue().ToFenecQL(); err != nil {
		return err
	}
	db := *w.DB
	db.ownRetries = true
	r := &run{w: w, db: &db, handle: handle, base: context.WithoutCancel(ctx),
		graceful: make(chan struct{}), hard: make(chan struct{}), finished: make(chan struct{}),
		slots: make(chan struct{}, w.concurrency())}
	var cutCalls context.CancelFunc
	r.calls, cutCalls = context.WithCancel(r.base)
	defer cutCalls()
	r.cutCalls = cutCalls
	if !w.stops.add(r) {
		w.emit(Event{Type: evStopped})
		return nil
	}
	defer w.stops.remove(r)
	unwatch := r.db.route.watch(func(url string) { w.emit(Event{Type: evPrimary, URL: url}) })
	defer unwatch()
	if ctx.Err() != nil {
		r.stopGracefully() // stopped before it began: not even one claim
	}
	var cancelClaim context.CancelFunc
	r.claimCtx, cancelClaim = context.WithCancel(r.calls)
	defer cancelClaim()
	go r.watch(ctx, cancelClaim)
	defer close(r.finished)

	for !closed(r.graceful) {
		jobs, err := r.claim()
		if err != nil {
			r.fail(err)
			break
		}
		if len(jobs) > 0 {
			r.runBatch(jobs)
		}
	}
	unwatch() // stopped is the last event
	w.emit(Event{Type: evStopped})
	return r.firstErr()
}

// Shutdown stops every Run of the Worker gracefully, as cancelling its ctx does, and waits for them to
// return. When ctx ends first, they are stopped hard (Close) and Shutdown answers ctx's error once they
// have returned. A Run called after Shutdown returns at once. A handler that wants its worker stopped
// cancels Run's ctx: Shutdown called from a handler waits for that handler too (until DrainTimeout).
func (w *Worker) Shutdown(ctx context.Context) error {
	w.defaults()
	runs := w.stops.stop(false)
	if waitRuns(ctx.Done(), runs) {
		return nil
	}
	w.Close()
	return ctx.Err()
}

// Close stops every Run of the Worker at once: running handlers' ctx cancelled, every job in hand given
// back. It returns when they have returned. A Run called after Close returns at once.
func (w *Worker) Close() {
	w.defaults()
	waitRuns(nil, w.stops.stop(true))
}

// stopper is the Worker's list of its Runs, for Shutdown and Close.
type stopper struct {
	mu       sync.Mutex
	graceful chan struct{}
	hard     chan struct{}
	runs     map[*run]struct{}
}

func (s *stopper) init() {
	s.graceful, s.hard, s.runs = make(chan struct{}), make(chan struct{}), map[*run]struct{}{}
}

// add lists a Run; false once the Worker is stopped.
func (s *stopper) add(r *run) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if closed(s.graceful) {
		return false
	}
	s.runs[r] = struct{}{}
	return true
}

func (s *stopper) remove(r *run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.runs, r)
}

// stop closes the graceful channel (and the hard one) and answers the Runs to wait for.
func (s *stopper) stop(hard bool) []*run {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !closed(s.graceful) {
		close(s.graceful)
	}
	if hard && !closed(s.hard) {
		close(s.hard)
	}
	runs := make([]*run, 0, len(s.runs))
	for r := range s.runs {
		runs = append(runs, r)
	}
	return runs
}

// waitRuns waits for every run to return; false when give is closed first.
func waitRuns(give <-chan struct{}, runs []*run) bool {
	for _, r := range runs {
		select {
		case <-r.finished:
		case <-give:
			return false
		}
	}
	return true
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// run is one call of Run.
type run struct {
	w        *Worker
	db       *Client // the Worker's DB, its retries left to Run
	handle   func(context.Context, Job) error
	base     context.Context // Run's ctx without its cancellation: the parent of every handler's ctx
	calls    context.Context // the parent of every request: cut a grace after the hard stop
	cutCalls context.CancelFunc
	claimCtx context.Context // cancelled by the graceful stop: it gives a held claim up
	graceful chan struct{}
	hard     chan struct{}
	finished chan struct{}
	slots    chan struct{} // Concurrency of them; a started job holds one until it is settled
	stopOnce sync.Once
	hardOnce sync.Once
	errMu    sync.Mutex
	err      error
}

// watch turns Run's ctx, Shutdown and Close into this run's graceful and hard stops, and the drain's end
// into a hard one.
func (r *run) watch(ctx context.Context, cancelClaim context.CancelFunc) {
	select {
	case <-ctx.Done():
	case <-r.w.stops.graceful:
	case <-r.graceful:
	case <-r.finished:
		return
	}
	r.stopGracefully()
	cancelClaim()
	drain := time.NewTimer(r.w.drainTimeout())
	defer drain.Stop()
	select {
	case <-drain.C:
	case <-r.w.stops.hard:
	case <-r.finished:
		return
	}
	r.hardOnce.Do(func() { close(r.hard) })
	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	select {
	case <-grace.C:
		r.cutCalls()
	case <-r.finished:
	}
}

// stopGrace is how long the give backs of a hard stop may take before every call still out is cut.
const stopGrace = time.Second

func (r *run) stopGracefully() { r.stopOnce.Do(func() { close(r.graceful) }) }

// fail keeps the first refusal no retry mends, and stops the run gracefully.
func (r *run) fail(err error) {
	r.errMu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.errMu.Unlock()
	r.stopGracefully()
}

func (r *run) firstErr() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

func (w *Worker) emit(e Event) {
	if w.OnEvent == nil {
		return
	}
	e.Worker = w.name
	w.eventMu.Lock()
	defer w.eventMu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			log.Printf("fenecdb: worker %s: OnEvent panicked on %s: %v", w.name, e.Type, p)
		}
	}()
	w.OnEvent(e)
}

// timeout bounds a request that is not held; held is for a held claim, which gets Wait on top.
func (w *Worker) timeout(held bool) time.Duration {
	if held {
		return w.wait() + w.requestTimeout()
	}
	return w.requestTimeout()
}

func (w *Worker) retryMin() time.Duration { return orDuration(w.RetryMin, 100*time.Millisecond) }

func (w *Worker) retryMax() time.Duration {
	return max(w.retryMin(), orDuration(w.RetryMax, 5*time.Second))
}

// retryDelay is the pause after the n-th failure in a row (from 0): full jitter under a doubling cap.
func (w *Worker) retryDelay(n int) time.Duration {
	limit, most := w.retryMin(), w.retryMax()
	for i := 0; i < n && limit < most; i++ {
		limit *= 2
	}
	if limit > most {
		limit = most
	}
	return time.Duration(rand.Int64N(int64(limit) + 1))
}

// transient tells a failure a retry may mend: no answer (refused, cut, timed out, unreadable), or a 5xx.
// Any other answer is the server's word on the request, and sending it again would be answered the same.
func transient(err error) bool {
	var q *QueryError
	if errors.As(err, &q) {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= 500
	}
	return true
}

func pause(d time.Duration, stop <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
	}
}

// claim sends one claim, retried under its owner and key until answered, and answers its jobs: none once
// the run is stopping. A claim given up may have taken jobs whose answer never came: they are given back
// by owner.
func (r *run) claim() ([]*jobState, error) {
	w := r.w
	owner := w.nextOwner()
	db := r.db.IdempotencyKey(callClaim + ":" + owner + "/" + w.nonce)
	unsure := false // a try went unanswered: it may have taken jobs
	for n := 0; ; n++ {
		if closed(r.graceful) {
			if unsure {
				r.giveBackOwner(owner)
			}
			return nil, nil
		}
		ctx, cancel := context.WithTimeout(r.claimCtx, w.timeout(true))
		jobs, replayed, err := w.claimAs(ctx, db, owner)
		cancel()
		if err != nil && closed(r.graceful) {
			r.giveBackOwner(owner)
			return nil, nil
		}
		if err != nil && !transient(err) {
			return nil, err
		}
		if err != nil {
			unsure = true
			d := w.retryDelay(n)
			w.emit(Event{Type: evRetry, Call: callClaim, Error: err.Error(), Delay: d})
			pause(d, r.graceful)
			continue
		}
		if len(jobs) > 0 {
			w.emit(Event{Type: evClaimed, Owner: owner, Count: len(jobs)})
		}
		states := make([]*jobState, len(jobs))
		for i, j := range jobs {
			states[i] = &jobState{Job: j, finished: make(chan struct{})}
			states[i].ctx, states[i].cancel = context.WithCancel(r.base)
		}
		if replayed && len(states) > 0 {
			// the answer of a try that went unanswered, maybe long ago: keep only the jobs still ours
			r.extendOnce(states) // unanswered: the heartbeat tries again
			kept := states[:0]
			for _, js := range states {
				if !js.settled.Load() {
					kept = append(kept, js)
				}
			}
			states = kept
		}
		return states, nil
	}
}

// giveBackOwner gives back what a claim whose answer never came took. One try: most often the claim
// took nothing, and a server that does not answer now would keep a stopping worker waiting for nothing
// more than its leases lapsing.
func (r *run) giveBackOwner(owner string) {
	ctx, cancel := context.WithTimeout(r.calls, r.w.timeout(false))
	defer cancel()
	rows, _ := r.w.giveBackOwner(ctx, r.db, owner)
	for _, row := range rows {
		attempts, _ := row["attempts"].(int64)
		r.w.emit(Event{Type: evReleased, ID: row["id"], Owner: owner, Attempts: attempts})
	}
}

// retrying runs a settling call until it is answered, or refused for good. Once the run is stopped hard
// it makes one last try without a pause, cut with every other call at the end of the stop's grace.
func (r *run) retrying(about Event, call func(ctx context.Context) error) error {
	for n := 0; ; n++ {
		ctx, cancel := context.WithTimeout(r.calls, r.w.timeout(false))
		err := call(ctx)
		cancel()
		if err == nil || !transient(err) || closed(r.hard) {
			return err
		}
		about.Type, about.Error, about.Delay = evRetry, err.Error(), r.w.retryDelay(n)
		r.w.emit(about)
		pause(about.Delay, r.hard)
	}
}

// jobState is a claimed job in the run's hands.
type jobState struct {
	Job
	ctx       context.Context
	cancel    context.CancelFunc
	settled   atomic.Bool   // won once, by whoever settles the job
	extending atomic.Bool   // an extend of the job is in flight: the heartbeat starts no other
	finished  chan struct{} // closed by the winner once its statement is answered
}

func (j *jobState) settle() bool { return j.settled.CompareAndSwap(false, true) }

// runBatch runs the jobs of one claim, and returns once each is settled.
func (r *run) runBatch(jobs []*jobState) {
	go r.dispatch(jobs)
	beat, endBeat := context.WithCancel(r.calls) // ended with the batch: it cuts the extends still out
	var beating sync.WaitGroup
	if r.w.heartbeat() > 0 {
		beating.Add(1)
		go func() {
			defer beating.Done()
			r.heartbeat(beat, jobs)
		}()
	}
	all := make(chan struct{})
	go func() {
		for _, js := range jobs {
			<-js.finished
		}
		close(all)
	}()
	select {
	case <-all:
	case <-r.hard:
		var back []*jobState
		for _, js := range jobs {
			if js.settle() {
				back = append(back, js)
			}
		}
		for _, js := range jobs {
			js.cancel()
		}
		for _, js := range back {
			go r.giveBack(js)
		}
		<-all
	}
	endBeat()
	beating.Wait()
	for _, js := range jobs {
		js.cancel()
	}
}

// dispatch starts the jobs in the order the claim answered them (oldest first), each once a slot is
// free. A job claimed past MaxAttempts is dead-lettered at once, unrun; once the run is stopping, a job
// not started is given back instead.
func (r *run) dispatch(jobs []*jobState) {
	w := r.w
	for _, js := range jobs {
		if js.Attempts > w.maxAttempts() && js.settle() {
			go r.settleWith(js, evDead, callDead, "attempts exhausted", func(ctx context.Context, db *Client) error {
				return w.deadOn(ctx, db, js.Job)
			})
		}
	}
	for _, js := range jobs {
		if js.settled.Load() {
			continue
		}
		held := false
		select {
		case r.slots <- struct{}{}:
			held = true
		case <-r.graceful:
		case <-js.ctx.Done(): // lost, or a hard stop, while waiting for a slot
		}
		if !held || closed(r.graceful) || js.ctx.Err() != nil {
			if held {
				<-r.slots
			}
			if js.settle() {
				go r.giveBack(js)
			}
			continue
		}
		w.emit(Event{Type: evStart, ID: js.ID, Owner: js.Owner, Attempts: js.Attempts})
		go r.runJob(js)
	}
}

// runJob runs the handler of a job that holds a slot, settles the job by what it returned, and frees
// the slot only once the job is settled (its ack or fail answered, or the job lost or given back).
func (r *run) runJob(js *jobState) {
	defer func() { <-r.slots }()
	w := r.w
	herr := callHandler(js.ctx, r.handle, js.Job)
	if !js.settle() {
		<-js.finished // lost, or given back by a hard stop: its outcome is no longer the worker's to tell
		return
	}
	if herr == nil {
		r.settleWith(js, evDone, callAck, "", func(ctx context.Context, db *Client) error { return w.ackOn(ctx, db, js.Job) })
		return
	}
	kind := evFailed
	if js.Attempts >= w.maxAttempts() {
		kind = evDead
	}
	r.settleWith(js, kind, callFail, herr.Error(), func(ctx context.Context, db *Client) error {
		return w.failOn(ctx, db, js.Job, herr.Error())
	})
}

// callHandler runs the handler; a panic is its failure, with the panic's value as the text.
func callHandler(ctx context.Context, handle func(context.Context, Job) error, j Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return handle(ctx, j)
}

// giveBack makes a job that is not running (or whose handler a hard stop cancelled) ready again.
func (r *run) giveBack(js *jobState) {
	r.settleWith(js, evReleased, callRelease, "", func(ctx context.Context, db *Client) error {
		return r.w.giveBackOn(ctx, db, js.Job)
	})
}

// settleWith sends the one statement (call, the Idempotency-Key's first word) that settles a job the
// caller won, under a key of its own, and tells the event: kind once answered (with why as its Error),
// lost on a 412, nothing for a give back that found the job no longer ours. A refusal no retry mends
// stops the run; a job still unanswered at the end of a hard stop is left for its lease to lapse.
func (r *run) settleWith(js *jobState, kind, call, why string, send func(context.Context, *Client) error) {
	defer close(js.finished)
	w := r.w
	db := r.db.IdempotencyKey(fmt.Sprintf("%s:%s:%v/%s", call, js.Owner, js.ID, w.nonce))
	about := Event{ID: js.ID, Owner: js.Owner, Attempts: js.Attempts, Call: call}
	err := r.retrying(about, func(ctx context.Context) error { return send(ctx, db) })
	switch {
	case err == nil:
		about.Type, about.Error, about.Call = kind, why, ""
		if kind == evFailed {
			about.Delay = w.failDelay(js.Attempts)
		}
		w.emit(about)
	case errors.Is(err, errGone):
	case IsStale(err):
		about.Type = evLost
		w.emit(about)
	case !transient(err):
		r.fail(err)
	}
}

// heartbeat extends each unsettled job of the batch every Heartbeat until beat ends, each on its own
// (extend), one extend of a job in flight at a time. It returns once every extend it started has returned.
func (r *run) heartbeat(beat context.Context, jobs []*jobState) {
	t := time.NewTicker(r.w.heartbeat())
	defer t.Stop()
	var extending sync.WaitGroup
	defer extending.Wait()
	for n := 1; ; n++ {
		select {
		case <-t.C:
		case <-beat.Done():
			return
		case <-r.hard:
			return
		}
		for _, js := range jobs {
			if js.settled.Load() || !js.extending.CompareAndSwap(false, true) {
				continue
			}
			extending.Add(1)
			go func() {
				defer extending.Done()
				defer js.extending.Store(false)
				r.extend(beat, js, n)
			}()
		}
	}
}

// extend moves one job's lease on, under the key of its beat, sent again after a pause (as every call is,
// but never more than a Heartbeat) while unanswered, until the job is settled, the batch is over or the
// run is stopped hard: then the job is the settling call's, or given back.
func (r *run) extend(beat context.Context, js *jobState, n int) {
	w := r.w
	db := r.extendKey(js, n)
	for fails := 0; ; fails++ {
		err := r.extendTry(beat, js, db)
		if err == nil || js.settled.Load() || beat.Err() != nil || closed(r.hard) {
			return
		}
		d := min(w.heartbeat(), w.retryDelay(fails))
		w.emit(Event{Type: evRetry, Call: callExtend, ID: js.ID, Owner: js.Owner, Attempts: js.Attempts,
			Error: err.Error(), Delay: d})
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-js.finished:
		case <-beat.Done():
		case <-r.hard:
		}
		t.Stop()
	}
}

// extendOnce tries each job's extend once, side by side, and returns when each is answered or given up:
// the check of a replayed claim's jobs, which loses those another claim holds now.
func (r *run) extendOnce(jobs []*jobState) {
	var tries sync.WaitGroup
	for _, js := range jobs {
		tries.Add(1)
		go func() {
			defer tries.Done()
			_ = r.extendTry(r.calls, js, r.extendKey(js, 0)) // unanswered: the heartbeat tries again
		}()
	}
	tries.Wait()
}

// extendKey is the client of the n-th beat's extend of js (0: the check of a replayed claim).
func (r *run) extendKey(js *jobState, n int) *Client {
	return r.db.IdempotencyKey(fmt.Sprintf("%s:%s:%v:%d/%s", callExtend, js.Owner, js.ID, n, r.w.nonce))
}

// extendTry sends one extend of js through db, cut when parent ends. A 412 loses the job, unless it was
// settled meanwhile (an extend that crossed its job's ack or fail is no news): its handler's ctx is
// cancelled. A refusal no retry mends stops the run. It answers the error of an extend that went unanswered (or was answered a
// 5xx), for the caller to try again.
func (r *run) extendTry(parent context.Context, js *jobState, db *Client) error {
	ctx, cancel := context.WithTimeout(parent, r.w.timeout(false))
	err := r.w.extendOn(ctx, db, js.Job)
	cancel()
	switch {
	case err == nil:
	case IsStale(err):
		if js.settle() {
			js.cancel()
			r.w.emit(Event{Type: evLost, Call: callExtend, ID: js.ID, Owner: js.Owner, Attempts: js.Attempts})
			close(js.finished)
		}
	case transient(err):
		return err
	default:
		r.fail(err)
	}
	return nil
}
