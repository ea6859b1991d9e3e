package com.fenecdb

import com.sun.net.httpserver.HttpServer
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.net.InetSocketAddress
import java.net.ServerSocket
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.Executors
import kotlin.time.Duration.Companion.milliseconds

/**
 * A primary and its replicas, played by local listeners: a replica's 403 followed to the primary it names, a server
 * that cannot be reached left for the next, reads sent to a replica with `Fenec-After` and back to the primary on a
 * 504, and the worker's `PRIMARY` event (the SDKs' contract for replicas, rules 1-6). No FenecDB server needed.
 */
class ReplicasTest {
    class Seen(val headers: Map<String, String>, val body: String)
    class Answer(val status: Int, val json: String, val headers: Map<String, String> = emptyMap())

    /** A listener answering each request as [answer] says from its body. */
    class Fake(private val answer: (body: String) -> Answer) : AutoCloseable {
        val seen = CopyOnWriteArrayList<Seen>()
        private val server = HttpServer.create(InetSocketAddress("127.0.0.1", 0), 0).apply {
            createContext("/") { ex ->
                val body = ex.requestBody.readBytes().toString(Charsets.UTF_8)
                seen.add(Seen(ex.requestHeaders.entries.associate { (k, v) -> k.lowercase() to v.joinToString(",") }, body))
                val a = answer(body)
                a.headers.forEach { (k, v) -> ex.responseHeaders.add(k, v) }
                val bytes = a.json.toByteArray()
                ex.sendResponseHeaders(a.status, bytes.size.toLong())
                ex.responseBody.use { it.write(bytes) }
            }
            executor = Executors.newCachedThreadPool { r -> Thread(r).apply { isDaemon = true } }
            start()
        }
        val url: String get() = "http://127.0.0.1:${server.address.port}"
        override fun close() = server.stop(0)
    }

    private fun replicaOf(primary: String) =
        Fake { Answer(403, """{"error":"this server is a replica: send writes and claims to its primary, $primary"}""", mapOf("Fenec-Primary" to primary)) }

    /** A URL where every connection is refused. */
    private fun nobody(): String = ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress()).use { "http://127.0.0.1:${it.localPort}" }

    private val affected = Answer(200, """{"affected":1}""")

    @Test
    fun `a replica's 403 is followed to the primary it names, and a 403 without Fenec-Primary is the caller's`() = runBlocking {
        Fake { affected }.use { p ->
            replicaOf("${p.url}/").use { r ->
                val db = Fenec.connect(listOf(r.url))
                val keyed = db.withIdempotencyKey("k1")
                assertEquals(1L, keyed.run("put jobs {a: 1}").affected)
                assertEquals("""{"query":"put jobs {a: 1}","params":[]}""", p.seen.single().body)
                assertEquals("k1", p.seen.single().headers["idempotency-key"])
                assertEquals(p.url, db.url)
                assertEquals(p.url, keyed.url)
                db.run("put jobs {a: 2}")
                assertEquals(1, r.seen.size)
                assertEquals(2, p.seen.size)
            }
            Fake { Answer(403, """{"error":"outside the token's rules"}""") }.use { plain ->
                val e = assertThrows<FenecException> { runBlocking { Fenec.connect(listOf(plain.url, p.url)).run("put jobs {a: 3}") } }
                assertEquals(FenecException.Code.DENIED, e.code)
                assertNull(e.primary)
                assertEquals(1, plain.seen.size)
                assertEquals(2, p.seen.size)
            }
        }
    }

    @Test
    fun `two servers naming each other are followed twice, then the 403 is the caller's`() {
        var other = ""
        Fake { Answer(403, "{}", mapOf("Fenec-Primary" to other)) }.use { a ->
            replicaOf(a.url).use { b ->
                other = b.url
                val e = assertThrows<FenecException> { runBlocking { Fenec.connect(a.url).run("put jobs {a: 1}") } }
                assertEquals(403, e.status)
                assertTrue(e.primary != null)
                assertEquals(1 + FenecRemote.MAX_HOPS, a.seen.size + b.seen.size)
            }
        }
    }

    @Test
    fun `a server that cannot be reached is left for the next, round robin, until each has failed once`() = runBlocking {
        val down1 = nobody()
        val down2 = nobody()
        Fake { affected }.use { live ->
            val db = Fenec.connect(listOf(down1, down2, live.url))
            db.run("put jobs {a: 1}")
            assertEquals(1, live.seen.size)
            assertEquals(live.url, db.url)
        }
        val e = assertThrows<FenecException> { runBlocking { Fenec.connect(listOf(down1, down2)).run("put jobs {a: 2}") } }
        assertEquals(0, e.status)
        assertEquals(FenecException.Code.IO, e.code)
        // a replica naming a server this call could not reach: that server's failure is the caller's
        replicaOf(down1).use { r ->
            val db = Fenec.connect(listOf(down1, r.url))
            val gone = assertThrows<FenecException> { runBlocking { db.run("put jobs {a: 3}") } }
            assertEquals(0, gone.status)
            assertTrue(gone.message.startsWith(down1), gone.message)
            assertEquals(1, r.seen.size)
            assertEquals(r.url, db.url)
        }
    }

    @Test
    fun `a 503 with Retry-After is the caller's and the next call goes to the next server`() = runBlocking {
        Fake { Answer(503, """{"error":"too few sync replicas"}""", mapOf("Retry-After" to "1")) }.use { busy ->
            Fake { affected }.use { other ->
                val db = Fenec.connect(listOf(busy.url, other.url))
                val e = assertThrows<FenecException> { runBlocking { db.run("put jobs {a: 1}") } }
                assertEquals(503, e.status)
                assertEquals(0, other.seen.size)
                db.run("put jobs {a: 1}")
                assertEquals(1, other.seen.size)
                assertEquals(1, busy.seen.size)
            }
        }
    }

    @Test
    fun `replica reads carry the highest seq seen, and a 504 or a replica away sends them to the primary`() = runBlocking {
        Fake { body ->
            if (body.contains("\"get ")) Answer(200, """[{"id":1,"from":"primary","count":1}]""", mapOf("Fenec-Seq" to "41"))
            else Answer(200, """{"affected":1}""", mapOf("Fenec-Seq" to "41"))
        }.use { p ->
            val behind = java.util.concurrent.atomic.AtomicBoolean()
            Fake {
                if (behind.get()) Answer(504, """{"error":"the replica is behind","seq":40}""")
                else Answer(200, """[{"id":1,"from":"replica","count":1}]""")
            }.use { r ->
                val db = Fenec.connect(listOf(p.url, r.url), readFrom = ReadFrom.REPLICA)
                db.from("jobs").insert(mapOf("a" to 1))
                assertEquals("replica", db.from("jobs").where("id", 1).first()!!["from"])
                assertEquals("41", r.seen.last().headers["fenec-after"])
                assertEquals("replica", db.read("get jobs").single()["from"])
                assertEquals(1L, db.from("jobs").count())
                assertEquals(3, r.seen.size)
                assertEquals("primary", db.runList("get jobs").single()["from"]) // a raw statement: the primary
                assertEquals(3, r.seen.size)
                behind.set(true)
                assertEquals("primary", db.from("jobs").rows().single()["from"])
                assertEquals(4, r.seen.size)
                assertEquals(3, p.seen.size)

                val down = Fenec.connect(listOf(p.url, nobody()), readFrom = ReadFrom.REPLICA)
                assertEquals("primary", down.from("jobs").rows().single()["from"])
                assertEquals(p.url, down.url)

                behind.set(false)
                Fenec.connect(listOf(p.url, r.url), readFrom = ReadFrom.REPLICA).read("get jobs") // no seq seen yet
                assertNull(r.seen.last().headers["fenec-after"])
                assertEquals("primary", Fenec.connect(p.url, readFrom = ReadFrom.REPLICA).read("get jobs").single()["from"])
            }
        }
    }

    @Test
    fun `a worker given a replica alone works the primary, its claim never held on the replica`() = runBlocking(Dispatchers.Default) {
        val claimed = java.util.concurrent.atomic.AtomicBoolean()
        val acked = java.util.concurrent.atomic.AtomicBoolean()
        Fake { body ->
            when {
                body.startsWith("{\"query\":\"set jobs {owner: \$1, run_at: now() + \$2, attempts") && claimed.compareAndSet(false, true) ->
                    Answer(200, """[{"id":7,"payload":"x","attempts":1}]""")
                body.startsWith("{\"query\":\"set jobs {owner") -> Answer(200, "[]")
                body.startsWith("{\"query\":\"del jobs") -> { acked.set(true); affected }
                else -> affected
            }
        }.use { p ->
            replicaOf(p.url).use { r ->
                val seen = ConcurrentLinkedQueue<WorkerEvent>()
                val worker = Worker(Fenec.connect(listOf(r.url)), "jobs", WorkerOptions(wait = 50.milliseconds, onEvent = { seen.add(it) }))
                withTimeout(60_000) {
                    val run = launch { worker.run { } }
                    while (!acked.get()) kotlinx.coroutines.delay(20)
                    worker.stop()
                    run.join()
                }
                assertEquals(1, r.seen.size, "the replica was asked the first claim alone")
                assertEquals("50", p.seen.first().headers["fenec-wait"], "the claim sent on to the primary is held there")
                assertEquals(listOf(p.url), seen.filter { it.type == WorkerEvent.Type.PRIMARY }.map { it.url })
                assertEquals(WorkerEvent.Type.STOPPED, seen.last().type)
            }
        }
    }

    @Test
    fun `while a replica names a primary that is gone the worker retries, and goes on once the replica is promoted`() = runBlocking(Dispatchers.Default) {
        val gone = nobody()
        val promoted = java.util.concurrent.atomic.AtomicBoolean()
        val acked = java.util.concurrent.atomic.AtomicBoolean()
        Fake { body ->
            when {
                !promoted.get() -> Answer(403, "{}", mapOf("Fenec-Primary" to gone))
                body.startsWith("{\"query\":\"set jobs {owner") -> Answer(200, """[{"id":7,"payload":"x","attempts":1}]""")
                else -> { if (body.startsWith("{\"query\":\"del jobs")) acked.set(true); affected }
            }
        }.use { r ->
            val seen = ConcurrentLinkedQueue<WorkerEvent>()
            val worker = Worker(Fenec.connect(listOf(gone, r.url)), "jobs", WorkerOptions(wait = kotlin.time.Duration.ZERO,
                retryMin = 1.milliseconds, retryMax = 20.milliseconds, onEvent = { seen.add(it) }))
            withTimeout(60_000) {
                val run = launch { worker.run { } }
                while (seen.count { it.type == WorkerEvent.Type.RETRY } < 3) kotlinx.coroutines.delay(20)
                promoted.set(true)
                while (!acked.get()) kotlinx.coroutines.delay(20)
                worker.stop()
                run.join()
            }
            assertEquals(r.url, worker.db.url)
        }
    }
}
