package com.fenecdb

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNotEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/** The worker's options: the defaults every SDK shares, and the values refused before a worker starts. */
class WorkerOptionsTest {
    @Test
    fun `the defaults are the shared ones`() {
        val o = WorkerOptions()
        assertTrue(Regex("w-[0-9a-f]{8}").matches(o.name), o.name)
        assertNotEquals(o.name, WorkerOptions().name)
        assertEquals(10, o.batch)
        assertEquals(1, o.concurrency)
        assertEquals(30.seconds, o.lease)
        assertEquals(30.seconds, o.wait)
        assertNull(o.heartbeat)
        assertEquals(10.seconds, o.beat)
        assertEquals(5, o.maxAttempts)
        assertEquals(listOf(1.seconds, 4.seconds, 9.seconds), (1L..3L).map { o.backoff(it) })
        assertEquals(30.seconds, o.drainTimeout)
        assertEquals(100.milliseconds, o.retryMin)
        assertEquals(5.seconds, o.retryMax)
        assertEquals(10.seconds, o.timeout)
        assertFalse(o.keepDone)
        assertNull(o.onEvent)
    }

    @Test
    fun `the heartbeat follows the lease unless it is given`() {
        assertEquals(1.seconds, WorkerOptions().copy(lease = 3.seconds).beat)
        assertEquals(200.milliseconds, WorkerOptions(lease = 3.seconds, heartbeat = 200.milliseconds).beat)
        assertEquals(Duration.ZERO, WorkerOptions(heartbeat = Duration.ZERO).beat) // off
    }

    @Test
    fun `values a worker cannot run with are refused with what was wrong`() {
        fun refused(make: () -> WorkerOptions): String = assertThrows<IllegalArgumentException> { make() }.message!!
        assertEquals("batch is a count of jobs from 1 (got 0)", refused { WorkerOptions(batch = 0) })
        assertEquals("concurrency is a count of jobs from 1 (got 0)", refused { WorkerOptions(concurrency = 0) })
        assertEquals("heartbeat is a duration above 0 and below the lease, or Duration.ZERO for none (got 30s)", refused { WorkerOptions(heartbeat = 30.seconds) })
        assertEquals("retryMin is a pause above 0, and retryMax at least as long (got 1s, 500ms)", refused { WorkerOptions(retryMin = 1.seconds, retryMax = 500.milliseconds) })
        assertEquals("lease is a duration of at least 1 ms (got 0s)", refused { WorkerOptions(lease = Duration.ZERO) })
        assertEquals("maxAttempts is a count from 1 (got 0)", refused { WorkerOptions(maxAttempts = 0) })
        assertEquals("a worker's name is a text, not empty", refused { WorkerOptions(name = "") })
        assertEquals("timeout is a duration above 0 (got 0s)", refused { WorkerOptions(timeout = Duration.ZERO) })
    }
}
