package com.fenecdb

import kotlin.time.toKotlinDuration
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.suspendCancellableCoroutine
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import kotlinx.serialization.Serializable
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.JsonArray
import kotlinx.serialization.json.JsonElement
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.JsonPrimitive
import kotlinx.serialization.json.intOrNull
import kotlinx.serialization.json.longOrNull
import java.io.IOException
import java.net.URI
import java.net.http.HttpClient
import java.net.http.HttpRequest
import java.net.http.HttpResponse
import java.util.concurrent.CompletionException
import java.util.concurrent.atomic.AtomicLong
import kotlin.coroutines.resume
import kotlin.coroutines.resumeWithException
import kotlin.time.Duration
import kotlin.time.toJavaDuration

/** The body of `POST /query`, and one line of `POST /batch`. */
@Serializable
internal data class QueryBody(val query: String, val params: JsonArray)

/** What a refusal carries: `{"error": ..., "at": ..., "completed": ...}`. */
@Serializable
internal data class ErrorBody(val error: String = "", val at: Int? = null, val completed: Int? = null)

/** The connection state every copy made by withWait / withIdempotencyKey shares. */
internal class Link(val base: String, @Volatile var token: String?, val timeout: Duration, val http: HttpClient) {
    val seq = AtomicLong(0)
    @Volatile var replayed = false
}

/**
 * An HTTP client of the FenecDB server (client spec §3.6, §3.8). Safe to share between coroutines. Every call is a
 * `suspend` function on [Dispatchers.IO]; cancelling the coroutine gives the request up and closes its connection,
 * so a held claim takes no job. [withWait] and [withIdempotencyKey] make copies that share connections and [seq].
 */
class FenecRemote internal constructor(
    private val link: Link,
    /** The `Fenec-Wait` this copy's requests carry, or null. */
    val wait: Duration?,
    /** The `Idempotency-Key` this copy's writes carry, or null. */
    val idempotencyKey: String?,
    /** This copy's own request timeout (the worker's); null: the one [Fenec.connect] was given. */
    private val timeout: Duration? = null,
) : AutoCloseable {

    companion object {
        private val json = Json { encodeDefaults = true; ignoreUnknownKeys = true }

        internal fun open(url: String, token: String?, timeout: Duration): FenecRemote {
            require(url.startsWith("http://") || url.startsWith("https://")) { "a FenecDB url starts with http:// or https:// (got $url)" }
            require(!timeout.isNegative()) { "timeout is a duration from 0 (got $timeout)" }
            val http = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .apply { if (timeout.isFinite() && timeout > Duration.ZERO) connectTimeout(timeout.toJavaDuration()) }
                .build()
            return FenecRemote(Link(url.trimEnd('/'), token, timeout, http), null, null)
        }

        internal fun body(s: Statement): String =
            json.encodeToString(QueryBody.serializer(), QueryBody(s.text, JsonArray(s.params.map { Values.toJson(it) })))

        internal fun parseError(status: Int, bytes: ByteArray): FenecException {
            val text = bytes.toString(Charsets.UTF_8)
            val body = try { json.decodeFromString(ErrorBody.serializer(), text) } catch (e: Exception) { null }
            val message = body?.error?.takeIf { it.isNotEmpty() } ?: text.ifEmpty { "HTTP $status" }
            return FenecException(FenecException.codeFor(status), message, status, body?.at, body?.completed)
        }
    }

    /** The highest `Fenec-Seq` this client (and its copies) has seen. */
    val seq: Long get() = link.seq.get()

    /** Whether the last write this client (and its copies) made was answered from an Idempotency-Key's store. */
    val replayed: Boolean get() = link.replayed

    /** Swaps the bearer token for the requests sent from now on (null: none). */
    fun setToken(token: String?) { link.token = token }

    /** A query of [collection] that runs through this client. */
    fun from(collection: String): Query = Query.bound(collection, this)

    /** A copy whose requests carry `Fenec-Wait`: a claim that would take nothing is held at the server. */
    fun withWait(wait: Duration): FenecRemote {
        require(!wait.isNegative() && wait.isFinite()) { "wait is milliseconds, a whole number from 0 (got $wait)" }
        return FenecRemote(link, wait, idempotencyKey, timeout)
    }

    /** [withWait] for Java callers, with a `java.time.Duration`. */
    fun withWait(wait: java.time.Duration): FenecRemote = withWait(wait.toKotlinDuration())

    /** A copy whose writes carry this `Idempotency-Key`. */
    fun withIdempotencyKey(key: String): FenecRemote = FenecRemote(link, wait, checkKey(key), timeout)

    /** A copy whose requests time out after [timeout] (a held one after its wait on top): the worker's own. */
    internal fun withRequestTimeout(timeout: Duration): FenecRemote = FenecRemote(link, wait, idempotencyKey, timeout)

    private fun checkKey(key: String?): String? {
        if (key != null) require(key.isNotEmpty()) { "an idempotency key is a text, not empty" }
        return key
    }

    /** Sends one statement; the answer is rows, an affected count or a message. */
    suspend fun run(text: String, params: List<Any?> = emptyList(), idempotencyKey: String? = null): Answer =
        answerOf(Statement(text, params), checkKey(idempotencyKey) ?: this.idempotencyKey)

    suspend fun run(statement: Statement, idempotencyKey: String? = null): Answer =
        answerOf(statement, checkKey(idempotencyKey) ?: this.idempotencyKey)

    /** Sends one statement that answers rows (a read, or a write with `returning`). */
    suspend fun runList(text: String, params: List<Any?> = emptyList(), idempotencyKey: String? = null): Rows =
        run(text, params, idempotencyKey).rows ?: throw IllegalStateException("`$text` answered no rows")

    /** Runs the statements as one all-or-nothing block (`POST /batch`). */
    suspend fun batch(statements: List<Statement>, idempotencyKey: String? = null): BatchAnswer {
        require(statements.isNotEmpty()) { "a batch holds at least one statement" }
        val body = statements.joinToString("\n") { body(it) }
        val reply = post("/batch", body, "application/x-ndjson", checkKey(idempotencyKey) ?: this.idempotencyKey)
        val root = reply.json as? JsonObject ?: throw FenecException(FenecException.Code.IO, "a batch answered ${reply.json}", reply.status)
        val results = (root["results"] as? JsonArray ?: JsonArray(emptyList())).map { item ->
            val o = item as JsonObject
            Answer(
                rows = (o["rows"] as? JsonArray)?.let { rowsFrom(it) },
                affected = (o["affected"] as? JsonPrimitive)?.longOrNull,
                message = (o["message"] as? JsonPrimitive)?.content,
                seq = reply.seq, replayed = reply.replayed,
            )
        }
        return BatchAnswer(results, reply.seq, reply.replayed)
    }

    fun runBlocking(text: String, params: List<Any?> = emptyList(), idempotencyKey: String? = null): Answer =
        runBlocking { run(text, params, idempotencyKey) }

    fun batchBlocking(statements: List<Statement>, idempotencyKey: String? = null): BatchAnswer =
        runBlocking { batch(statements, idempotencyKey) }

    /** Nothing to release that the JVM's HttpClient does not release itself; here for `use { }`. */
    override fun close() {}

    // ---- plumbing ----

    internal suspend fun rowsOf(s: Statement, write: Boolean): Rows =
        answerOf(s, if (write) idempotencyKey else null).rows
            ?: throw FenecException(FenecException.Code.IO, "`${s.text}` answered no rows")

    internal suspend fun affectedOf(s: Statement): Long {
        val a = answerOf(s, idempotencyKey)
        return a.affected ?: a.rows?.size?.toLong() ?: 0L
    }

    private suspend fun answerOf(s: Statement, key: String?): Answer {
        val reply = post("/query", body(s), "application/json", key)
        return when (val j = reply.json) {
            is JsonArray -> Answer(rows = rowsFrom(j), seq = reply.seq, replayed = reply.replayed)
            is JsonObject -> Answer(
                affected = (j["affected"] as? JsonPrimitive)?.longOrNull,
                message = (j["message"] as? JsonPrimitive)?.content,
                seq = reply.seq, replayed = reply.replayed,
            )
            else -> throw FenecException(FenecException.Code.IO, "the server answered $j", reply.status)
        }
    }

    private fun rowsFrom(a: JsonArray): Rows = Rows(a.map { r ->
        @Suppress("UNCHECKED_CAST")
        Row((Values.fromJson(r) as? Map<String, Any?>) ?: mapOf("value" to Values.fromJson(r)))
    })

    private class Reply(val status: Int, val json: JsonElement, val seq: Long?, val replayed: Boolean)

    private suspend fun post(path: String, body: String, contentType: String, key: String?): Reply = withContext(Dispatchers.IO) {
        val b = HttpRequest.newBuilder(URI.create(link.base + path))
            .POST(HttpRequest.BodyPublishers.ofByteArray(body.toByteArray(Charsets.UTF_8))) // whole, with a Content-Length
            .header("Content-Type", contentType)
        link.token?.let { b.header("Authorization", "Bearer $it") }
        key?.let { b.header("Idempotency-Key", it) }
        wait?.let { b.header("Fenec-Wait", it.inWholeMilliseconds.toString()) }
        // a held request's timeout is the client's plus the wait it sent: a held claim is never cut short (§3.8 rule 3)
        val total = (timeout ?: link.timeout) + (wait ?: Duration.ZERO)
        if (total.isFinite() && total > Duration.ZERO) b.timeout(total.toJavaDuration())
        val response = try {
            // a cancelled coroutine cancels the exchange and the JDK client closes its connection: the server sees
            // the client gone and hands the job the claim would have taken to the next waiting claim (§3.8 rule 4)
            val future = link.http.sendAsync(b.build(), HttpResponse.BodyHandlers.ofByteArray())
            suspendCancellableCoroutine<HttpResponse<ByteArray>> { cont ->
                future.whenComplete { r, e ->
                    if (e == null) cont.resume(r)
                    else cont.resumeWithException((e as? CompletionException)?.cause ?: e)
                }
                // cancel(true) is what makes the JDK client abort the exchange and close its connection
                cont.invokeOnCancellation { future.cancel(true) }
            }
        } catch (e: IOException) {
            throw FenecException(FenecException.Code.IO, "${link.base}$path: ${e.message ?: e::class.simpleName}", 0, cause = e)
        }
        val status = response.statusCode()
        if (status >= 400) throw parseError(status, response.body())
        val seq = response.headers().firstValue("Fenec-Seq").orElse(null)?.trim()?.toLongOrNull()
        val replayed = response.headers().firstValue("Idempotent-Replayed").orElse("").trim().equals("true", ignoreCase = true)
        if (seq != null) link.seq.accumulateAndGet(seq) { a, b2 -> maxOf(a, b2) }
        if (key != null || seq != null) link.replayed = replayed
        val text = response.body().toString(Charsets.UTF_8)
        val parsed = try { Json.parseToJsonElement(text) } catch (e: Exception) {
            throw FenecException(FenecException.Code.IO, "the server answered what is not JSON: ${text.take(200)}", status, cause = e)
        }
        Reply(status, parsed, seq, replayed)
    }
}
