package com.fenecdb

import com.sun.net.httpserver.HttpServer
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.AfterEach
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.net.InetSocketAddress
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.AtomicInteger
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds

/**
 * The worker's retries against a scripted listener that answers a 503, then cuts a connection without an answer:
 * what goes on the wire, header by header. No FenecDB server needed.
 */
class WorkerRetryTest {
    private class Seen(val key: String?, val wait: String?, val body: String)

    private val seen = CopyOnWriteArrayList<Seen>()
    private val n = AtomicInteger()

    // 1: the claim meets a 503; 2: the claim again, answered one job; 3: the ack, cut with no answer; 4: the ack again
    private val server = HttpServer.create(InetSocketAddress("127.0.0.1", 0), 0).apply {
        createContext("/") { ex ->
            seen.add(Seen(ex.requestHeaders.getFirst("Idempotency-Key"), ex.requestHeaders.getFirst("Fenec-Wait"),
                ex.requestBody.readBytes().toString(Charsets.UTF_8)))
            val (status, answer) = when (n.incrementAndGet()) {
                1 -> 503 to """{"error":"too many connections"}"""
                2 -> 200 to """[{"id":7,"payload":{"to":"ada"},"attempts":1}]"""
                3 -> { ex.close(); return@createContext }
                4 -> 200 to """{"affected":1}"""
                else -> 200 to "[]"
            }
            val bytes = answer.toByteArray()
            ex.sendResponseHeaders(status, bytes.size.toLong())
            ex.responseBody.use { it.write(bytes) }
        }
        executor = java.util.concurrent.Executors.newCachedThreadPool()
        start()
    }

    @AfterEach
    fun stop() = server.stop(0)

    @Test
    fun `a claim that met a 503 and an ack whose answer was cut are sent again under their own keys`() = runBlocking(Dispatchers.Default) {
        val events = ConcurrentLinkedQueue<WorkerEvent>()
        val db = Fenec.connect("http://127.0.0.1:${server.address.port}")
        val worker = Worker(db, "jobs", WorkerOptions(name = "w1", wait = Duration.ZERO, retryMin = 10.milliseconds,
            retryMax = 20.milliseconds, onEvent = { events.add(it) }))
        val ran = ConcurrentLinkedQueue<Any>()
        val running = launch { worker.run { job -> ran.add(job.id) } }
        withTimeout(60_000) { while (worker.acked.get() < 1L) delay(10) }
        worker.stop()
        withTimeout(60_000) { running.join() }

        assertEquals(listOf<Any>(7L), ran.toList())
        val owner = events.first { it.type == WorkerEvent.Type.CLAIMED }.owner!!
        assertTrue(owner.startsWith("w1:"))
        assertEquals(listOf("claim:$owner", "claim:$owner", "ack:$owner:7", "ack:$owner:7"), seen.take(4).map { it.key })
        assertEquals(seen[0].body, seen[1].body) // the same request under the same key: the server replays it
        assertEquals(seen[2].body, seen[3].body)
        assertNull(seen[0].wait)
        assertEquals(2, events.count { it.type == WorkerEvent.Type.RETRY })
        assertEquals(listOf(WorkerEvent.Type.CLAIMED, WorkerEvent.Type.START, WorkerEvent.Type.DONE),
            events.filter { it.type != WorkerEvent.Type.RETRY && it.type != WorkerEvent.Type.STOPPED }.map { it.type })
        assertEquals(0L, worker.lost.get())
    }
}
