package com.fenecdb

import com.fenecdb.WorkerEvent.Type
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Deferred
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.NonCancellable
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitCancellation
import kotlinx.coroutines.cancel
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.delay
import kotlinx.coroutines.joinAll
import kotlinx.coroutines.launch
import kotlinx.coroutines.selects.select
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeoutOrNull
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicLong
import java.util.concurrent.atomic.AtomicReference
import kotlin.random.Random
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.nanoseconds
import kotlin.time.Duration.Companion.seconds
import kotlinx.coroutines.Job as Task

/**
 * The worker of `conformance/worker-contract.json` over the queue (collection) [queue] of [db], with the statements
 * of the "Workers" page:
 *
 *     claim    set q {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3}
 *                where run_at <= now() order run_at asc limit <batch> returning *    Fenec-Wait, key claim:<owner>
 *     extend   set q {run_at: now() + $1} where id = $2 and owner = $3 require 1   key extend:<owner>:<id>:<beat>
 *     ack      del q where id = $1 and owner = $2 require 1                        key ack:<owner>:<id>
 *              (keepDone: set q {owner: null, run_at: null, done_at: now()} where ... require 1)
 *     fail     set q {owner: null, error: $2, run_at: case when attempts >= <max> then null else now() + <backoff> end}
 *                where id = .. and owner = .. require 1                           key fail:<owner>:<id>
 *     dead     set q {owner: null, error: "attempts exhausted", run_at: null} where ... require 1  (claimed past max)
 *     release  set q {owner: null, run_at: now(), attempts: coalesce(attempts, 0) + -1} where id = .. and owner = ..
 *
 * [run] claims a batch under a fresh owner token `<name>:<n>`, dead-letters unrun every job claimed past
 * `maxAttempts`, runs the others through the handler, `concurrency` at a time in claim order, extends every job in
 * hand each `heartbeat`, and claims again once the batch is settled. A concurrency slot is freed only once its job is
 * settled (its ack or fail answered, the job lost or given back), so an outage re-runs at most `concurrency` jobs.
 *
 * Every call goes through [db]'s primary (it follows a replica's 403 and a server that cannot be reached: see
 * [FenecRemote]: while a failover is under way, a replica naming a primary that is gone throws that connection's
 * failure); each time the primary changes while [run] runs, a `PRIMARY` event tells its URL.
 *
 * What is retried: a call that failed on the network, by its `timeout` or with a 5xx is sent again under the same
 * `Idempotency-Key` after a pause (full jitter below a ceiling from `retryMin` doubling to `retryMax`), for as long
 * as the worker runs. A 412 on a job's call means its lease was lost (a `LOST` event; the handler is cancelled; a
 * give-back met by a 412 says nothing). Any other answer ends [run]: the worker stops as a graceful stop does, then
 * [run] throws that [FenecException].
 *
 * A stop has a deadline: `drainTimeout` after a graceful [stop], at once for a hard one (the earlier wins). At the
 * deadline what still runs is cancelled and given back; no call of a stopping worker is sent (or sent again) past
 * the deadline and its [GRACE], and a call in flight is cut there, so [run] returns within `drainTimeout` + 1 s of a
 * stop whether the server answers or not; a job whose give-back could not be sent comes back when its lease runs
 * out (no event: it was neither given back nor lost).
 *
 * The handler runs in the context of the coroutine that called [run] (its dispatcher), in a scope of the worker's
 * own, so that the worker can stop waiting on a handler it cancelled; the worker's bookkeeping (heartbeat,
 * give-backs) runs on [Dispatchers.Default], so a handler that blocks its thread does not starve the heartbeat.
 */
class Worker(val db: FenecRemote, val queue: String, val options: WorkerOptions = WorkerOptions()) {

    val name: String get() = options.name

    /** Jobs acknowledged; failed by their handler (dead ones included); dead letters; given back; lost. */
    val acked = AtomicLong()
    val failed = AtomicLong()
    val dead = AtomicLong()
    val released = AtomicLong()
    val lost = AtomicLong()

    private val jobs = JobQueue(db, queue)
    private val concurrency = minOf(options.concurrency, options.batch)
    private val calls = db.withRequestTimeout(options.timeout)
    private val claimCalls = if (options.wait.isPositive()) calls.withWait(options.wait) else calls
    // seeded from the clock, so a worker restarted under the same name never sends an owner token (and so a claim
    // key) of its earlier life: the server keeps keys a day and would replay that claim
    private val claims = AtomicLong(System.currentTimeMillis())
    private val idlePause = minOf(1.seconds, options.lease)
    private val stopping = CompletableDeferred<Unit>()
    private val hard = CompletableDeferred<Unit>()
    private val running = AtomicBoolean()
    private val fatal = AtomicReference<FenecException?>()
    // the stop's deadline (System.nanoTime), set once stopping: the earliest asked wins
    private val deadline = AtomicReference<Long?>()

    /** Raised inside the worker by a call given up at a stop's deadline. */
    private class Stopped : Exception(null, null, false, false)

    /**
     * Works the queue with [handler] until a [stop] (then returns once the batch in hand is settled or the drain
     * timeout is up) or until the calling coroutine is cancelled (a hard stop). Throws the [FenecException] of an
     * answer that no retry mends, after stopping. A stopped worker stays stopped.
     */
    suspend fun run(handler: suspend (Job) -> Unit) {
        check(running.compareAndSet(false, true)) { "this worker is running already" }
        val caller = currentCoroutineContext().minusKey(Task)
        val handlers = CoroutineScope(caller + SupervisorJob())
        val finished = AtomicBoolean()
        val unwatch = db.watchPrimary { url -> emit(WorkerEvent(Type.PRIMARY, name, url = url)) }
        try {
            coroutineScope {
                // the run's coroutine cancelled is the hard stop: the deadline is now, and so is every give-back's
                val guard = launch(start = CoroutineStart.UNDISPATCHED) {
                    try { awaitCancellation() } finally { if (!finished.get()) stop(hard = true) }
                }
                try {
                    while (!stopping.isCompleted) {
                        val owner = nextOwner()
                        val rows = claim(owner) ?: break
                        if (rows.isNotEmpty()) {
                            work(owner, rows, handler, handlers)
                        } else if (!options.wait.isPositive()) {
                            // a claim not held at the server answers an empty queue at once: pause, or this would spin
                            withTimeoutOrNull(idlePause) { stopping.await() }
                        }
                    }
                } finally {
                    finished.set(true)
                    guard.cancel()
                }
            }
        } finally {
            handlers.cancel(CancellationException("the worker stopped"))
            running.set(false)
            unwatch() // STOPPED is the last event
            emit(WorkerEvent(Type.STOPPED, name))
        }
        fatal.get()?.let { throw it }
    }

    /**
     * Stops the worker, from any thread or coroutine. Graceful (the default): no more claims (a held one is given up
     * now), the jobs not started given back now, running ones given `drainTimeout` to finish and be settled, then
     * cancelled and given back. Hard: running handlers cancelled now, every job in hand given back with one try each.
     * [run] returns within `drainTimeout` + 1 s of a graceful stop, 1 s of a hard one. A stop before [run] makes it
     * return at once, having claimed nothing.
     */
    fun stop(hard: Boolean = false) {
        val at = System.nanoTime() + if (hard) 0L else options.drainTimeout.inWholeNanoseconds
        deadline.getAndUpdate { now -> if (now == null || at - now < 0) at else now }
        stopping.complete(Unit)
        if (hard) this.hard.complete(Unit)
    }

    /**
     * Puts one job into this worker's queue, ready after [delay] (at once by default), and answers the count
     * written (1): `put <queue> {payload: $1, run_at: now() + $2, attempts: $3}`, with attempts 0.
     */
    suspend fun enqueue(payload: Any?, delay: Duration = Duration.ZERO): Long {
        require(!delay.isNegative() && delay.isFinite()) { "delay is a duration from 0 (got $delay)" }
        return calls.run(jobs.enqueueStatement(payload, delay)).affected ?: 0L
    }

    private fun nextOwner(): String = "$name:${claims.incrementAndGet()}"

    private fun endWith(e: FenecException) {
        fatal.compareAndSet(null, e)
        stop()
    }

    // ---- the claim ----

    private suspend fun claim(owner: String): Rows? = coroutineScope {
        val statement = jobs.claimStatement(owner, options.batch, options.lease)
        val taking = async {
            try {
                send("claim", null) { claimCalls.run(statement, "claim:$owner").rows ?: throw FenecException(FenecException.Code.IO, "a claim answered no rows") }
            } catch (e: FenecException) {
                endWith(e)
                null
            } catch (e: Stopped) {
                null
            }
        }
        val answered = select<Rows?> {
            taking.onAwait { it }
            stopping.onAwait { null }
        }
        if (answered != null || !stopping.isCompleted) return@coroutineScope answered
        taking.cancel()
        taking.join()
        // a claim answered just as the stop came has taken its jobs: they are worked out as the stop says (given
        // back at once), not left leased to nobody
        if (taking.isCancelled) null else taking.await()
    }

    // ---- a batch ----

    private enum class State { WAITING, RUNNING, SETTLING, DONE }
    private enum class Cancel { LOST, STOP }

    private class Held(val job: Job) {
        val state = AtomicReference(State.WAITING)
        val extending = AtomicBoolean()
        // completed when the worker stops waiting on the handler: its lease lost, the drain over, a hard stop
        val abandon = CompletableDeferred<Unit>()
        @Volatile var task: Deferred<Unit>? = null
        @Volatile var cancelled: Cancel? = null
        val inHand: Boolean get() = state.get().let { it == State.WAITING || it == State.RUNNING }

        fun cancel(why: Cancel, message: String) {
            if (cancelled == null) cancelled = why
            abandon.complete(Unit)
            task?.cancel(CancellationException(message))
        }
    }

    private suspend fun work(owner: String, rows: Rows, handler: suspend (Job) -> Unit, handlers: CoroutineScope) = coroutineScope {
        val held = rows.map { Held(Job(jobs, it, owner)) }
        emit(WorkerEvent(Type.CLAIMED, name, owner = owner, count = held.size))
        val beat = if (options.beat.isPositive()) launch(Dispatchers.Default) { heartbeat(held) } else null
        val watch = launch(Dispatchers.Default) { atStop(held, this@coroutineScope) }
        try {
            val tasks = ArrayList<Task>()
            for (h in held) {
                if (h.job.attempts > options.maxAttempts && h.state.compareAndSet(State.WAITING, State.SETTLING)) {
                    tasks += launch(Dispatchers.Default, CoroutineStart.ATOMIC) { bury(h) }
                }
            }
            repeat(minOf(concurrency, held.size)) { tasks += launch { lane(held, handler, handlers) } }
            tasks.joinAll()
        } catch (e: CancellationException) {
            // the run's coroutine was cancelled: a hard stop, whose deadline every call in flight now keeps
            stop(hard = true)
            withContext(NonCancellable + Dispatchers.Default) {
                held.forEach { it.cancel(Cancel.STOP, "the worker stopped hard") }
                held.filter { h -> h.state.compareAndSet(State.WAITING, State.SETTLING) || h.state.compareAndSet(State.RUNNING, State.SETTLING) }
                    .map { h -> launch { release(h) } }
                    .joinAll()
            }
            throw e
        } finally {
            beat?.cancel()
            watch.cancel()
        }
    }

    /** One of `concurrency` lanes: takes the next unstarted job, in claim order, until none is left or a stop. */
    private suspend fun lane(held: List<Held>, handler: suspend (Job) -> Unit, handlers: CoroutineScope) {
        while (!stopping.isCompleted) {
            val h = held.firstOrNull { it.state.compareAndSet(State.WAITING, State.RUNNING) } ?: return
            runJob(h, handler, handlers)
        }
    }

    private suspend fun runJob(h: Held, handler: suspend (Job) -> Unit, handlers: CoroutineScope) {
        emit(event(Type.START, h))
        val task = handlers.async { handler(h.job) }
        h.task = task
        if (h.cancelled != null) task.cancel() // lost or stopped before the task was there to cancel
        select<Unit> {
            task.onJoin { }
            h.abandon.onAwait { }
        }
        val thrown: Throwable? = if (!task.isCompleted) {
            null.also { task.cancel() } // abandoned: whatever the handler does now, the worker settles nothing of it
        } else try {
            task.await()
            null
        } catch (e: Throwable) {
            e
        }
        when {
            // the job is another worker's now: this one writes nothing more to it
            h.cancelled == Cancel.LOST -> return
            !h.state.compareAndSet(State.RUNNING, State.SETTLING) -> return
            task.isCompleted && !task.isCancelled && thrown == null -> ack(h)
            // cancelled by the worker at the end of the drain or by a hard stop: given back, not failed
            h.cancelled == Cancel.STOP -> release(h)
            // anything the handler threw fails the job, a CancellationException of its own (withTimeout's) included
            else -> fail(h, thrown ?: CancellationException("the handler was cancelled"))
        }
    }

    /** At a stop: the unstarted jobs given back now; at the deadline (or a hard stop) the running ones cancelled. */
    private suspend fun atStop(held: List<Held>, batch: CoroutineScope) {
        stopping.await()
        for (h in held) {
            // ATOMIC: a job moved to SETTLING is settled even when the batch is cancelled before this coroutine starts
            // (a cancelled run's guard may call stop, and wake this watcher, before the cancellation reaches it)
            if (h.state.compareAndSet(State.WAITING, State.SETTLING)) batch.launch(Dispatchers.Default, CoroutineStart.ATOMIC) { release(h) }
        }
        val left = left()
        if (left != null && left.isPositive()) withTimeoutOrNull(left) { hard.await() }
        for (h in held) {
            if (h.state.get() == State.RUNNING) h.cancel(Cancel.STOP, "the worker's drain timeout passed")
        }
    }

    // ---- the heartbeat ----

    private suspend fun heartbeat(held: List<Held>) = coroutineScope {
        var tick = 0L
        while (true) {
            delay(options.beat)
            tick++
            for (h in held) {
                // one extend of a job at a time: a tick that finds the last one still trying leaves it to finish
                if (h.inHand && h.extending.compareAndSet(false, true)) {
                    val key = "extend:${h.job.owner}:${h.job.id}:$tick"
                    launch {
                        try {
                            extend(h, key)
                        } finally {
                            h.extending.set(false)
                        }
                    }
                }
            }
        }
    }

    private suspend fun extend(h: Held, key: String) {
        try {
            send("extend", h) { calls.run(jobs.extendStatement(h.job.id, h.job.owner, options.lease), key) }
        } catch (e: Stopped) {
            return
        } catch (e: FenecException) {
            if (!h.inHand) return // settled meanwhile: an ack deletes the row, so the extend found nothing
            if (e.code == FenecException.Code.UNMET) lose(h, "extend") else endWith(e)
        }
    }

    private fun lose(h: Held, call: String) {
        val wasWaiting = h.state.compareAndSet(State.WAITING, State.DONE)
        if (!wasWaiting && !h.state.compareAndSet(State.RUNNING, State.DONE)) return
        h.job.lostFlag = true
        h.cancel(Cancel.LOST, "the lease of job ${h.job.id} was lost")
        lost.incrementAndGet()
        emit(event(Type.LOST, h, call = call))
    }

    // ---- settling a job: each write under its own key, retried per the contract ----

    private suspend fun ack(h: Held) {
        val statement = if (options.keepDone) jobs.keepDoneStatement(h.job.id, h.job.owner) else jobs.ackStatement(h.job.id, h.job.owner)
        if (settle(h, statement, "ack")) {
            acked.incrementAndGet()
            emit(event(Type.DONE, h))
        }
    }

    private suspend fun fail(h: Held, thrown: Throwable) {
        val error = thrown.message ?: thrown::class.qualifiedName ?: thrown.toString()
        val attempts = h.job.attempts
        val after = try {
            options.backoff(attempts).coerceAtLeast(Duration.ZERO)
        } catch (e: Exception) {
            (attempts * attempts).seconds
        }
        if (settle(h, jobs.retryStatement(h.job.id, h.job.owner, error, options.maxAttempts, after), "fail")) {
            failed.incrementAndGet()
            if (attempts >= options.maxAttempts) {
                dead.incrementAndGet()
                emit(event(Type.DEAD, h, error))
            } else {
                emit(event(Type.FAILED, h, error, after))
            }
        }
    }

    private suspend fun bury(h: Held) {
        val error = "attempts exhausted"
        if (settle(h, jobs.buryStatement(h.job.id, h.job.owner, error), "dead")) {
            dead.incrementAndGet()
            emit(event(Type.DEAD, h, error))
        }
    }

    private suspend fun release(h: Held) {
        if (settle(h, jobs.releaseStatement(h.job.id, h.job.owner), "release")) {
            released.incrementAndGet()
            emit(event(Type.RELEASED, h))
        }
    }

    /**
     * Sends one settling call of a job this worker holds; false when it met a 412 (the lease was lost: a `LOST`
     * event, but for a give-back), was given up at a stop's deadline, or ended the run. It runs to its end even when
     * the worker is cancelled (within the stop's deadline): a call cut halfway would leave the job leased to nobody.
     */
    private suspend fun settle(h: Held, statement: Statement, call: String): Boolean = withContext(NonCancellable) {
        try {
            send(call, h) { calls.run(statement, "$call:${h.job.owner}:${h.job.id}") }
            true
        } catch (e: Stopped) {
            false
        } catch (e: FenecException) {
            if (e.code != FenecException.Code.UNMET) {
                endWith(e)
            } else if (call != "release") {
                h.job.lostFlag = true
                lost.incrementAndGet()
                emit(event(Type.LOST, h, call = call))
            }
            false
        } finally {
            h.state.set(State.DONE)
        }
    }

    // ---- retries and the stop's deadline ----

    /** Time left to the stop's deadline (negative past it), or null while not stopping. */
    private fun left(): Duration? = deadline.get()?.let { (it - System.nanoTime()).nanoseconds }

    /** A failure worth sending again: the network, a timeout, a 5xx. */
    private fun retryable(e: FenecException): Boolean = e.code == FenecException.Code.IO && (e.status == 0 || e.status >= 500)

    /**
     * [call] sent, and sent again per the retry rule. Throws what ends the run (any [FenecException] that is not
     * retryable, a 412 included: the caller tells them apart), or [Stopped] once a stop's deadline has passed;
     * while stopping, each try may take what is left of the deadline and [GRACE] more.
     */
    private suspend fun <T : Any> send(kind: String, h: Held?, call: suspend () -> T): T {
        var ceiling = options.retryMin
        while (true) {
            try {
                return attempt(call)
            } catch (e: FenecException) {
                if (!retryable(e)) throw e
                // past the deadline a call is still sent again within the grace: the first try of a stop's last
                // give-back may meet a pooled connection the server has just closed, and fail at once
                val left = left()?.plus(GRACE)
                if (left != null && !left.isPositive()) throw Stopped()
                var pause = Random.nextLong(ceiling.inWholeMilliseconds + 1).milliseconds
                if (left != null) pause = minOf(pause, left)
                emit(WorkerEvent(Type.RETRY, name, h?.job?.id, h?.job?.owner, h?.job?.attempts, error = e.message, delay = pause, call = kind))
                delay(pause)
                ceiling = minOf(ceiling * 2, options.retryMax)
            }
        }
    }

    /** One try of [call]; once stopping, cut at the deadline and [GRACE] more (a [Stopped]), whenever it began. */
    private suspend fun <T : Any> attempt(call: suspend () -> T): T = coroutineScope {
        val answer = async { call() }
        select<T?> {
            answer.onAwait { it }
            stopping.onAwait { null }
        } ?: withTimeoutOrNull((left()!! + GRACE).coerceAtLeast(Duration.ZERO)) { answer.await() }
            ?: run {
                answer.cancel()
                throw Stopped()
            }
    }

    // ---- events ----

    private fun event(type: Type, h: Held, error: String? = null, delay: Duration? = null, call: String? = null) =
        WorkerEvent(type, name, h.job.id, h.job.owner, h.job.attempts, error = error, delay = delay, call = call)

    private fun emit(event: WorkerEvent) {
        val hook = options.onEvent ?: return
        try {
            hook(event)
        } catch (e: Exception) {
            // a hook that throws is the hook's problem: the worker goes on
        }
    }

    private companion object {
        /** How long a stop's last calls may take past its deadline (the contract's `stop_bound_margin_ms`). */
        val GRACE = 1.seconds
    }
}
