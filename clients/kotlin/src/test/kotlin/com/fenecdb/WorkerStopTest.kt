package com.fenecdb

import com.fenecdb.Scripted.Reply
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitCancellation
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.api.Test
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicInteger
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * The contract's lifecycle where the server fails the worker: a stop bounded by the drain timeout whether the server
 * answers or not, jobs nobody took never reported lost, the hard stop, a refusal that ends run, a stop before run.
 * Each against a scripted listener; the bounds are checked with margins far wider than any machine's slowness and
 * far narrower than the request timeout a worker that waited on the server would need.
 */
class WorkerStopTest {
    private val three = """[{"id":1,"payload":{},"attempts":1},{"id":2,"payload":{},"attempts":1},{"id":3,"payload":{},"attempts":1}]"""

    /** A server that answers one claim of three jobs, then, once [down] is set, freezes (or, [refuse]: goes away). */
    private class Outage(json: String, val refuse: Boolean) : AutoCloseable {
        val down = AtomicBoolean()
        private val claims = AtomicInteger()
        val server = Scripted { key, _ ->
            when {
                down.get() -> Reply.Freeze
                key!!.startsWith("claim:") -> if (claims.incrementAndGet() == 1) Scripted.ok(json) else Scripted.ok("[]")
                else -> Scripted.affected
            }
        }

        fun goDown() {
            down.set(true)
            if (refuse) server.down()
        }

        override fun close() = server.close()
    }

    /** [block] within 45 s, or a failure that names the wait that was not met (a report that says which one). */
    private suspend fun <T> within(what: String, block: suspend () -> T): T = try {
        withTimeout(45_000) { block() }
    } catch (e: TimeoutCancellationException) {
        fail("$what: not within 45 s", e)
    }

    private fun events() = ConcurrentLinkedQueue<WorkerEvent>()
    private fun ConcurrentLinkedQueue<WorkerEvent>.types() = map { it.type }

    @Test
    fun `a graceful stop while the server does not answer returns within the drain timeout and a second`() = runBlocking(Dispatchers.Default) {
        Outage(three, refuse = false).use { outage ->
            val seen = events()
            // a request timeout far past the bound: a stop that waited on the frozen server would take a minute
            val worker = Worker(Fenec.connect(outage.server.url), "jobs", WorkerOptions(name = "w1", batch = 3, wait = Duration.ZERO,
                drainTimeout = 1.seconds, timeout = 60.seconds, retryMin = 10.milliseconds, retryMax = 20.milliseconds, onEvent = { seen.add(it) }))
            var stoppedAt = 0L
            val running = async {
                worker.run {
                    outage.goDown() // the first job: the server freezes, then the stop comes; its ack is sent to nobody
                    stoppedAt = System.nanoTime()
                    worker.stop()
                }
            }
            within("run returning after a graceful stop") { running.await() }
            val took = (System.nanoTime() - stoppedAt) / 1_000_000
            assertTrue(took < 20_000, "run returned $took ms after the stop: the bound is the drain timeout (1 s) + 1 s")
            assertEquals(WorkerEvent.Type.STOPPED, seen.last().type)
            assertTrue(WorkerEvent.Type.LOST !in seen.types(), "no job was taken by another worker: ${seen.types()}")
        }
    }

    @Test
    fun `a stop while the server is down reports no job lost - nobody took them, they come back when their lease runs out`() = runBlocking(Dispatchers.Default) {
        Outage(three, refuse = true).use { outage ->
            val seen = events()
            val worker = Worker(Fenec.connect(outage.server.url), "jobs", WorkerOptions(name = "w1", batch = 3, wait = Duration.ZERO,
                drainTimeout = 200.milliseconds, timeout = 2.seconds, retryMin = 10.milliseconds, retryMax = 20.milliseconds, onEvent = { seen.add(it) }))
            val running = async {
                worker.run {
                    outage.goDown()
                    worker.stop()
                }
            }
            within("run returning after a stop while the server is down") { running.await() }
            assertTrue(seen.any { it.type == WorkerEvent.Type.RETRY }, "the ack and the give-backs met the outage: ${seen.types()}")
            assertEquals(listOf(WorkerEvent.Type.CLAIMED, WorkerEvent.Type.START, WorkerEvent.Type.STOPPED),
                seen.types().filter { it != WorkerEvent.Type.RETRY })
            assertEquals(0L, worker.lost.get())
        }
    }

    @Test
    fun `a hard stop cancels the handlers at once and returns within a second even while the server does not answer`() = runBlocking(Dispatchers.Default) {
        Outage(three, refuse = false).use { outage ->
            val seen = events()
            val entered = AtomicInteger()
            val cancelled = AtomicInteger()
            val worker = Worker(Fenec.connect(outage.server.url), "jobs", WorkerOptions(name = "w1", batch = 3, concurrency = 2,
                wait = Duration.ZERO, drainTimeout = 1_000.seconds, timeout = 60.seconds, onEvent = { seen.add(it) }))
            val running = async {
                worker.run {
                    entered.incrementAndGet()
                    try { awaitCancellation() } catch (e: CancellationException) { cancelled.incrementAndGet(); throw e }
                }
            }
            // both handlers inside their bodies, not only announced by START: a handler cancelled before its coroutine
            // was first dispatched never runs, and so never sees the cancellation this test counts
            within("both handlers inside their bodies") { while (entered.get() < 2) delay(10) }
            outage.goDown()
            val asked = System.nanoTime()
            worker.stop(hard = true)
            within("run returning after a hard stop") { running.await() }
            val took = (System.nanoTime() - asked) / 1_000_000
            assertTrue(took < 20_000, "run returned $took ms after a hard stop: the bound is 1 s")
            within("both handlers cancelled") { while (cancelled.get() < 2) delay(10) }
            assertTrue(WorkerEvent.Type.LOST !in seen.types(), "${seen.types()}")
            assertEquals(WorkerEvent.Type.STOPPED, seen.last().type)
        }
    }

    @Test
    fun `a hard stop gives every job in hand back, the running ones cancelled`() = runBlocking(Dispatchers.Default) {
        Outage(three, refuse = false).use { outage ->
            val seen = events()
            val worker = Worker(Fenec.connect(outage.server.url), "jobs", WorkerOptions(name = "w1", batch = 3, concurrency = 2,
                wait = Duration.ZERO, drainTimeout = 1_000.seconds, onEvent = { seen.add(it) }))
            val running = async { worker.run { awaitCancellation() } }
            within("two jobs started") { while (seen.count { it.type == WorkerEvent.Type.START } < 2) delay(10) }
            worker.stop(hard = true)
            within("run returning after a hard stop") { running.await() }
            assertEquals(3L, worker.released.get())
            val releases = outage.server.seen.filter { it.key!!.startsWith("release:") }
            assertEquals(3, releases.size)
            assertTrue(releases.all { "coalesce(attempts, 0) + \$" in it.body && "-1" in it.body }, "the claim's attempt taken off: ${releases.map { it.body }}")
            assertEquals(WorkerEvent.Type.STOPPED, seen.last().type)
        }
    }

    @Test
    fun `an answer no retry mends ends run with it, after a stop`() = runBlocking(Dispatchers.Default) {
        val claims = AtomicInteger()
        Scripted { key, _ ->
            when {
                key!!.startsWith("claim:") -> { claims.incrementAndGet(); Scripted.ok("""[{"id":1,"payload":{},"attempts":1}]""") }
                else -> Reply.Answer(403, """{"error":"the document is outside what this token may write to `jobs`"}""")
            }
        }.use { server ->
            val seen = events()
            val worker = Worker(Fenec.connect(server.url), "jobs", WorkerOptions(name = "w1", wait = Duration.ZERO, onEvent = { seen.add(it) }))
            val thrown = within("run ending with the refusal") {
                try {
                    worker.run { }
                    null
                } catch (e: FenecException) {
                    e
                }
            }!!
            assertEquals(403, thrown.status)
            assertEquals(FenecException.Code.DENIED, thrown.code)
            assertEquals(1, claims.get(), "no claim after the refusal")
            assertEquals(listOf(WorkerEvent.Type.CLAIMED, WorkerEvent.Type.START, WorkerEvent.Type.STOPPED), seen.types())
        }
    }

    @Test
    fun `a stop before run makes run return at once, having claimed nothing`() = runBlocking(Dispatchers.Default) {
        Scripted { _, _ -> Scripted.ok("[]") }.use { server ->
            val worker = Worker(Fenec.connect(server.url), "jobs", WorkerOptions(name = "w1"))
            worker.stop()
            within("run returning after a stop before run") { worker.run { } }
            assertEquals(0, server.seen.size)
        }
    }
}
