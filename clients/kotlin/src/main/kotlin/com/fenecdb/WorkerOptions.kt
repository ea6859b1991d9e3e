package com.fenecdb

import java.util.UUID
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * How a [Worker] works its queue: the options of `conformance/worker-contract.json`, named as it names them for
 * Kotlin, with its defaults (the same in every FenecDB SDK). Durations are `kotlin.time.Duration`s.
 *
 * @property name the worker's name; each claim's owner token is `<name>:<n>`, a new n for every claim.
 * @property batch jobs one claim takes at most (its `limit`).
 * @property concurrency jobs of a batch that run at the same time (never more than [batch]).
 * @property lease how long a claimed job is the worker's; every heartbeat gives it this long again.
 * @property wait how long a claim is held at the server while no job is ready (`Fenec-Wait`).
 * @property heartbeat how often every job in hand, started or not, has its lease extended by [lease]; null (unset):
 *   a third of the lease (so that `copy(lease = ...)` moves it too); [Duration.ZERO]: no heartbeat at all.
 * @property maxAttempts a job failed at attempts >= this is dead (`run_at: null`); a job claimed with attempts past
 *   it is made a dead letter without running.
 * @property backoff how long a failed job waits before it is ready again, from the attempts its claim read
 *   (attempts² s).
 * @property drainTimeout on a graceful [Worker.stop], how long running jobs may still run, and every call of the stop
 *   may still be tried, before they are cancelled; `run` returns within this and 1 s more.
 * @property timeout how long one call may take before it is given up (and sent again); a held claim gets [wait] on
 *   top.
 * @property retryMin the ceiling of the first pause after a call failed on the network, by its timeout or with a
 *   5xx; it doubles at each failure in a row, up to [retryMax], and each pause is drawn at random below it.
 * @property retryMax the most the ceiling of the retry pause doubles to.
 * @property keepDone ack by keeping the job, `{owner: null, run_at: null, done_at: now()}`, instead of deleting it.
 * @property onEvent called with every [WorkerEvent], on the worker's own threads; what it throws is ignored.
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
    val timeout: Duration = 10.seconds,
    val retryMin: Duration = 100.milliseconds,
    val retryMax: Duration = 5.seconds,
    val keepDone: Boolean = false,
    val onEvent: ((WorkerEvent) -> Unit)? = null,
) {
    init {
        require(name.isNotEmpty()) { "a worker's name is a text, not empty" }
        require(batch >= 1) { "batch is a count of jobs from 1 (got $batch)" }
        require(concurrency >= 1) { "concurrency is a count of jobs from 1 (got $concurrency)" }
        require(lease.isFinite() && lease >= 1.milliseconds) { "lease is a duration of at least 1 ms (got $lease)" }
        require(wait.isFinite() && !wait.isNegative()) { "wait is a duration from 0 (got $wait)" }
        require(heartbeat == null || heartbeat == Duration.ZERO || (heartbeat.isPositive() && heartbeat < lease)) {
            "heartbeat is a duration above 0 and below the lease, or Duration.ZERO for none (got $heartbeat)"
        }
        require(maxAttempts >= 1) { "maxAttempts is a count from 1 (got $maxAttempts)" }
        require(drainTimeout.isFinite() && !drainTimeout.isNegative()) { "drainTimeout is a duration from 0 (got $drainTimeout)" }
        require(timeout.isFinite() && timeout.isPositive()) { "timeout is a duration above 0 (got $timeout)" }
        require(retryMin.isFinite() && retryMin.isPositive() && retryMax >= retryMin) {
            "retryMin is a pause above 0, and retryMax at least as long (got $retryMin, $retryMax)"
        }
    }

    /** The heartbeat in force: [heartbeat], or a third of the lease; [Duration.ZERO] when it is off. */
    val beat: Duration get() = heartbeat ?: (lease / 3)
}

/**
 * What a [Worker] did, as its [WorkerOptions.onEvent] hook sees it: the contract's events, each with exactly the
 * fields the contract gives its type, every other field null. [id], [owner] and [attempts] name the job (a
 * `CLAIMED` names its claim's [owner] and the [count] of jobs it took); [error] is a failure's text; [delay] a
 * `RETRY`'s pause or a `FAILED` job's backoff; [call] which call a `LOST` or `RETRY` was about (`claim`, `ack`,
 * `extend`, `fail`, `dead` or `release`).
 */
data class WorkerEvent(
    val type: Type,
    val worker: String,
    val id: Any? = null,
    val owner: String? = null,
    val attempts: Long? = null,
    val count: Int? = null,
    val error: String? = null,
    val delay: Duration? = null,
    val call: String? = null,
    /** [Type.PRIMARY]: the new primary's URL. */
    val url: String? = null,
) {
    enum class Type {
        /** A claim took [count] jobs. */
        CLAIMED,
        /** The handler is about to run the job. */
        START,
        /** The job was acknowledged (deleted, or kept done). */
        DONE,
        /** The handler threw; the job is ready again after [delay]. */
        FAILED,
        /** The job is a dead letter: failed at its last attempt, or claimed past it and never run. */
        DEAD,
        /** The job was given back on a stop (unstarted, or cancelled at the drain's end or a hard stop): ready now. */
        RELEASED,
        /** The job's lease was lost: its [call] (extend, ack, fail, dead) was answered 412; its handler is cancelled. */
        LOST,
        /** A [call] failed on the network, by its timeout or with a 5xx; it is sent again after [delay]. */
        RETRY,
        /** The client's primary changed: writes and claims go to [url] now. */
        PRIMARY,
        /** [Worker.run] returns. */
        STOPPED;

        /** The event's name as the SDKs share it: `claimed`, `start`, ... */
        val label: String get() = name.lowercase()
    }
}
