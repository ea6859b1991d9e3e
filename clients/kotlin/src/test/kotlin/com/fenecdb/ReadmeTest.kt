package com.fenecdb

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
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
    fun `the quick start runs`() = runBlocking {
        val url = LiveServer.url()
        val mail = "mail_${System.nanoTime().toString(16)}"
        Fenec.connect(url).run("create collection $mail (payload json, run_at timestamp @sorted, owner text, attempts int, error text)")
        val owner = "w1:1"
        // readme:begin
        val db = Fenec.connect(url)
        val jobs = db.from(mail)
        jobs.insert(mapOf("payload" to mapOf("to" to "ada@example.com"), "run_at" to Computed.expr("now()"), "attempts" to 0))

        // claim: the oldest ready jobs, each ours for 30 s; held at the server up to 20 s while none is ready
        val claimed = db.withWait(20.seconds).from(mail)
            .where(Cond.raw("run_at <= now()")).order("run_at").limit(10)
            .updateReturning(mapOf("owner" to owner, "run_at" to Computed.expr("now() + ?", 30000), "attempts" to Computed.inc(1)))
        for (job in claimed) {
            // ... do the work, then ack: the delete fails with UNMET (412) if the lease lapsed and another took it
            jobs.where("id", job["id"]).where("owner", owner).delete(require = 1)
        }
        // readme:end
        assertEquals(1, claimed.size)
        assertEquals(0L, jobs.count())
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
    fun `the worker helper runs`() = runBlocking(Dispatchers.Default) {
        val url = LiveServer.url()
        val db = Fenec.connect(url)
        val name = "mail_${System.nanoTime().toString(16)}"
        db.run("create collection $name (payload json, run_at timestamp @sorted, owner text, attempts int, error text)")
        val sent = java.util.concurrent.ConcurrentLinkedQueue<Any?>()
        fun send(payload: Any?) { sent.add(payload) }
        // readme:begin
        val queue = JobQueue(db, name)
        queue.enqueue(mapOf("to" to "bo@example.com"))
        val workers = (1..3).map { n ->
            launch { Worker(queue, "w$n", lease = 30.seconds, wait = 20.seconds) { job -> send(job.payload) }.run() }
        }
        // readme:end
        withTimeout(10_000) { while (sent.isEmpty()) delay(20) }
        workers.forEach { it.cancelAndJoin() }
        assertEquals(listOf(mapOf("to" to "bo@example.com")), sent.toList())
        assertEquals(0L, queue.counts().total)
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
