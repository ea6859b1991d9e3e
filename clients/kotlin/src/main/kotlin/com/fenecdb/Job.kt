package com.fenecdb

import kotlin.time.Duration

/**
 * One claimed job, as a worker's handler sees it. A [Worker] cancels the handler's coroutine when the job's lease
 * is lost (a heartbeat answered 412: the lease lapsed and another worker took the job); [lost] then reads true.
 */
class Job internal constructor(private val queue: JobQueue, val row: Row, val owner: String) {
    @Volatile internal var lostFlag = false

    /** True once the worker learned that this job's lease was lost: its work is another worker's now. */
    val lost: Boolean get() = lostFlag

    val id: Any get() = row["id"]!!
    val payload: Any? get() = row["payload"]
    val attempts: Long get() = row.long("attempts") ?: 0

    /** Moves this job's lease on; false when it lapsed and another worker took the job. */
    suspend fun extend(lease: Duration): Boolean = queue.extend(id, owner, lease)
}
