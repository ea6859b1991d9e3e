package com.fenecdb

import kotlin.time.Duration
import kotlin.time.Duration.Companion.seconds

/**
 * A job queue kept in one collection, worked with the statements of the "Job queues" page (client spec R21):
 * a job's `run_at` is when it may next run, and while a worker holds it, the end of its lease.
 *
 *   enqueue  put q {payload: $1, run_at: now() + $2, attempts: $3}
 *   claim    set q {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3}
 *              where run_at <= now() order run_at asc limit <batch> returning *
 *   ack      del q where id = $1 and owner = $2 require 1
 *   extend   set q {run_at: now() + $1} where id = $2 and owner = $3 require 1
 *   fail     set q {owner: $1, error: $2, run_at: case when attempts >= $3 then null else now() + $4 * attempts * attempts end}
 *              where id = $5 and owner = $6 require 1
 *   pop      del q where run_at <= now() order run_at asc limit <n> returning *
 *   resend   set q {run_at: now(), attempts: $1, error: $2} where id = $3 and run_at is null
 *
 * and, for the [Worker] only:
 *
 *   retry    set q {owner: $1, error: $2, run_at: case when attempts >= $3 then null else now() + $4 end}
 *              where id = $5 and owner = $6 require 1            (a failed job, its backoff worked out by the worker)
 *   bury     set q {owner: $1, error: $2, run_at: $3} where id = $4 and owner = $5 require 1
 *                                                      (claimed past its attempts: dead-lettered, never run)
 *   keep     set q {owner: $1, run_at: $2, done_at: now()} where id = $3 and owner = $4 require 1   (ack, kept done)
 *   release  set q {owner: $1, run_at: now(), attempts: coalesce(attempts, 0) + $2} where id = $3 and owner = $4
 *              (given back at a stop, $2 = -1: the claim's attempt is undone, as the docs' policy requires)
 *
 * A job whose `run_at` is null is dead (failed [deadAfter] times), or kept done when it has a `done_at`. Ack, extend and fail name the owner the claim
 * wrote, so a worker whose lease lapsed and whose job went to another finds out: they answer false (a 412), never
 * an error.
 */
class JobQueue(val db: FenecRemote, val name: String) {
    private val base = Query.from(name)

    // ---- the statements, text only ----

    fun enqueueStatement(payload: Any?, delay: Duration = Duration.ZERO): Statement =
        base.toInsert(enqueueDoc(payload, delay))

    fun claimStatement(owner: String, batch: Int, lease: Duration): Statement =
        claimQuery(base, batch).toUpdate(claimPatch(owner, lease), returning = listOf("*"))

    fun ackStatement(id: Any, owner: String): Statement = mine(base, id, owner).toDelete(require = 1)

    fun extendStatement(id: Any, owner: String, lease: Duration): Statement =
        mine(base, id, owner).toUpdate(extendPatch(lease), require = 1)

    fun failStatement(id: Any, owner: String, error: String?, deadAfter: Int, backoff: Duration): Statement =
        mine(base, id, owner).toUpdate(failPatch(error, deadAfter, backoff), require = 1)

    fun popStatement(n: Int): Statement = readyFirst(base).limit(n).toDelete(returning = listOf("*"))

    fun resendStatement(id: Any): Statement = dead(base, id).toUpdate(resendPatch)

    // ---- the calls ----

    /** Adds a job, ready now or after [delay]; answers the count written (1). */
    suspend fun enqueue(payload: Any?, delay: Duration = Duration.ZERO): Long =
        db.from(name).insert(enqueueDoc(payload, delay))

    /**
     * Takes up to [batch] of the oldest ready jobs for [owner] (unique for each claim) for [lease]. With [wait], a
     * claim that would take nothing is held at the server until a job is ready or the wait ends. Under
     * [idempotencyKey], a retry is answered the jobs the first try took.
     */
    suspend fun claim(owner: String, batch: Int = 10, lease: Duration = 30.seconds, wait: Duration? = null, idempotencyKey: String? = null): Rows {
        var client = db
        if (wait != null && wait > Duration.ZERO) client = client.withWait(wait)
        if (idempotencyKey != null) client = client.withIdempotencyKey(idempotencyKey)
        return claimQuery(client.from(name), batch).updateReturning(claimPatch(owner, lease))
    }

    /** Deletes a job this owner holds; false when its lease had lapsed and another took it (412). */
    suspend fun ack(id: Any, owner: String): Boolean = held { mine(db.from(name), id, owner).delete(require = 1) }

    /** Moves the lease of a job this owner holds to [lease] from now; false when the owner no longer holds it. */
    suspend fun extend(id: Any, owner: String, lease: Duration): Boolean =
        held { mine(db.from(name), id, owner).update(extendPatch(lease), require = 1) }

    /**
     * Gives a job back with its error: ready again after backoff × attempts², or dead once its attempts reach
     * [deadAfter]. False when the owner no longer holds it.
     */
    suspend fun fail(id: Any, owner: String, error: String?, deadAfter: Int = 5, backoff: Duration = 1.seconds): Boolean =
        held { mine(db.from(name), id, owner).update(failPatch(error, deadAfter, backoff), require = 1) }

    /** Takes and deletes up to [n] of the oldest ready jobs, with no lease: at most once. */
    suspend fun pop(n: Int): Rows = readyFirst(db.from(name)).limit(n).deleteReturning()

    /** Makes a dead job ready again with its attempts cleared; answers 1, or 0 when the job is not dead. */
    suspend fun resend(id: Any): Long = dead(db.from(name), id).update(resendPatch)

    /** The queue's gauges, each one count read through the builder. */
    suspend fun counts(): Counts {
        val q = db.from(name)
        val waiting = q.where(Cond.raw("run_at > now()"))
        return Counts(
            ready = q.where(Cond.raw("run_at <= now()")).count(),
            leased = waiting.where("owner", "!=", null).count(),
            delayed = waiting.where("owner", null).count(),
            dead = q.where("run_at", null).count(),
            total = q.count(),
        )
    }

    data class Counts(val ready: Long, val leased: Long, val delayed: Long, val dead: Long, val total: Long)

    // ---- the worker's own writes, text only: it sends them with keys and retries of its own ----

    internal fun retryStatement(id: Any, owner: String, error: String?, deadAfter: Int, after: Duration): Statement =
        mine(base, id, owner).toUpdate(linkedMapOf(
            "owner" to null, "error" to error,
            "run_at" to Computed.expr("case when attempts >= ? then null else now() + ? end", deadAfter, after.inWholeMilliseconds),
        ), require = 1)

    internal fun buryStatement(id: Any, owner: String, error: String): Statement =
        mine(base, id, owner).toUpdate(linkedMapOf("owner" to null, "error" to error, "run_at" to null), require = 1)

    internal fun keepDoneStatement(id: Any, owner: String): Statement =
        mine(base, id, owner).toUpdate(linkedMapOf("owner" to null, "run_at" to null, "done_at" to Computed.expr("now()")), require = 1)

    internal fun releaseStatement(id: Any, owner: String): Statement =
        mine(base, id, owner).toUpdate(linkedMapOf("owner" to null, "run_at" to Computed.expr("now()"), "attempts" to Computed.inc(-1)))

    private suspend fun held(write: suspend () -> Long): Boolean = try {
        write() == 1L
    } catch (e: FenecException) {
        if (e.code == FenecException.Code.UNMET) false else throw e
    }

    private fun enqueueDoc(payload: Any?, delay: Duration) =
        linkedMapOf("payload" to payload, "run_at" to Computed.expr("now() + ?", delay.inWholeMilliseconds), "attempts" to 0)

    private fun readyFirst(q: Query) = q.where(Cond.raw("run_at <= now()")).order("run_at")
    private fun claimQuery(q: Query, batch: Int) = readyFirst(q).limit(batch)
    private fun claimPatch(owner: String, lease: Duration) =
        linkedMapOf("owner" to owner, "run_at" to Computed.expr("now() + ?", lease.inWholeMilliseconds), "attempts" to Computed.inc(1))
    private fun mine(q: Query, id: Any, owner: String) = q.where("id", id).where("owner", owner)
    private fun extendPatch(lease: Duration) = linkedMapOf<String, Any?>("run_at" to Computed.expr("now() + ?", lease.inWholeMilliseconds))
    private fun failPatch(error: String?, deadAfter: Int, backoff: Duration) = linkedMapOf(
        "owner" to null, "error" to error,
        "run_at" to Computed.expr("case when attempts >= ? then null else now() + ? * attempts * attempts end", deadAfter, backoff.inWholeMilliseconds),
    )
    private fun dead(q: Query, id: Any) = q.where("id", id).where("run_at", null)
    private val resendPatch = linkedMapOf<String, Any?>("run_at" to Computed.expr("now()"), "attempts" to 0, "error" to null)
}
