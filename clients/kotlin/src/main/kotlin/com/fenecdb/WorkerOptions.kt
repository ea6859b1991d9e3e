package com.fenecdb

import java.util.UUID
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * How a [Worker] works its queue; the defaults are the same in every FenecDB SDK.
 *
 * @property name the worker's name; each claim's owner token is `<name>:<n>`, a new n for every claim.
 * @property batch jobs taken by one claim (its `limit`).
 * @property concurrency jobs of a batch run side by side, up to this many (never more than [batch]).
 * @property lease how long a claim, and every heartbeat after it, holds a job.
 * @property wait how long a claim is held at the server while the queue is empty (`Fenec-Wait`).
 * @property heartbeat how often every job in hand, started or not, is extended by [lease]; null: a third of the
 *   lease (so that `copy(lease = ...)` moves it too).
 * @property maxAttempts a job failed at attempts >= this is dead (`run_at: null`); a job claimed with attempts past
 *   it is dead-lettered without running.
 * @property backoff how long a failed job waits before it is ready again, from its attempts (attempts² s).
 * @property drainTimeout at a graceful [Worker.stop], how long running jobs may still run before they are cancelled.
 * @property retry the first pause after a connection error, a timeout or a 5xx; it doubles up to [retryMax], and
 *   each pause is drawn at random below it (full jitter).
 * @property timeout each request's own timeout; a held claim gets its [wait] on top.
 * @property keepDone ack by keeping the job, marked `done_at: now()` with no `run_at`, instead of deleting it.
 * @property onEvent called with every [WorkerEvent], on the worker's own threads; an exception it throws is ignored.
 */
data class WorkerOptions(
    val name: String = "w-" + UUID.randomUUID().toString().take(8),
    val batch: Int = 10,
    val concurrency: Int = 1,
    val lease: Duration = 30.seconds,
    val wait: Duration = 30.seconds,
    val heartbeat: Duration? = null,
    val maxAttempts: Int = 5,
    val backoff: (attempts: Long) -> Duration = { attempts -> (attempts * attempts).seconds },
    val drainTimeout: Duration = 30.seconds,
    val retry: Duration = 100.milliseconds,
    val retryMax: Duration = 5.seconds,
    val timeout: Duration = 10.seconds,
    val keepDone: Boolean = false,
    val onEvent: ((WorkerEvent) -> Unit)? = null,
) {
    init {
        require(name.isNotEmpty()) { "a worker's name is a text, not empty" }
        require(batch >= 1) { "batch is a count of jobs from 1 (got $batch)" }
        require(concurrency >= 1) { "concurrency is a count of jobs from 1 (got $concurrency)" }
        require(lease.isFinite() && lease >= 1.milliseconds) { "lease is a duration of at least 1 ms (got $lease)" }
        require(wait.isFinite() && !wait.isNegative()) { "wait is a duration from 0 (got $wait)" }
        require(heartbeat == null || (heartbeat.isPositive() && heartbeat < lease)) {
            "heartbeat is a duration above 0 and below the lease (got $heartbeat)"
        }
        require(maxAttempts >= 1) { "maxAttempts is a count from 1 (got $maxAttempts)" }
        require(drainTimeout.isFinite() && !drainTimeout.isNegative()) { "drainTimeout is a duration from 0 (got $drainTimeout)" }
        require(retry.isPositive() && retryMax >= retry) { "retry is a pause above 0, and retryMax at least as long (got $retry, $retryMax)" }
        require(timeout.isFinite() && timeout.isPositive()) { "timeout is a duration above 0 (got $timeout)" }
    }

    /** The heartbeat in force: [heartbeat], or a third of the lease. */
    val beat: Duration get() = heartbeat ?: (lease / 3)
}

/**
 * What a [Worker] did, as its [WorkerOptions.onEvent] hook sees it. [id], [owner] and [attempts] name the job (the
 * claim, for `CLAIMED` and a claim's `RETRY`); [error] is a failure's text; [delay] a `RETRY`'s pause or a
 * `FAILED` job's backoff; [count] the jobs a `CLAIMED` took.
 */
data class WorkerEvent(
    val type: Type,
    val worker: String,
    val id: Any? = null,
    val owner: String? = null,
    val attempts: Long? = null,
    val error: String? = null,
    val delay: Duration? = null,
    val count: Int? = null,
) {
    enum class Type {
        /** A claim took [count] jobs. */
        CLAIMED,
        /** The handler is about to run the job. */
        START,
        /** The handler returned and the job was acked. */
        DONE,
        /** The handler threw; the job is ready again after [delay]. */
        FAILED,
        /** The job is a dead letter: failed at its last attempt, or claimed past it and never run. */
        DEAD,
        /** The job was given back at a stop: ready again now. */
        RELEASED,
        /**
         * The job's lease was lost (a 412: another worker holds it, and a running handler was cancelled), or a write
         * for it was refused otherwise or given up at a stop ([error] says why): its lease lapses.
         */
        LOST,
        /** A request failed on the transport, timed out or met a 5xx; it is sent again after [delay]. */
        RETRY,
        /** [Worker.run] returns. */
        STOPPED;

        /** The event's name as the SDKs share it: `claimed`, `start`, ... */
        val label: String get() = name.lowercase()
    }
}
