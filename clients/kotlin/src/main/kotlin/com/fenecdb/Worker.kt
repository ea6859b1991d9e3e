package com.fenecdb

import com.fenecdb.WorkerEvent.Type
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.NonCancellable
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.delay
import kotlinx.coroutines.ensureActive
import kotlinx.coroutines.isActive
import kotlinx.coroutines.joinAll
import kotlinx.coroutines.launch
import kotlinx.coroutines.selects.select
import kotlinx.coroutines.supervisorScope
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeoutOrNull
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicLong
import java.util.concurrent.atomic.AtomicReference
import kotlin.random.Random
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds
import kotlinx.coroutines.Job as Task

/**
 * The worker loop over one [JobQueue], with the statements of the "Job queues" page:
 *
 * 1. Claim a batch under a fresh owner token `<name>:<n>`, held at the server up to `wait` while the queue is empty,
 *    sent under `Idempotency-Key: claim:<owner>`, so a claim retried after a lost answer is answered the jobs the
 *    first try took and none stays leased to nobody.
 * 2. Dead-letter at once every job claimed with attempts past `maxAttempts` (a worker died on it each time): it is
 *    never run again. Run the others through the handler, up to `concurrency` side by side, in claim order.
 * 3. A heartbeat extends every job still in hand, started or not, by `lease` every `heartbeat`. A 412 on it means the
 *    lease lapsed and another worker took the job: the job's handler is cancelled and the job is never acked or
 *    failed by this worker.
 * 4. A handler that returns acks its job; one that throws (anything, its own `withTimeout` included) fails it with
 *    its message: ready again after `backoff(attempts)`, or dead at `maxAttempts`. The loop goes on.
 *
 * Every request has its own timeout; one that fails on the transport, times out or meets a 5xx is sent again under
 * the same key after a pause (doubling, with full jitter), for as long as the worker runs: a server restart or a cut
 * connection never ends [run]. A claim the server refuses for good (a 4xx: no such queue, a bad token) does.
 *
 * Stopping: [stop] (from any thread) gives a held claim up at once, gives the unstarted jobs of the batch back at
 * once (`attempts` undone: they never ran), lets running ones finish within `drainTimeout`, then cancels and gives
 * back what is left, and [run] returns. Cancelling the coroutine that runs [run] is the hard stop: handlers are
 * cancelled at once and every job not yet settled is given back before the cancellation goes on.
 *
 * The handler runs in the context of the coroutine that called [run]; the worker's own bookkeeping (heartbeat,
 * give-backs) runs on [Dispatchers.Default], so a handler that blocks its thread does not starve the heartbeat.
 */
class Worker(val queue: JobQueue, val options: WorkerOptions = WorkerOptions()) {

    private var handler: (suspend (Job) -> Unit)? = null

    /** The shape of earlier releases: the handler given here, run by [run] without arguments. */
    constructor(
        queue: JobQueue,
        name: String,
        batch: Int = 10,
        lease: Duration = 30.seconds,
        wait: Duration = 30.seconds,
        deadAfter: Int = 5,
        backoff: Duration = 1.seconds,
        handle: suspend (Job) -> Unit,
    ) : this(queue, WorkerOptions(name = name, batch = batch, lease = lease, wait = wait, maxAttempts = deadAfter,
        backoff = { attempts -> backoff * (attempts * attempts).toDouble() })) {
        handler = handle
    }

    val name: String get() = options.name

    /** Jobs acked; handler failures (a dead one included); dead letters; jobs given back; writes that met a 412. */
    val acked = AtomicLong()
    val failed = AtomicLong()
    val dead = AtomicLong()
    val released = AtomicLong()
    val stale = AtomicLong()

    private val concurrency = minOf(options.concurrency, options.batch)
    private val db = queue.db.withRequestTimeout(options.timeout)
    private val claimDb = if (options.wait.isPositive()) db.withWait(options.wait) else db
    // seeded from the clock, as the page's own loop does, so a worker restarted under the same name never sends an
    // owner token (and so a claim key) of its earlier life: the server keeps keys a day and would replay that claim
    private val claims = AtomicLong(System.currentTimeMillis())
    private val idlePause = minOf(1.seconds, options.lease)
    private val stopping = CompletableDeferred<Unit>()
    private val running = AtomicBoolean()
    // set at a stop: past this (System.nanoTime) a write that keeps failing on the transport is given up
    @Volatile private var giveUpAt: Long? = null

    /** A claim token, unique for each claim: `<name>:<n>`. */
    fun nextOwner(): String = "$name:${claims.incrementAndGet()}"

    /**
     * Works the queue with [handler] until [stop] (then returns once the batch in hand is settled) or until the
     * calling coroutine is cancelled (hard stop). A stopped worker stays stopped.
     */
    suspend fun run(handler: suspend (Job) -> Unit) {
        check(running.compareAndSet(false, true)) { "this worker is running already" }
        try {
            while (!stopping.isCompleted) {
                val owner = nextOwner()
                val rows = claim(owner) ?: break
                if (rows.isNotEmpty()) {
                    work(owner, rows, handler)
                } else if (!options.wait.isPositive()) {
                    // a claim not held at the server answers an empty queue at once: pause, or this loop would spin
                    withTimeoutOrNull(idlePause) { stopping.await() }
                }
            }
        } finally {
            running.set(false)
            emit(WorkerEvent(Type.STOPPED, name))
        }
    }

    /** Runs with the handler this worker was made with. */
    suspend fun run() = run(ownHandler())

    /** One claim and its jobs, settled; answers how many jobs it took. */
    suspend fun runOnce(handler: suspend (Job) -> Unit = ownHandler()): Int {
        val owner = nextOwner()
        val rows = claim(owner) ?: return 0
        if (rows.isNotEmpty()) work(owner, rows, handler)
        return rows.size
    }

    /**
     * The graceful stop, from any thread or coroutine: no more claims (a held one is given up now), unstarted jobs
     * given back now, running ones given `drainTimeout` to finish. [run] returns when that is done.
     */
    fun stop() {
        if (stopping.complete(Unit)) {
            giveUpAt = System.nanoTime() + (options.drainTimeout + options.timeout).inWholeNanoseconds
        }
    }

    private fun ownHandler(): suspend (Job) -> Unit =
        handler ?: throw IllegalStateException("this worker was made without a handler: call run(handler)")

    // ---- the claim ----

    private suspend fun claim(owner: String): Rows? = coroutineScope {
        val statement = queue.claimStatement(owner, options.batch, options.lease)
        val taking = async {
            retrying(null, owner) {
                claimDb.run(statement, "claim:$owner").rows ?: throw FenecException(FenecException.Code.IO, "a claim answered no rows")
            }
        }
        val answered = select<Rows?> {
            taking.onAwait { it }
            stopping.onAwait { null }
        }
        if (answered != null) return@coroutineScope answered
        taking.cancel()
        taking.join()
        // a claim answered just as the stop came has taken its jobs: they are worked out as the stop says (given
        // back at once), not left leased to nobody
        if (taking.isCancelled) null else taking.await()
    }

    // ---- a batch ----

    private enum class State { WAITING, RUNNING, SETTLING, DONE }
    private enum class Cancel { LOST, DRAIN }

    private class Held(val job: Job) {
        val state = AtomicReference(State.WAITING)
        val extending = AtomicBoolean()
        @Volatile var task: Task? = null
        @Volatile var cancelled: Cancel? = null
        val inHand: Boolean get() = state.get().let { it == State.WAITING || it == State.RUNNING }
    }

    private suspend fun work(owner: String, rows: Rows, handler: suspend (Job) -> Unit) = coroutineScope {
        val held = rows.map { Held(Job(queue, it, owner)) }
        emit(WorkerEvent(Type.CLAIMED, name, owner = owner, count = held.size))
        val beat = launch(Dispatchers.Default) { heartbeat(held) }
        val watch = launch(Dispatchers.Default) { stopping.await(); atStop(held, this@coroutineScope) }
        try {
            val tasks = ArrayList<Task>()
            for (h in held) {
                if (h.job.attempts > options.maxAttempts && h.state.compareAndSet(State.WAITING, State.SETTLING)) {
                    tasks += launch(Dispatchers.Default) { bury(h) }
                }
            }
            repeat(minOf(concurrency, held.size)) { tasks += launch { take(held, handler) } }
            tasks.joinAll()
        } catch (e: CancellationException) {
            // the hard stop: give back what nobody started (running jobs are given back by their own coroutines)
            hardStop()
            withContext(NonCancellable) {
                held.filter { it.state.compareAndSet(State.WAITING, State.SETTLING) }
                    .map { h -> launch(Dispatchers.Default) { release(h, started = false) } }
                    .joinAll()
            }
            throw e
        } finally {
            beat.cancel()
            watch.cancel()
        }
    }

    private fun hardStop() {
        val at = System.nanoTime() + options.timeout.inWholeNanoseconds
        val now = giveUpAt
        if (now == null || at - now < 0) giveUpAt = at
    }

    /** One of `concurrency` lanes: takes the next unstarted job, in claim order, until none is left or a stop. */
    private suspend fun take(held: List<Held>, handler: suspend (Job) -> Unit) {
        while (!stopping.isCompleted) {
            val h = held.firstOrNull { it.state.compareAndSet(State.WAITING, State.RUNNING) } ?: return
            runJob(h, handler)
        }
    }

    private suspend fun runJob(h: Held, handler: suspend (Job) -> Unit) {
        emit(event(Type.START, h))
        val thrown: Throwable? = try {
            supervisorScope {
                val task = async { handler(h.job) }
                h.task = task
                if (h.cancelled != null) task.cancel() // lost or drained before the task was there to cancel
                try {
                    task.await()
                    null
                } catch (e: Throwable) {
                    e
                }
            }
        } catch (e: CancellationException) {
            e
        }
        if (!currentCoroutineContext().isActive) {
            // the hard stop cancelled this lane, and with it the handler: the job goes back, unless it was done
            hardStop()
            if (h.cancelled != Cancel.LOST && h.state.compareAndSet(State.RUNNING, State.SETTLING)) {
                if (thrown == null) ack(h) else release(h, started = true)
            }
            currentCoroutineContext().ensureActive()
        }
        when {
            // the heartbeat met a 412: the job is another worker's now, and this one writes nothing more to it
            h.cancelled == Cancel.LOST -> return
            !h.state.compareAndSet(State.RUNNING, State.SETTLING) -> return
            thrown == null -> ack(h)
            // cancelled by the worker at the end of the drain: given back, not failed
            h.cancelled == Cancel.DRAIN -> release(h, started = true)
            // anything the handler threw fails the job, a CancellationException of its own (withTimeout's) included:
            // this lane is active, so the worker did not cancel it
            else -> fail(h, thrown)
        }
    }

    private suspend fun atStop(held: List<Held>, batch: CoroutineScope) {
        for (h in held) {
            if (h.state.compareAndSet(State.WAITING, State.SETTLING)) batch.launch(Dispatchers.Default) { release(h, started = false) }
        }
        delay(options.drainTimeout)
        for (h in held) {
            if (h.state.get() == State.RUNNING) {
                h.cancelled = Cancel.DRAIN
                h.task?.cancel(CancellationException("the worker's drain timeout passed"))
            }
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
            retrying(h, h.job.owner, giveUp = { !h.inHand }) {
                db.run(queue.extendStatement(h.job.id, h.job.owner, options.lease), key)
            }
        } catch (e: FenecException) {
            if (!h.inHand) return // settled meanwhile: an ack deletes the row, so the extend found nothing
            if (e.code == FenecException.Code.UNMET || !retryable(e)) lose(h, if (e.code == FenecException.Code.UNMET) null else e.message)
        }
    }

    private fun lose(h: Held, error: String?) {
        val wasWaiting = h.state.compareAndSet(State.WAITING, State.DONE)
        if (!wasWaiting && !h.state.compareAndSet(State.RUNNING, State.DONE)) return
        h.job.lostFlag = true
        h.cancelled = Cancel.LOST
        h.task?.cancel(CancellationException("the lease of job ${h.job.id} was lost"))
        stale.incrementAndGet()
        emit(event(Type.LOST, h, error))
    }

    // ---- settling a job: each write under its own key, retried on the transport ----

    private suspend fun ack(h: Held) {
        val statement = if (options.keepDone) queue.keepDoneStatement(h.job.id, h.job.owner) else queue.ackStatement(h.job.id, h.job.owner)
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
        if (settle(h, queue.retryStatement(h.job.id, h.job.owner, error, options.maxAttempts, after), "fail")) {
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
        if (settle(h, queue.buryStatement(h.job.id, h.job.owner, error), "dead")) {
            dead.incrementAndGet()
            emit(event(Type.DEAD, h, error))
        }
    }

    private suspend fun release(h: Held, started: Boolean) {
        if (settle(h, queue.releaseStatement(h.job.id, h.job.owner, started), "release")) {
            released.incrementAndGet()
            emit(event(Type.RELEASED, h))
        }
    }

    /**
     * Sends one settling write of a job this worker holds; false when it met a 412 (the lease was lost) or could not
     * be sent before a stop's deadline. It runs to its end even when the worker is cancelled: a write cut halfway
     * would leave the job leased to nobody until its lease lapses.
     */
    private suspend fun settle(h: Held, statement: Statement, kind: String): Boolean = withContext(NonCancellable) {
        try {
            retrying(h, h.job.owner, giveUp = ::pastGiveUp) { db.run(statement, "$kind:${h.job.owner}:${h.job.id}") }
            true
        } catch (e: FenecException) {
            stale.incrementAndGet()
            emit(event(Type.LOST, h, if (e.code == FenecException.Code.UNMET) null else e.message))
            false
        } finally {
            h.state.set(State.DONE)
        }
    }

    // ---- retries ----

    private fun pastGiveUp(): Boolean = giveUpAt?.let { System.nanoTime() - it > 0 } ?: false

    /** A failure worth sending again: the transport, a timeout, a 5xx or 503, a 408 or 429, an answer cut short. */
    private fun retryable(e: FenecException): Boolean =
        e.code == FenecException.Code.IO && (e.status !in 400..499 || e.status == 408 || e.status == 429)

    private suspend fun <T> retrying(h: Held?, owner: String, giveUp: () -> Boolean = { false }, call: suspend () -> T): T {
        var ceiling = options.retry
        while (true) {
            try {
                return call()
            } catch (e: FenecException) {
                if (!retryable(e) || giveUp()) throw e
                val pause = Random.nextLong(ceiling.inWholeMilliseconds + 1).milliseconds
                emit(WorkerEvent(Type.RETRY, name, h?.job?.id, owner, h?.job?.attempts, e.message, pause))
                delay(pause)
                ceiling = minOf(ceiling * 2, options.retryMax)
            }
        }
    }

    // ---- events ----

    private fun event(type: Type, h: Held, error: String? = null, delay: Duration? = null) =
        WorkerEvent(type, name, h.job.id, h.job.owner, h.job.attempts, error, delay)

    private fun emit(event: WorkerEvent) {
        val hook = options.onEvent ?: return
        try {
            hook(event)
        } catch (e: Exception) {
            // a hook that throws is the hook's problem: the worker goes on
        }
    }
}
