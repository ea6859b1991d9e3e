package com.fenecdb

import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.awaitCancellation
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.api.Test
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicInteger
import kotlin.time.Duration.Companion.hours
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * The Worker against a real fenec-server: what its users rely on, each bounded by counts and conditions (with
 * generous deadlines), never by how fast this machine is.
 */
class WorkerTest {
    private val schema = "(payload json, run_at timestamp @sorted, owner text, attempts int, error text)"

    private suspend fun fresh(db: FenecRemote, prefix: String): JobQueue {
        val name = "${prefix}_${System.nanoTime().toString(16)}"
        db.run("create collection $name $schema")
        return JobQueue(db, name)
    }

    private suspend fun until(what: String, seconds: Long = 60, cond: suspend () -> Boolean) {
        val deadline = System.nanoTime() + seconds * 1_000_000_000
        while (!cond()) {
            if (System.nanoTime() - deadline > 0) fail<Unit>("waited $seconds s for $what")
            delay(20)
        }
    }

    private class Events : (WorkerEvent) -> Unit {
        val all = ConcurrentLinkedQueue<WorkerEvent>()
        override fun invoke(e: WorkerEvent) { all.add(e) }
        fun of(type: WorkerEvent.Type) = all.filter { it.type == type }
    }

    private fun Row.n(): Long = (this["payload"] as Map<*, *>)["n"] as Long

    @Test
    fun `the heartbeat keeps slow jobs - 5 s jobs under a 2 s lease, 3 workers, each job started once`() = runBlocking(Dispatchers.Default) {
        val db = Fenec.connect(LiveServer.url())
        val queue = fresh(db, "slow")
        repeat(3) { n -> queue.enqueue(mapOf("n" to n)) }
        val starts = ConcurrentHashMap<Any, AtomicInteger>()
        val workers = (1..3).map { w ->
            Worker(db, queue.name, WorkerOptions(name = "w$w", lease = 2.seconds, wait = 1.seconds))
        }
        val running = workers.map { w ->
            launch {
                w.run { job ->
                    starts.getOrPut(job.id) { AtomicInteger() }.incrementAndGet()
                    delay(5_000)
                }
            }
        }
        until("every job acked", 120) { workers.sumOf { it.acked.get() } == 3L }
        running.forEach { it.cancelAndJoin() }
        assertEquals(3, starts.size)
        assertTrue(starts.values.all { it.get() == 1 }, "a job started more than once: $starts")
        assertEquals(0L, workers.sumOf { it.lost.get() })
        assertEquals(0L, queue.counts().total)
    }

    @Test
    fun `a handler that blocks its thread does not starve the heartbeat`() {
        val db = Fenec.connect(LiveServer.url())
        val queue = runBlocking { fresh(db, "blocking") }
        runBlocking { repeat(2) { n -> queue.enqueue(mapOf("n" to n)) } }
        val starts = ConcurrentHashMap<Any, AtomicInteger>()
        val count = { job: Job -> starts.getOrPut(job.id) { AtomicInteger() }.incrementAndGet(); Unit }
        val events = Events()
        // runBlocking's one thread, blocked by each handler for 2.5 leases: the heartbeat runs elsewhere
        val blocked = Worker(db, queue.name, WorkerOptions(name = "blocked", batch = 2, lease = 1.seconds, wait = 1.seconds, onEvent = events))
        // another worker, on other threads, takes any job whose lease lapses
        val other = Worker(db, queue.name, WorkerOptions(name = "other", batch = 1, lease = 30.seconds, wait = 1.seconds))
        var otherRun: kotlinx.coroutines.Job? = null
        try {
            runBlocking {
                val running = launch { blocked.run { job -> count(job); Thread.sleep(2_500) } }
                until("the blocked worker claimed both jobs") { events.of(WorkerEvent.Type.CLAIMED).isNotEmpty() }
                assertEquals(2, events.of(WorkerEvent.Type.CLAIMED).single().count)
                otherRun = kotlinx.coroutines.CoroutineScope(Dispatchers.Default).launch { other.run(count) }
                until("both jobs settled by the blocked worker", 120) { blocked.acked.get() + blocked.lost.get() == 2L }
                running.cancelAndJoin()
            }
            assertEquals(0L, blocked.lost.get(), "the blocked worker lost a lease")
            assertEquals(2L, blocked.acked.get())
            assertTrue(starts.values.all { it.get() == 1 }, "a job started more than once: $starts")
        } finally {
            runBlocking { otherRun?.cancelAndJoin() }
        }
    }

    @Test
    fun `a lost lease cancels that job's handler, which is then neither acked nor failed, and the worker goes on`() = runBlocking(Dispatchers.Default) {
        val db = Fenec.connect(LiveServer.url())
        val queue = fresh(db, "lost")
        val events = Events()
        val cancelled = CompletableDeferred<Boolean>()
        val done = ConcurrentLinkedQueue<Long>()
        val worker = Worker(db, queue.name, WorkerOptions(name = "w1", batch = 1, lease = 1.seconds, wait = 1.seconds, onEvent = events))
        val running = launch {
            worker.run { job ->
                if (job.row.n() == 1L) {
                    try {
                        awaitCancellation()
                    } catch (e: CancellationException) {
                        cancelled.complete(job.lost)
                        throw e
                    }
                }
                done.add(job.row.n())
            }
        }
        queue.enqueue(mapOf("n" to 1))
        until("job 1 started") { events.of(WorkerEvent.Type.START).isNotEmpty() }
        val id = events.of(WorkerEvent.Type.START).single().id!!
        // another worker's claim after a lapse, as the next heartbeat finds it: the row names another owner
        val stolen = mapOf("owner" to "thief:1", "run_at" to Computed.expr("now() + ?", 3_600_000))
        assertEquals(1L, db.from(queue.name).where("id", id).update(stolen))
        assertTrue(withTimeout(60_000) { cancelled.await() }, "job.lost reads true in the cancelled handler")
        queue.enqueue(mapOf("n" to 2))
        until("job 2 done") { done.contains(2L) }
        running.cancelAndJoin()
        assertEquals(listOf(id), events.of(WorkerEvent.Type.LOST).map { it.id })
        val row = db.from(queue.name).where("id", id).first()!!
        assertEquals("thief:1", row.string("owner"))
        assertNull(row["error"])
        assertEquals(1L, worker.acked.get())
        assertEquals(0L, worker.failed.get())
    }

    @Test
    fun `the worker survives a server restart - an ack in flight and the next claims are retried, nothing is lost`() = runBlocking(Dispatchers.Default) {
        FileServer().use { server ->
            val db = Fenec.connect(server.url)
            val queue = fresh(db, "restart")
            val events = Events()
            val gate = CompletableDeferred<Unit>()
            val worked = ConcurrentHashMap<Long, AtomicInteger>()
            val worker = Worker(db, queue.name, WorkerOptions(name = "w1", batch = 1, lease = 30.seconds, wait = 1.seconds,
                timeout = 2.seconds, onEvent = events))
            val running = launch {
                worker.run { job ->
                    if (job.row.n() == 0L) gate.await()
                    worked.getOrPut(job.row.n()) { AtomicInteger() }.incrementAndGet()
                }
            }
            queue.enqueue(mapOf("n" to 0))
            until("job 0 started") { events.of(WorkerEvent.Type.START).isNotEmpty() }
            server.stop()
            gate.complete(Unit) // the handler returns while the server is down: its ack is retried
            until("a retry while the server is down") { events.of(WorkerEvent.Type.RETRY).size >= 2 }
            server.start()
            until("job 0 acked after the restart") { worker.acked.get() == 1L }
            for (n in 1..5) queue.enqueue(mapOf("n" to n))
            until("jobs enqueued after the restart done") { worker.acked.get() == 6L }
            assertTrue(running.isActive, "run() is still working")
            running.cancelAndJoin()
            assertEquals((0L..5L).toSet(), worked.keys)
            assertTrue(worked.values.all { it.get() == 1 }, "a job ran twice: $worked")
            assertEquals(0L, worker.lost.get())
            assertEquals(0L, queue.counts().total)
        }
    }

    @Test
    fun `a graceful stop gives the unstarted jobs back at once, lets the running one finish, and gives up a held claim`() = runBlocking(Dispatchers.Default) {
        val db = Fenec.connect(LiveServer.url())
        val queue = fresh(db, "stop")
        for (n in 1..6) queue.enqueue(mapOf("n" to n))
        val events = Events()
        val gate = CompletableDeferred<Unit>()
        val worker = Worker(db, queue.name, WorkerOptions(name = "w1", batch = 6, concurrency = 1, lease = 30.seconds, wait = 30.seconds,
            drainTimeout = 1.hours, onEvent = events))
        val running = launch { worker.run { gate.await() } }
        until("the first job started") { events.of(WorkerEvent.Type.START).size == 1 }
        worker.stop()
        // the five never started are ready again, with the claim's attempt undone, while the first still runs
        until("five jobs given back") { worker.released.get() == 5L }
        assertFalse(gate.isCompleted)
        val ready = db.from(queue.name).where("owner", null).rows()
        assertEquals(5, ready.size)
        assertTrue(ready.all { it.long("attempts") == 0L }, "attempts undone: $ready")
        gate.complete(Unit)
        withTimeout(60_000) { running.join() }
        assertEquals(1L, worker.acked.get())
        assertEquals(1, events.of(WorkerEvent.Type.START).size)
        assertEquals(WorkerEvent.Type.STOPPED, events.all.last().type)

        // an idle worker's held claim (30 s) is given up by stop(): run returns long before the wait would end
        val idle = Worker(db, fresh(db, "idle").name, WorkerOptions(name = "w2", wait = 30.seconds))
        val idling = launch { idle.run { } }
        delay(300)
        val asked = System.nanoTime()
        idle.stop()
        withTimeout(60_000) { idling.join() }
        assertTrue((System.nanoTime() - asked) / 1_000_000 < 20_000, "stop() waited out the held claim")
    }

    @Test
    fun `past the drain timeout a running job is cancelled and given back, and a hard stop gives back everything at once`() = runBlocking(Dispatchers.Default) {
        val db = Fenec.connect(LiveServer.url())
        val queue = fresh(db, "drain")
        for (n in 1..3) queue.enqueue(mapOf("n" to n))
        val events = Events()
        val drained = Worker(db, queue.name, WorkerOptions(name = "w1", batch = 1, lease = 30.seconds, wait = 1.seconds,
            drainTimeout = 200.milliseconds, onEvent = events))
        val running = launch { drained.run { awaitCancellation() } }
        until("a job started") { events.of(WorkerEvent.Type.START).isNotEmpty() }
        drained.stop()
        withTimeout(60_000) { running.join() }
        assertEquals(1L, drained.released.get())
        val back = db.from(queue.name).where("id", events.of(WorkerEvent.Type.START).single().id).first()!!
        assertNull(back["owner"])
        assertEquals(0L, back.long("attempts"), "a job given back has its claim's attempt taken off")
        assertNull(back["error"])

        // hard: cancel the coroutine that runs the worker, with a batch of 3 in hand and 2 running
        val hardEvents = Events()
        val hard = Worker(db, queue.name, WorkerOptions(name = "w2", batch = 3, concurrency = 2, lease = 30.seconds, wait = 1.seconds,
            drainTimeout = 1.hours, onEvent = hardEvents))
        val cancelledHandlers = AtomicInteger()
        val runningHandlers = AtomicInteger()
        val hardRun = launch {
            hard.run {
                runningHandlers.incrementAndGet()
                try { awaitCancellation() } catch (e: CancellationException) { cancelledHandlers.incrementAndGet(); throw e }
            }
        }
        until("two handlers running") { runningHandlers.get() == 2 }
        withTimeout(60_000) { hardRun.cancelAndJoin() }
        until("both handlers cancelled") { cancelledHandlers.get() == 2 } // they run in the worker's scope, not run's
        assertEquals(3L, hard.released.get(), hardEvents.all.joinToString("\n"))
        assertEquals(3L, db.from(queue.name).where("owner", null).count())
        assertEquals(WorkerEvent.Type.STOPPED, hardEvents.all.last().type)
    }

    @Test
    fun `a handler that throws, or whose own withTimeout fires, fails its job and the worker goes on`() = runBlocking(Dispatchers.Default) {
        val db = Fenec.connect(LiveServer.url())
        val queue = fresh(db, "throw")
        val events = Events()
        val worker = Worker(db, queue.name, WorkerOptions(name = "w1", batch = 1, wait = 1.seconds, backoff = { 1.hours }, onEvent = events))
        val running = launch {
            worker.run { job ->
                when (job.row.n()) {
                    1L -> throw IllegalStateException("job one refuses")
                    2L -> withTimeout(50) { delay(60_000) }
                    3L -> error("the last attempt")
                }
            }
        }
        queue.enqueue(mapOf("n" to 1))
        queue.enqueue(mapOf("n" to 2))
        db.from(queue.name).insert(mapOf("payload" to mapOf("n" to 3), "run_at" to Computed.expr("now()"), "attempts" to 4))
        queue.enqueue(mapOf("n" to 4))
        until("job 4 acked after the three failures") { worker.acked.get() == 1L && worker.failed.get() == 3L }
        assertTrue(running.isActive)
        running.cancelAndJoin()
        val rows = db.from(queue.name).order("id").rows()
        assertEquals(listOf(1L, 2L, 3L), rows.map { it.n() })
        assertEquals("job one refuses", rows[0].string("error"))
        assertTrue(rows[1].string("error")!!.startsWith("Timed out"), rows[1].string("error"))
        assertTrue(rows.take(2).all { it["owner"] == null && it["run_at"] != null }, "failed, ready again after the backoff: $rows")
        // failed at its fifth attempt: a dead letter
        assertNull(rows[2]["run_at"])
        assertEquals("the last attempt", rows[2].string("error"))
        assertEquals(listOf(WorkerEvent.Type.FAILED, WorkerEvent.Type.FAILED, WorkerEvent.Type.DEAD),
            events.all.filter { it.type == WorkerEvent.Type.FAILED || it.type == WorkerEvent.Type.DEAD }.map { it.type })
    }

    @Test
    fun `a job claimed past maxAttempts is dead-lettered without running`() = runBlocking(Dispatchers.Default) {
        val db = Fenec.connect(LiveServer.url())
        val queue = fresh(db, "dead")
        db.from(queue.name).insert(mapOf("payload" to mapOf("n" to 1), "run_at" to Computed.expr("now()"), "attempts" to 3))
        queue.enqueue(mapOf("n" to 2))
        val ran = ConcurrentLinkedQueue<Long>()
        val worker = Worker(db, queue.name, WorkerOptions(name = "w1", batch = 10, maxAttempts = 3, wait = 1.seconds))
        val running = launch { worker.run { job -> ran.add(job.row.n()) } }
        until("both settled") { worker.dead.get() == 1L && worker.acked.get() == 1L }
        running.cancelAndJoin()
        assertEquals(listOf(2L), ran.toList())
        val row = db.from(queue.name).rows().single()
        assertEquals(1L, row.n())
        assertNull(row["run_at"])
        assertNull(row["owner"])
        assertEquals(4L, row.long("attempts"))
        assertEquals("attempts exhausted", row.string("error"))
    }

    @Test
    fun `jobs of a batch run side by side up to the concurrency, never more`() = runBlocking(Dispatchers.Default) {
        val db = Fenec.connect(LiveServer.url())
        val queue = fresh(db, "conc")
        for (n in 1..9) queue.enqueue(mapOf("n" to n))
        val inFlight = AtomicInteger()
        val most = AtomicInteger()
        val started = AtomicInteger()
        val firstThree = CompletableDeferred<Unit>()
        val worker = Worker(db, queue.name, WorkerOptions(name = "w1", batch = 9, concurrency = 3, wait = 1.seconds))
        val running = launch {
            worker.run {
                val now = inFlight.incrementAndGet()
                most.accumulateAndGet(now) { a, b -> maxOf(a, b) }
                if (started.incrementAndGet() == 3) firstThree.complete(Unit)
                firstThree.await() // the first three are all in hand at once before any returns
                delay(20)
                inFlight.decrementAndGet()
            }
        }
        until("nine acked") { worker.acked.get() == 9L }
        running.cancelAndJoin()
        assertEquals(3, most.get())
    }
}
