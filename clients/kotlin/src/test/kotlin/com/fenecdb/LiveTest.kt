package com.fenecdb

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicInteger
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/** Against a real fenec-server on loopback (started by [LiveServer]). */
class LiveTest {
    private val schema = "(payload json, run_at timestamp @sorted, owner text, attempts int, error text)"
    private fun fresh(db: FenecRemote, prefix: String): String = runBlocking {
        val name = "${prefix}_${System.nanoTime().toString(16)}"
        db.run("create collection $name $schema")
        name
    }

    @Test
    fun `the server's refusals arrive with their codes`() = runBlocking {
        val db = Fenec.connect(LiveServer.url())
        val q = fresh(db, "errs")
        assertEquals(FenecException.Code.NOT_FOUND, assertThrows<FenecException> { runBlocking { db.from("nothing_here").rows() } }.code)
        val parse = assertThrows<FenecException> { runBlocking { db.run("get $q where") } }
        assertEquals(FenecException.Code.QUERY, parse.code)
        assertEquals(400, parse.status)
        val dup = assertThrows<FenecException> { runBlocking { db.run("create collection $q (a int)") } }
        assertEquals(FenecException.Code.DUPLICATE, dup.code)
        val unmet = assertThrows<FenecException> { runBlocking { db.from(q).where("id", 999).delete(require = 1) } }
        assertEquals(FenecException.Code.UNMET, unmet.code)
        assertEquals(412, unmet.status)
        // a batch lands whole or not at all, and names the statement that stopped it
        val stopped = assertThrows<FenecException> {
            runBlocking { db.batch(listOf(Query.from(q).toInsert(mapOf("attempts" to 1)), Query.from(q).where("id", 999).toDelete(require = 1))) }
        }
        assertEquals(1, stopped.at)
        assertEquals(0L, db.from(q).count())
        val ok = db.batch(listOf(Query.from(q).toInsert(mapOf("attempts" to 1)), Query.from(q).toFenecQL()))
        assertEquals(1L, ok.results[0].affected)
        assertEquals(1, ok.results[1].rows!!.size)
        assertTrue(db.seq > 0)
    }

    @Test
    fun `a claim retried under its key is answered the same jobs and takes no more`() = runBlocking {
        val db = Fenec.connect(LiveServer.url())
        val queue = JobQueue(db, fresh(db, "idem"))
        queue.enqueue(mapOf("n" to 1)); queue.enqueue(mapOf("n" to 2))
        val key = "kt-${System.nanoTime()}"
        val first = queue.claim("w1:1", batch = 1, idempotencyKey = key)
        assertFalse(db.replayed)
        val again = queue.claim("w1:1", batch = 1, idempotencyKey = key)
        assertTrue(db.replayed)
        assertEquals(first, again)
        assertEquals(1L, queue.counts().ready)
        val other = assertThrows<FenecException> { runBlocking { queue.claim("w1:2", batch = 1, idempotencyKey = key) } }
        assertEquals(422, other.status)
        assertEquals(FenecException.Code.IO, other.code)
    }

    @Test
    fun `a held claim wakes for a job, and a cancelled one takes nothing`() = runBlocking(Dispatchers.Default) {
        val db = Fenec.connect(LiveServer.url(), timeout = 2.seconds)
        val queue = JobQueue(db, fresh(db, "held"))
        val started = System.nanoTime()
        val held = async { queue.claim("w1:1", batch = 1, wait = 30.seconds) }
        delay(300)
        queue.enqueue(mapOf("key" to "c"))
        val got = held.await()
        val tookMs = (System.nanoTime() - started) / 1_000_000
        assertEquals("c", (got.single()["payload"] as Map<*, *>)["key"])
        assertTrue(tookMs in 250..15000, "woke after $tookMs ms, not at its 30 s deadline")

        // the wait outlives the client's own 2 s timeout: the timeout was extended by the wait
        val emptyStart = System.nanoTime()
        assertEquals(0, queue.claim("w1:2", batch = 1, wait = 2500.milliseconds).size)
        assertTrue((System.nanoTime() - emptyStart) / 1_000_000 >= 2300)

        val cancelled = launch { queue.claim("w2:1", batch = 1, wait = 5.seconds) }
        delay(200)
        withTimeout(1000) { cancelled.cancelAndJoin() }
        delay(100)
        queue.enqueue(mapOf("key" to "d"))
        val next = queue.claim("w3:1", batch = 5, wait = 1.seconds)
        assertEquals(listOf("d"), next.map { (it["payload"] as Map<*, *>)["key"] })
    }

    @Test
    fun `workers in several coroutines take every job once, fail and dead-letter by the rules`() = runBlocking(Dispatchers.Default) {
        val db = Fenec.connect(LiveServer.url())
        val queue = JobQueue(db, fresh(db, "swarm"))
        val jobs = 60
        val seen = ConcurrentHashMap<Long, AtomicInteger>()
        val failures = ConcurrentHashMap<Long, AtomicInteger>()
        val workers = (1..4).map { w ->
            Worker(db, queue.name, WorkerOptions(name = "w$w", batch = 3, lease = 5.seconds, wait = 1.seconds, maxAttempts = 2,
                backoff = { attempts -> 10.milliseconds * (attempts * attempts).toDouble() }))
        }
        val handler: suspend (Job) -> Unit = { job ->
            val n = (job.payload as Map<*, *>)["n"] as Long
            if (n % 10 == 0L) { // every tenth job always fails: after two attempts it is dead
                failures.getOrPut(n) { AtomicInteger() }.incrementAndGet()
                throw IllegalStateException("job $n refuses")
            }
            seen.getOrPut(n) { AtomicInteger() }.incrementAndGet()
        }
        val running = workers.map { w -> launch { w.run(handler) } }
        (1..jobs).map { n -> async { queue.enqueue(mapOf("n" to n)) } }.forEach { it.await() }
        withTimeout(30_000) {
            while (true) {
                val c = queue.counts()
                if (c.total == c.dead && c.dead == 6L) break
                delay(50)
            }
        }
        running.forEach { it.cancelAndJoin() }
        assertEquals(54, seen.size)
        assertTrue(seen.values.all { it.get() == 1 }, "a job was worked twice: $seen")
        assertEquals(54L, workers.sumOf { it.acked.get() })
        assertEquals(12L, workers.sumOf { it.failed.get() })
        assertTrue(failures.values.all { it.get() == 2 })
        val dead = db.from(queue.name).where("run_at", null).rows()
        assertEquals(6, dead.size)
        assertTrue(dead.all { it.string("error")!!.startsWith("job ") })
        assertEquals(1L, queue.resend(dead[0]["id"]!!))
        assertEquals(1, queue.pop(5).size)
    }
}
