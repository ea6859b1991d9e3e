package com.fenecdb.conformance

import com.fenecdb.Fenec
import com.fenecdb.FenecException
import com.fenecdb.ReadFrom
import com.fenecdb.Worker
import com.fenecdb.WorkerEvent
import com.fenecdb.WorkerOptions
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeoutOrNull
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.JsonArray
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.jsonArray
import kotlinx.serialization.json.jsonObject
import kotlinx.serialization.json.jsonPrimitive
import kotlinx.serialization.json.long
import java.io.File
import java.net.URI
import java.net.http.HttpClient
import java.net.http.HttpRequest
import java.net.http.HttpResponse
import java.security.SecureRandom
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicLong
import kotlin.time.Duration.Companion.seconds

/**
 * The shared suite's replica cases (`FENEC_REPLICA_SCENARIOS`, conformance/replica-scenarios.json), played against the
 * primary at `FENEC_PRIMARY_URL` and its replica at `FENEC_REPLICA_URL` that conformance/run.py starts. Each case is
 * played by its name; a case this runner has no player for fails, so that a case added to the file is never passed
 * by being skipped.
 */
class Replicas(primary: String, replica: String, private val out: (String) -> Unit = ::println) {
    private val primary = primary.trimEnd('/')
    private val replica = replica.trimEnd('/')
    var passed = 0; private set
    var failed = 0; private set

    private class Failed(message: String) : Exception(message)

    private val http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build()

    val players: Map<String, suspend (String) -> Unit> = mapOf(
        "replica: writes given only a replica reach the primary" to ::writesThroughReplica,
        "replica: a worker given only a replica works the primary" to ::workerThroughReplica,
        "replica: reads where told read their own writes" to ::readsOnReplica,
    )

    fun runFile(file: File, only: String?) {
        val cases = try {
            val root = Json.parseToJsonElement(file.readText())
            val list = (root as? JsonObject)?.get("scenarios")?.jsonArray ?: root as JsonArray
            list.map { it.jsonObject }.also { require(it.isNotEmpty()) { "no case" } }
        } catch (e: Exception) {
            failed++
            out("FAIL $file: a replica scenarios file / ${e.message ?: e}")
            return
        }
        var ok = 0
        var bad = 0
        for (case in cases) {
            val name = case["name"]?.jsonPrimitive?.content ?: ""
            if (only != null && !name.contains(only)) continue
            val q = case["collection"]?.jsonPrimitive?.content ?: "replica_kotlin_${hex()}"
            val timeout = case["timeout_ms"]?.jsonPrimitive?.long ?: 60_000
            val problem = players[name]?.let { play ->
                try {
                    waitingFor = null
                    runBlocking(Dispatchers.Default) {
                        withTimeoutOrNull(timeout) { play(q); "" } ?: "done within $timeout ms / not done${waitingFor?.let { ": $it" } ?: ""}"
                    }
                } catch (e: Failed) {
                    e.message
                } catch (e: Exception) {
                    "${e::class.simpleName}: ${e.message}"
                }
            } ?: "the Kotlin runner has no player for this case"
            if (problem.isNullOrEmpty()) { ok++; out("ok $name") } else { bad++; out("FAIL $name: $problem") }
        }
        passed += ok
        failed += bad
        out("replica scenarios $file: $ok ok, $bad FAIL")
    }

    private fun hex(): String = ByteArray(4).also { SecureRandom().nextBytes(it) }.joinToString("") { "%02x".format(it) }

    private fun check(ok: Boolean, what: () -> String) { if (!ok) throw Failed(what()) }

    /** Drops [q] (a 404 is fine) and creates it as a queue, through [db]. */
    private suspend fun freshQueue(db: com.fenecdb.FenecRemote, q: String) {
        try { db.run("drop collection $q") } catch (e: FenecException) { if (e.code != FenecException.Code.NOT_FOUND) throw e }
        db.run(Scenarios.DEFAULT_SCHEMA.replace("{q}", q))
    }

    /** [q]'s row count at one server alone (with `Fenec-After` when [after] is given), outside the client. */
    private fun rawCount(url: String, q: String, after: Long? = null): Long {
        val b = HttpRequest.newBuilder(URI.create("$url/query"))
            .POST(HttpRequest.BodyPublishers.ofString("""{"query":"get $q count","params":[]}"""))
            .header("Content-Type", "application/json")
        after?.let { b.header("Fenec-After", it.toString()) }
        val r = http.send(b.build(), HttpResponse.BodyHandlers.ofString())
        check(r.statusCode() == 200) { "a count at $url: 200 / ${r.statusCode()} ${r.body().take(200)}" }
        return Json.parseToJsonElement(r.body()).jsonArray.single().jsonObject["count"]!!.jsonPrimitive.long
    }

    /** The held-request gauge (`fenec_held_requests`) of the server at [url]. */
    private fun heldAt(url: String): Double {
        val r = http.send(HttpRequest.newBuilder(URI.create("$url/_metrics")).GET().build(), HttpResponse.BodyHandlers.ofString())
        val m = Regex("""(?m)^fenec_held_requests(?:\{[^}]*\})? (\S+)$""").find(r.body())
            ?: throw Failed("$url/_metrics has fenec_held_requests / it has not")
        return m.groupValues[1].toDouble()
    }

    /** The last problem [until] saw: what a case that ran out of time was waiting for. */
    @Volatile private var waitingFor: String? = null

    /** Polls [cond] every 20 ms until it answers null; the case's timeout ends the wait. */
    private suspend fun until(cond: () -> String?) {
        while (true) {
            waitingFor = cond() ?: return
            delay(20)
        }
    }

    private suspend fun writesThroughReplica(q: String) {
        val db = Fenec.connect(listOf(replica))
        freshQueue(db, q)
        try {
            val producer = Worker(db, q)
            repeat(5) { producer.enqueue(mapOf("n" to it)) }
            check(db.primary == primary) { "primary: $primary / ${db.primary}" }
            rawCount(primary, q).let { check(it == 5L) { "rows on the primary: 5 / $it" } }
            check(db.seq > 0) { "the last write's Fenec-Seq: a number / ${db.seq}" }
            rawCount(replica, q, db.seq).let { check(it == 5L) { "rows on the replica after seq ${db.seq}: 5 / $it" } }
        } finally {
            Fenec.connect(primary).run("drop collection $q")
        }
    }

    private suspend fun workerThroughReplica(q: String) {
        val pdb = Fenec.connect(primary)
        freshQueue(pdb, q)
        try {
            val producer = Worker(pdb, q)
            repeat(5) { producer.enqueue(mapOf("n" to it)) }
            // as after the first case: the replica holds the queue (a held claim on a collection a replica does not
            // hold yet is answered 404 there, not 403)
            rawCount(replica, q, pdb.seq).let { check(it == 5L) { "rows on the replica: 5 / $it" } }
            val seen = ConcurrentLinkedQueue<WorkerEvent>()
            val processed = AtomicLong()
            val worker = Worker(Fenec.connect(listOf(replica)), q, WorkerOptions(concurrency = 1, wait = 30.seconds, onEvent = { seen.add(it) }))
            var failure: Throwable? = null
            val run = CoroutineScope(Dispatchers.Default).launch {
                try { worker.run { processed.incrementAndGet() } } catch (e: Throwable) { failure = e }
            }
            try {
                fun replicaHeld() = heldAt(replica).let { if (it != 0.0) "held claims on the replica: 0 / $it" else null }
                fun ran(problem: String?) = problem?.let { p -> failure?.let { "$p (run threw $it)" } ?: p }
                until { ran(rawCount(primary, q).let { if (processed.get() < 5 || it != 0L) "5 jobs processed and acked / ${processed.get()} processed, $it rows left" else null }) }
                until { replicaHeld() }
                until { heldAt(primary).let { if (it < 1) "the worker's claim held on the primary / $it" else null } }
                until { replicaHeld() }
                producer.enqueue(mapOf("n" to 5))
                until { ran(if (processed.get() < 6) "the job put while held processed / ${processed.get()} of 6" else null) }
                until { replicaHeld() }
            } finally {
                worker.stop()
                run.join()
            }
            failure?.let { throw Failed("run: $it") }
            check(seen.any { it.type == WorkerEvent.Type.PRIMARY && it.url == primary }) { "a PRIMARY event with $primary / none" }
        } finally {
            pdb.run("drop collection $q")
        }
    }

    private suspend fun readsOnReplica(q: String) {
        val db = Fenec.connect(listOf(primary, replica), readFrom = ReadFrom.REPLICA)
        freshQueue(db, q)
        try {
            for (i in 1L..20L) {
                db.from(q).insert(mapOf("id" to i, "payload" to mapOf("round" to i)))
                val row = db.from(q).where("id", i).first()
                check((row?.get("payload") as? Map<*, *>)?.get("round") == i) { "round $i: the row just written / $row" }
            }
        } finally {
            db.run("drop collection $q")
        }
    }
}
