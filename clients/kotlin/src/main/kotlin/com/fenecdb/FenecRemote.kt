package com.fenecdb

import kotlin.time.toKotlinDuration
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.isActive
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
import java.net.ConnectException
import java.net.URI
import java.net.http.HttpClient
import java.net.http.HttpConnectTimeoutException
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
internal class Link(
    servers: List<String>, @Volatile var token: String?, val timeout: Duration, val http: HttpClient,
    val readFrom: ReadFrom = ReadFrom.PRIMARY,
) {
    val seq = AtomicLong(0)
    @Volatile var replayed = false

    // the servers, and which is the primary now: guarded by this
    private val servers = servers.map { it.trimEnd('/') }.distinct().toMutableList()
    private var primary = 0
    private var reads = 0 // the round robin of replica reads
    private val watchers = LinkedHashMap<Int, (String) -> Unit>()
    private var watchId = 0

    @Synchronized fun current(): String = servers[primary]

    @Synchronized fun list(): List<String> = servers.toList()

    /** Puts [url] in the list when it is not there; answers it as listed. */
    @Synchronized fun add(url: String): String {
        val u = url.trimEnd('/')
        if (u !in servers) servers.add(u)
        return u
    }

    /** The server after [from], round robin, not in [failed] (true); with every one failed, the next one (false). */
    @Synchronized fun after(from: String, failed: Set<String>): Pair<String, Boolean> {
        val start = maxOf(0, servers.indexOf(from))
        for (k in 1..servers.size) {
            val s = servers[(start + k) % servers.size]
            if (s !in failed) return s to true
        }
        return servers[(start + 1) % servers.size] to false
    }

    /** Makes [url] (one of the list) the primary, and tells the watchers when it changed. */
    fun set(url: String) {
        val told = synchronized(this) {
            val i = servers.indexOf(url)
            if (i < 0 || i == primary) return
            primary = i
            watchers.values.toList()
        }
        told.forEach { it(url) }
    }

    /** The next server, round robin, that is not the primary; null when there is none. */
    @Synchronized fun replica(): String? {
        repeat(servers.size) {
            reads = (reads + 1) % servers.size
            if (reads != primary) return servers[reads]
        }
        return null
    }

    /** Calls [fn] with the new primary's URL each time it changes, until the answered function is called. */
    @Synchronized fun watch(fn: (String) -> Unit): () -> Unit {
        val id = ++watchId
        watchers[id] = fn
        return { synchronized(this) { watchers.remove(id) } }
    }
}

/** Where a client sends its reads: [PRIMARY] (the default) or a [REPLICA] of its servers. */
enum class ReadFrom {
    /** Every request goes to the primary. */
    PRIMARY,

    /**
     * The builder's reads (`rows`, `first`, `count`) and [FenecRemote.read] go to a server of the list that is not
     * the primary, with `Fenec-After` so that they see this client's own writes; to the primary when that server is
     * behind (504) or cannot be reached.
     */
    REPLICA,
}

/**
 * An HTTP client of the FenecDB server (client spec §3.6, §3.8). Safe to share between coroutines. Every call is a
 * `suspend` function on [Dispatchers.IO]; cancelling the coroutine gives the request up and closes its connection,
 * so a held claim takes no job. [withWait] and [withIdempotencyKey] make copies that share connections, [seq] and
 * the servers.
 *
 * Servers ([Fenec.connect] given a list: a primary and its replicas): the client keeps one as its primary ([url]), at
 * first the first, and sends every write, claim and batch there. Within one call the request moves on when
 *  - a server answers 403 with `Fenec-Primary` (a replica: nothing was done there): to that URL (added to the list
 *    when it is not in it), at once, at most [MAX_HOPS] times, then the 403 is the caller's; a 403 naming a server
 *    the call could not reach throws that failure instead (a failover under way: the primary it names is gone);
 *  - a connection cannot be opened (refused, connect timeout: nothing was sent): to the next server of the list,
 *    round robin, until each has failed once in the call (then its error is the caller's). A request that was sent
 *    and whose answer was lost is never re-sent here;
 *  - a server answers 503 with `Retry-After`: the 503 is the caller's, and the next request goes to the next server;
 * and the server the call ended on becomes the primary, for every copy at once. With [ReadFrom.REPLICA] reads go to
 * a server that is not the primary, with `Fenec-After: seq` once the client has seen a seq; a 504 or a replica that
 * cannot be reached sends the read to the primary.
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

        /** The 403s naming a primary that one call follows; the next is the caller's. */
        internal const val MAX_HOPS = 2

        internal fun open(urls: List<String>, token: String?, timeout: Duration, readFrom: ReadFrom = ReadFrom.PRIMARY): FenecRemote {
            require(urls.isNotEmpty()) { "a FenecDB client needs a server's url" }
            for (url in urls) {
                require(url.startsWith("http://") || url.startsWith("https://")) { "a FenecDB url starts with http:// or https:// (got $url)" }
            }
            require(!timeout.isNegative()) { "timeout is a duration from 0 (got $timeout)" }
            val http = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .apply { if (timeout.isFinite() && timeout > Duration.ZERO) connectTimeout(timeout.toJavaDuration()) }
                .build()
            return FenecRemote(Link(urls, token, timeout, http, readFrom), null, null)
        }

        /** Whether [e] is a connection that could not be opened: nothing reached a server. */
        private fun notSent(e: Throwable): Boolean =
            generateSequence(e) { it.cause }.take(4).any { it is ConnectException || it is HttpConnectTimeoutException }

        internal fun body(s: Statement): String =
            json.encodeToString(QueryBody.serializer(), QueryBody(s.text, JsonArray(s.params.map { Values.toJson(it) })))

        internal fun parseError(status: Int, bytes: ByteArray, primary: String? = null): FenecException {
            val text = bytes.toString(Charsets.UTF_8)
            val body = try { json.decodeFromString(ErrorBody.serializer(), text) } catch (e: Exception) { null }
            val message = body?.error?.takeIf { it.isNotEmpty() } ?: text.ifEmpty { "HTTP $status" }
            return FenecException(FenecException.codeFor(status), message, status, body?.at, body?.completed, primary)
        }
    }

    /** The server this client sends writes and claims to now: its primary (see the class's comment on servers). */
    val url: String get() = link.current()

    /** The client's list of servers: the ones it was given, then any primary a replica named. */
    val servers: List<String> get() = link.list()

    /** Calls [fn] with the new primary's URL each time it changes, until the answered function is called. */
    internal fun watchPrimary(fn: (String) -> Unit): () -> Unit = link.watch(fn)

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

    /** Sends one statement that cannot write (a `get`) where reads go ([ReadFrom]), and answers its rows. */
    suspend fun read(text: String, params: List<Any?> = emptyList()): Rows =
        rowsOf(Statement(text, params), write = false)

    /** Sends one statement that answers rows (a read, or a write with `returning`), to the primary. */
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

    /** Rows of [s]: a write's (to the primary, under this copy's key), or a read's (where reads go). */
    internal suspend fun rowsOf(s: Statement, write: Boolean): Rows =
        answerOf(s, if (write) idempotencyKey else null, read = !write).rows
            ?: throw FenecException(FenecException.Code.IO, "`${s.text}` answered no rows")

    internal suspend fun affectedOf(s: Statement): Long {
        val a = answerOf(s, idempotencyKey)
        return a.affected ?: a.rows?.size?.toLong() ?: 0L
    }

    private suspend fun answerOf(s: Statement, key: String?, read: Boolean = false): Answer {
        val reply = if (read) postRead(body(s)) else post("/query", body(s), "application/json", key)
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

    /**
     * Posts to the primary, following a replica's 403 and moving on from a server it cannot reach, and makes the
     * server it ended on the primary once, at the end of the call: the primary event tells a change, not each hop.
     */
    private suspend fun post(path: String, body: String, contentType: String, key: String?): Reply {
        var url = link.current()
        val failed = HashMap<String, FenecException>() // the servers this call could not reach, and how
        var hops = 0
        while (true) {
            try {
                return postTo(url, path, body, contentType, key, null).also { link.set(url) }
            } catch (e: FenecException) {
                val primary = e.primary
                when {
                    e.status == 403 && primary != null -> {
                        val named = link.add(primary)
                        failed[named]?.let { unreached ->
                            // the primary it names could not be reached in this call (a failover under way): that
                            // failure is the caller's, retried as any connection that could not be opened
                            link.set(url)
                            throw unreached
                        }
                        url = named
                        if (++hops <= MAX_HOPS) continue
                    }
                    e.status == 0 && e.cause != null && notSent(e.cause!!) && currentCoroutineContext().isActive -> {
                        failed[url] = e
                        val (next, untried) = link.after(url, failed.keys)
                        url = next
                        if (untried) continue
                    }
                    e.status == 503 && e.retryAfter -> url = link.after(url, emptySet()).first // the next attempt tries another
                }
                link.set(url)
                throw e
            }
        }
    }

    /** Posts a read: to a replica with `Fenec-After` under [ReadFrom.REPLICA], else (or when it is behind or away) to the primary. */
    private suspend fun postRead(body: String): Reply {
        val replica = if (link.readFrom == ReadFrom.REPLICA) link.replica() else null
        if (replica != null) {
            try {
                return postTo(replica, "/query", body, "application/json", null, link.seq.get().takeIf { it > 0 })
            } catch (e: FenecException) {
                if (!(e.status == 504 || e.status == 0 && e.cause != null && notSent(e.cause!!))) throw e
            }
        }
        return post("/query", body, "application/json", null)
    }

    private suspend fun postTo(url: String, path: String, body: String, contentType: String, key: String?, after: Long?): Reply = withContext(Dispatchers.IO) {
        val b = HttpRequest.newBuilder(URI.create(url + path))
            .POST(HttpRequest.BodyPublishers.ofByteArray(body.toByteArray(Charsets.UTF_8))) // whole, with a Content-Length
            .header("Content-Type", contentType)
        link.token?.let { b.header("Authorization", "Bearer $it") }
        key?.let { b.header("Idempotency-Key", it) }
        wait?.let { b.header("Fenec-Wait", it.inWholeMilliseconds.toString()) }
        after?.let { b.header("Fenec-After", it.toString()) }
        // a held claim's timeout is the client's plus the wait it sent, so it is never cut short (§3.8 rule 3)
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
            throw FenecException(FenecException.Code.IO, "$url$path: ${e.message ?: e::class.simpleName}", 0, cause = e)
        }
        val status = response.statusCode()
        if (status >= 400) {
            val primary = if (status == 403) response.headers().firstValue("Fenec-Primary").orElse(null)?.trim()?.trimEnd('/')?.ifEmpty { null } else null
            throw parseError(status, response.body(), primary).also {
                it.retryAfter = response.headers().firstValue("Retry-After").isPresent
            }
        }
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
