package com.fenecdb

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File
import kotlin.time.Duration.Companion.seconds

/**
 * The README's examples are these tests: each ```kotlin block of clients/kotlin/README.md must be, word for word,
 * one of the regions marked `readme:begin` / `readme:end` below, and every region must stand in the README. The
 * regions run against a live server.
 */
class ReadmeTest {
    private fun regions(): List<String> {
        val source = File(LiveServer.root, "clients/kotlin/src/test/kotlin/com/fenecdb/ReadmeTest.kt").readLines()
        val out = ArrayList<String>()
        var current: MutableList<String>? = null
        for (line in source) {
            when {
                line.trim() == "// readme:begin" -> current = ArrayList()
                line.trim() == "// readme:end" -> { out.add(current!!.joinToString("\n").trimIndent()); current = null }
                current != null -> current.add(line)
            }
        }
        return out
    }

    @Test
    fun `every README example is a region of this file, and every region is in the README`() {
        val readme = File(LiveServer.root, "clients/kotlin/README.md").readText()
        val blocks = Regex("```kotlin\n(.*?)\n```", RegexOption.DOT_MATCHES_ALL).findAll(readme).map { it.groupValues[1].trimIndent() }.toList()
        val regions = regions()
        assertEquals(regions.size, blocks.size, "README kotlin blocks vs test regions")
        for (b in blocks) assertEquals(true, b in regions, "a README example that no test runs:\n$b")
    }

    @Test
    fun `the README's Java block is JavaCallerTest's region`() {
        val readme = File(LiveServer.root, "clients/kotlin/README.md").readText()
        val blocks = Regex("```java\n(.*?)\n```", RegexOption.DOT_MATCHES_ALL).findAll(readme).map { it.groupValues[1] }.toList()
        val java = File(LiveServer.root, "clients/kotlin/src/test/kotlin/com/fenecdb/JavaCallerTest.java").readText()
        val region = java.substringAfter("// readme:begin\n").substringBefore("        // readme:end").trimIndent().trim()
        assertEquals(listOf(region), blocks.map { it.trim() })
    }

    @Test
    fun `the quick start runs`() = runBlocking<Unit> {
        System.setProperty("fenecdb.url", LiveServer.url()) // what a user's program is given with -Dfenecdb.url=...
        // readme:begin
        val db = Fenec.connect(System.getProperty("fenecdb.url", "http://127.0.0.1:8080"))
        db.run("create collection mail (payload json, run_at timestamp @sorted, owner text, attempts int, error text)")
        val jobs = db.from("mail")
        val owner = "w1:${System.currentTimeMillis()}" // a new owner token for each claim
        jobs.insert(mapOf("payload" to mapOf("to" to "ada@example.com"), "run_at" to Computed.expr("now()"), "attempts" to 0))

        // claim: the oldest ready jobs, each ours for 30 s; held at the server up to 20 s while none is ready
        val claimed = db.withWait(20.seconds).from("mail")
            .where(Cond.raw("run_at <= now()")).order("run_at").limit(10)
            .updateReturning(mapOf("owner" to owner, "run_at" to Computed.expr("now() + ?", 30000), "attempts" to Computed.inc(1)))
        for (job in claimed) {
            // ... do the work, then ack: the delete fails with UNMET (412) if the lease lapsed and another took it
            jobs.where("id", job["id"]).where("owner", owner).delete(require = 1)
        }
        // readme:end
        assertEquals(1, claimed.size)
        assertEquals(0L, jobs.count())
        db.run("drop collection mail")
    }

    @Test
    fun `the text-only builder runs`() {
        // readme:begin
        val (text, params) = Query.from("mail_jobs").where("id", 41).where("owner", "w9:17").toDelete(require = 1)
        // text   == "del mail_jobs where id = $1 and owner = $2 require 1"
        // params == [41, "w9:17"]
        // readme:end
        assertEquals("del mail_jobs where id = \$1 and owner = \$2 require 1", text)
        assertEquals(listOf(41L, "w9:17"), params)
    }

    @Test
    fun `the worker helper runs, and goes on across a server restart`() = runBlocking(Dispatchers.Default) {
        FileServer().use { server ->
            System.setProperty("fenecdb.url", server.url)
            val sent = java.util.concurrent.ConcurrentLinkedQueue<String>()
            fun send(to: String) { sent.add(to) }
            // readme:begin
            val db = Fenec.connect(System.getProperty("fenecdb.url", "http://127.0.0.1:8080"))
            db.run("create collection if not exists jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)")
            val worker = Worker(db, "jobs", WorkerOptions(batch = 10, concurrency = 4, lease = 30.seconds, wait = 30.seconds))
            worker.enqueue(mapOf("to" to "ada@example.com"))
            val running = launch { worker.run { job -> send((job.payload as Map<*, *>)["to"] as String) } }
            // readme:end
            withTimeout(60_000) { while (sent.isEmpty()) delay(20) }
            server.stop() // a restart while the claim after ada's is held at the server
            server.start()
            worker.enqueue(mapOf("to" to "bo@example.com"))
            withTimeout(120_000) { while (sent.size < 2) delay(20) }
            assertTrue(running.isActive)
            // readme:begin
            worker.stop()   // no more claims; the jobs not started go back now; running ones finish within drainTimeout
            running.join()  // run() has returned, within drainTimeout + 1 s; worker.stop(hard = true) cancels them now
            // readme:end
            assertEquals(listOf("ada@example.com", "bo@example.com"), sent.toList())
            assertEquals(0L, JobQueue(db, "jobs").counts().total)
        }
    }

    @Test
    fun `a client of a primary and its replica runs`() = runBlocking<Unit> {
        ReplicaPair().use { pair ->
            System.setProperty("fenecdb.primary", pair.primary)
            System.setProperty("fenecdb.replica", pair.replica)
            // readme:begin
            val primary = System.getProperty("fenecdb.primary", "http://127.0.0.1:8080")
            val replica = System.getProperty("fenecdb.replica", "http://127.0.0.1:8081")
            val db = Fenec.connect(listOf(replica, primary), readFrom = ReadFrom.REPLICA)
            db.run("create collection notes (text text)") // writes go to the primary, whichever server is named first
            db.from("notes").insert(mapOf("id" to 1, "text" to "hello"))
            check(db.url == primary)
            // a read goes to the replica with Fenec-After: db.seq, so it waits there for the insert above
            val note = db.from("notes").where("id", 1).first()
            // readme:end
            assertEquals("hello", note?.get("text"))
        }
    }

    @Test
    fun `errors read as codes`() = runBlocking {
        val db = Fenec.connect(LiveServer.url())
        var said = ""
        // readme:begin
        try {
            db.from("mail_jobs_that_are_not").where("id", 1).delete(require = 1)
        } catch (e: FenecException) {
            when (e.code) {
                FenecException.Code.UNMET -> said = "the lease lapsed"
                FenecException.Code.NOT_FOUND -> said = "no such collection (${e.status})"
                else -> throw e
            }
        }
        // readme:end
        assertEquals("no such collection (404)", said)
    }
}
