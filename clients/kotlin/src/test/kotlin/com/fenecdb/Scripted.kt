package com.fenecdb

import com.sun.net.httpserver.HttpServer
import java.net.InetSocketAddress
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.CountDownLatch
import java.util.concurrent.Executors

/**
 * A listener on 127.0.0.1:0 that answers each `POST /query` as [answer] says from its `Idempotency-Key` and body:
 * an answer, a connection cut with none, or no answer at all until [close] (a frozen server). No FenecDB needed.
 */
class Scripted(private val answer: (key: String?, body: String) -> Reply) : AutoCloseable {
    sealed class Reply {
        class Answer(val status: Int, val json: String, val headers: Map<String, String> = emptyMap()) : Reply()
        object Cut : Reply()
        object Freeze : Reply()
    }

    class Seen(val key: String?, val body: String)

    val seen = CopyOnWriteArrayList<Seen>()
    private val thaw = CountDownLatch(1)
    private val server = HttpServer.create(InetSocketAddress("127.0.0.1", 0), 0).apply {
        createContext("/") { ex ->
            val key = ex.requestHeaders.getFirst("Idempotency-Key")
            val body = ex.requestBody.readBytes().toString(Charsets.UTF_8)
            seen.add(Seen(key, body))
            when (val r = answer(key, body)) {
                is Reply.Cut -> ex.close()
                is Reply.Freeze -> { thaw.await(); ex.close() }
                is Reply.Answer -> {
                    val bytes = r.json.toByteArray()
                    r.headers.forEach { (k, v) -> ex.responseHeaders.add(k, v) }
                    ex.sendResponseHeaders(r.status, bytes.size.toLong())
                    ex.responseBody.use { it.write(bytes) }
                }
            }
        }
        executor = Executors.newCachedThreadPool { r -> Thread(r).apply { isDaemon = true } }
        start()
    }

    val url: String get() = "http://127.0.0.1:${server.address.port}"

    /** Stops listening: every connection after this is refused. */
    fun down() = server.stop(0)

    override fun close() {
        thaw.countDown()
        server.stop(0)
    }

    companion object {
        fun ok(json: String) = Reply.Answer(200, json)
        val affected = ok("""{"affected":1}""")
    }
}
