package com.fenecdb.conformance

import com.sun.net.httpserver.HttpServer
import java.net.InetSocketAddress
import java.util.concurrent.CopyOnWriteArrayList

/**
 * A local HTTP listener that records every request and gives the canned answers of conformance.md A.4, so an
 * endpoint is replayed through the client's real transport and its headers can be checked (A.6).
 */
class Capture : AutoCloseable {
    class Sent(val path: String, val headers: Map<String, String>, val body: String)

    val sent = CopyOnWriteArrayList<Sent>()
    private val server: HttpServer = HttpServer.create(InetSocketAddress("127.0.0.1", 0), 0)
    val url: String

    init {
        server.createContext("/") { ex ->
            val body = ex.requestBody.readBytes().toString(Charsets.UTF_8)
            val headers = ex.requestHeaders.entries.associate { (k, v) -> k.lowercase() to v.joinToString(",") }
            sent.add(Sent(ex.requestURI.path, headers, body))
            val text = Regex("\"query\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"").find(body)?.groupValues?.get(1) ?: ""
            val answer = canned(text)
            val bytes = answer.toByteArray()
            ex.responseHeaders.add("Content-Type", "application/json; charset=utf-8")
            if (!text.startsWith("get ")) ex.responseHeaders.add("Fenec-Seq", "1")
            ex.sendResponseHeaders(200, bytes.size.toLong())
            ex.responseBody.use { it.write(bytes) }
        }
        server.start()
        url = "http://127.0.0.1:${server.address.port}"
    }

    companion object {
        fun canned(text: String): String = when {
            text.startsWith("put ") -> """{"affected":0}"""
            (text.startsWith("set ") || text.startsWith("del ")) && Regex(" returning ").containsMatchIn(text) -> "[]"
            text.startsWith("set ") || text.startsWith("del ") -> """{"affected":0}"""
            text.endsWith(" count") -> """[{"count":0}]"""
            else -> "[]"
        }
    }

    override fun close() = server.stop(0)
}
