package com.fenecdb

import com.sun.net.httpserver.HttpServer
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.AfterEach
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.net.InetSocketAddress
import java.util.concurrent.CopyOnWriteArrayList
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/** The HTTP client against a scripted local listener: no FenecDB server needed. */
class ClientTest {
    private class Seen(val path: String, val headers: Map<String, String>, val body: String)

    private val seen = CopyOnWriteArrayList<Seen>()
    @Volatile private var status = 200
    @Volatile private var answer = "[]"
    @Volatile private var delayMs = 0L
    @Volatile private var extra: Map<String, String> = mapOf("Fenec-Seq" to "7")

    private val server = HttpServer.create(InetSocketAddress("127.0.0.1", 0), 0).apply {
        createContext("/") { ex ->
            seen.add(Seen(ex.requestURI.path, ex.requestHeaders.entries.associate { (k, v) -> k.lowercase() to v.joinToString(",") },
                ex.requestBody.readBytes().toString(Charsets.UTF_8)))
            if (delayMs > 0) Thread.sleep(delayMs)
            val bytes = answer.toByteArray()
            extra.forEach { (k, v) -> ex.responseHeaders.add(k, v) }
            try {
                ex.sendResponseHeaders(status, bytes.size.toLong())
                ex.responseBody.use { it.write(bytes) }
            } catch (e: java.io.IOException) { /* the client gave up */ }
        }
        executor = java.util.concurrent.Executors.newCachedThreadPool()
        start()
    }
    private val url = "http://127.0.0.1:${server.address.port}"

    @AfterEach
    fun stop() = server.stop(0)

    @Test
    fun `a query is one POST with its text, params, token and a whole body`() = runBlocking {
        answer = """[{"id":1,"payload":{"to":"ada"},"run_at":"2026-09-19T12:34:56.789Z","n":2.5}]"""
        val db = Fenec.connect(url, "tok")
        val rows = db.from("jobs").where("id", 1).rows()
        assertEquals(1, seen.size)
        val s = seen[0]
        assertEquals("/query", s.path)
        assertEquals("""{"query":"get jobs where id = ${'$'}1","params":[1]}""", s.body)
        assertEquals("Bearer tok", s.headers["authorization"])
        assertEquals("application/json", s.headers["content-type"])
        assertEquals(s.body.toByteArray().size.toString(), s.headers["content-length"])
        assertNull(s.headers["transfer-encoding"])
        assertNull(s.headers["fenec-wait"])
        val row = rows.single()
        assertEquals(1L, row.long("id"))
        assertEquals("ada", row.map("payload")!!["to"])
        assertEquals(java.time.Instant.parse("2026-09-19T12:34:56.789Z"), row.instant("run_at"))
        assertEquals(2.5, row.double("n"))
        db.setToken(null)
        db.from("jobs").first()
        assertNull(seen[1].headers["authorization"])
        assertTrue(seen[1].body.contains("limit 1"))
    }

    @Test
    fun `withWait sends Fenec-Wait and extends the timeout by the wait`() = runBlocking {
        answer = """{"affected":0}"""
        delayMs = 700
        val db = Fenec.connect(url, timeout = 400.milliseconds)
        // the plain client gives up after its own timeout
        val e = assertThrows<FenecException> { runBlocking { db.from("jobs").where("id", 1).delete(require = 1) } }
        assertEquals(FenecException.Code.IO, e.code)
        // the held copy waits for its timeout plus the wait
        val n = db.withWait(1.seconds).from("jobs").where("id", 1).delete(require = 1)
        assertEquals(0L, n)
        assertEquals("1000", seen.last().headers["fenec-wait"])
        assertThrows<IllegalArgumentException> { db.withWait((-1).seconds) }
        Unit
    }

    @Test
    fun `a key goes on writes, seq and replayed are read from the answer`() = runBlocking {
        answer = """[{"id":3}]"""
        extra = mapOf("Fenec-Seq" to "42", "Idempotent-Replayed" to "true")
        val db = Fenec.connect(url)
        val keyed = db.withIdempotencyKey("claim-1")
        val rows = keyed.from("jobs").where("id", 3).updateReturning(mapOf("owner" to "w1"))
        assertEquals(listOf(mapOf("id" to 3L)), rows)
        assertEquals("claim-1", seen.last().headers["idempotency-key"])
        assertEquals(42L, db.seq) // copies share seq
        assertTrue(db.replayed)
        val e = assertThrows<IllegalArgumentException> { db.withIdempotencyKey("") }
        assertEquals("an idempotency key is a text, not empty", e.message)
        assertThrows<IllegalArgumentException> { runBlocking { db.runList("get jobs", emptyList(), "") } }
        Unit
    }

    @Test
    fun `statuses map to codes, with status, at and completed kept`() = runBlocking {
        val db = Fenec.connect(url)
        val cases = mapOf(400 to FenecException.Code.QUERY, 401 to FenecException.Code.DENIED, 403 to FenecException.Code.DENIED,
            404 to FenecException.Code.NOT_FOUND, 409 to FenecException.Code.DUPLICATE, 412 to FenecException.Code.UNMET,
            422 to FenecException.Code.IO, 503 to FenecException.Code.IO, 500 to FenecException.Code.IO)
        for ((s, code) in cases) {
            status = s
            answer = """{"error":"refused $s"}"""
            val e = assertThrows<FenecException> { runBlocking { db.run("get jobs") } }
            assertEquals(code, e.code, "status $s")
            assertEquals(s, e.status)
            assertEquals("refused $s", e.message)
            assertNull(e.at)
        }
        status = 412
        answer = """{"error":"unmet: `del jobs` wrote 0 rows, and requires 1","completed":0,"at":1}"""
        val e = assertThrows<FenecException> {
            runBlocking { db.batch(listOf(Statement("put jobs {a: 1}"), Query.from("jobs").where("id", 9).toDelete(require = 1))) }
        }
        assertEquals(FenecException.Code.UNMET, e.code)
        assertEquals(1, e.at)
        assertEquals(0, e.completed)
        assertEquals("/batch", seen.last().path)
        assertEquals("application/x-ndjson", seen.last().headers["content-type"])
        assertEquals(2, seen.last().body.lines().size)
    }

    @Test
    fun `a batch answers one result a statement`() = runBlocking {
        answer = """{"ok":3,"results":[{"affected":1},{"rows":[{"id":7,"attempts":2}]},{"message":"created"}]}"""
        val a = Fenec.connect(url).batch(listOf(Statement("put jobs {a: \$1}", 1), Statement("get jobs"), Statement("create collection x (a int)")))
        assertEquals(1L, a.results[0].affected)
        assertEquals(7L, a.results[1].rows!!.single().long("id"))
        assertEquals("created", a.results[2].message)
        assertEquals(7L, a.seq)
        assertFalse(a.replayed)
    }

    @Test
    fun `insert of an empty list sends nothing, a refused chain sends nothing`() = runBlocking {
        val db = Fenec.connect(url)
        assertEquals(0L, db.from("jobs").insert(emptyList<Map<String, Any?>>()))
        assertThrows<FenecException> { runBlocking { db.from("jobs").update(mapOf("owner" to null)) } }
        assertEquals(0, seen.size)
        assertThrows<IllegalStateException> { runBlocking { Query.from("jobs").rows() } }
        Unit
    }

    @Test
    fun `a connection that fails is an IO error with status 0`() = runBlocking {
        server.stop(0)
        val e = assertThrows<FenecException> { runBlocking { Fenec.connect(url, timeout = 2.seconds).run("get jobs") } }
        assertEquals(FenecException.Code.IO, e.code)
        assertEquals(0, e.status)
    }
}
