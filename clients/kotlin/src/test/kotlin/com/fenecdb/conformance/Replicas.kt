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
import kotlin.time.Duration.Companion.milliseconds
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

    /** One case of the file, with what the file's cases share; a number it does not give is the player's own. */
    class Case(val json: JsonObject, val schema: String, val gauge: String) {
        fun int(key: String, default: Int): Int = json[key]?.jsonPrimitive?.content?.toIntOrNull() ?: default
        fun worker(key: String): Long? = json["worker"]?.jsonObject?.get(key)?.jsonPrimitive?.long
    }

    private lateinit var case: Case

    val players: Map<String, suspend (String) -> Unit> = mapOf(
        "replica: writes given only a replica reach the primary" to ::writesThroughReplica,
        "replica: a worker given only a replica works the primary" to ::workerThroughReplica,
        "replica: reads where told read their own writes" to ::readsOnReplica,
    )

    fun runFile(file: File, only: String?) {
        lateinit var root: JsonObject
        val cases = try {
            root = Json.parseToJsonElement(file.readText()).jsonObject
            root["cases"]!!.jsonArray.map { it.jsonObject }.also { require(it.isNotEmpty()) { "no case" } }
        } catch (e: Exception) {
            failed++
            out("FAIL $file: a replica scenarios file / ${e.message ?: e}")
            return
        }
        val schema = root["schema"]?.jsonPrimitive?.content ?: Scenarios.DEFAULT_SCHEMA
        val gauge = root["held_gauge"]?.jsonPrimitive?.content ?: "fenec_held_claims"
        val timeout = root["deadline_ms"]?.jsonPrimitive?.long ?: 60_000
        var ok = 0
        var bad = 0
        for (json in cases) {
            val name = json["name"]?.jsonPrimitive?.content ?: ""
            if (only != null && !name.contains(only)) continue
            val q = json["collection"]?.jsonPrimitive?.content ?: "replica_kotlin_${hex()}"
            case = Case(json, schema, gauge)
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
        db.run(case.schema.replace("{q}", q))
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

    /** The held-claim gauge (the file's `held_gauge`) of the server at [url]. */
    private fun heldAt(url: String): Double {
        val r = http.send(HttpRequest.newBuilder(URI.create("$url/_metrics")).GET().build(), HttpResponse.BodyHandlers.ofString())
        val m = Regex("""(?m)^${Regex.escape(case.gauge)}(?:\{[^}]*\})? (\S+)$""").find(r.body())
            ?: throw Failed("$url/_metrics has ${case.gauge} / it has not")
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

    /** A client given the replica alone creates the queue and enqueues its jobs; the primary holds them, and so does
     * the replica once it holds the last write (`Fenec-After`). The collection is left for the next case. */
    private suspend fun writesThroughReplica(q: String) {
        val jobs = case.int("jobs", 5).toLong()
        val db = Fenec.connect(listOf(replica))
        freshQueue(db, q)
        val producer = Worker(db, q)
        repeat(jobs.toInt()) { producer.enqueue(mapOf("n" to it)) }
        check(db.url == primary) { "primary: $primary / ${db.url}" }
        rawCount(primary, q).let { check(it == jobs) { "rows on the primary: $jobs / $it" } }
        check(db.seq > 0) { "the last write's Fenec-Seq: a number / ${db.seq}" }
        rawCount(replica, q, db.seq).let { check(it == jobs) { "rows on the replica after seq ${db.seq}: $jobs / $it" } }
    }

    /** A worker given the replica alone works the primary's jobs, is held there when the queue is empty and takes the
     * jobs put meanwhile; the replica never holds a claim; the worker tells the primary in a PRIMARY event. */
    private suspend fun workerThroughReplica(q: String) {
        val jobs = case.int("jobs", 5).toLong()
        val later = case.int("later", 1).toLong()
        val pdb = Fenec.connect(primary)
        try {
            val producer = Worker(pdb, q)
            // the first case's jobs; made here when it did not run (FENEC_ONLY) or left other than it should
            if (runCatching { rawCount(primary, q) }.getOrNull() != jobs) {
                freshQueue(pdb, q)
                repeat(jobs.toInt()) { producer.enqueue(mapOf("n" to it)) }
            }
            // the replica holds the queue, as after the first case (a held claim on a collection a replica does not
            // hold yet is answered 404 there, not 403)
            rawCount(replica, q, pdb.seq.takeIf { it > 0 }).let { check(it == jobs) { "rows on the replica: $jobs / $it" } }
            val seen = ConcurrentLinkedQueue<WorkerEvent>()
            val processed = AtomicLong()
            val defaults = WorkerOptions()
            val options = WorkerOptions(
                concurrency = case.worker("concurrency")?.toInt() ?: 1,
                batch = case.worker("batch")?.toInt() ?: defaults.batch,
                wait = case.worker("wait_ms")?.milliseconds ?: 30.seconds,
                lease = case.worker("lease_ms")?.milliseconds ?: defaults.lease,
                onEvent = { seen.add(it) },
            )
            val worker = Worker(Fenec.connect(listOf(replica)), q, options)
            var failure: Throwable? = null
            val run = CoroutineScope(Dispatchers.Default).launch {
                try { worker.run { processed.incrementAndGet() } } catch (e: Throwable) { failure = e }
            }
            try {
                fun replicaHeld() = heldAt(replica).let { if (it != 0.0) "held claims on the replica: 0 / $it" else null }
                fun ran(problem: String?) = problem?.let { p -> failure?.let { "$p (run threw $it)" } ?: p }
                fun workedOff(n: Long) = ran(rawCount(primary, q).let {
                    if (processed.get() < n || it != 0L) "$n jobs processed and acked / ${processed.get()} processed, $it rows left" else null
                })
                until { workedOff(jobs) }
                until { replicaHeld() }
                until { heldAt(primary).let { if (it < 1) "the worker's claim held on the primary / $it" else null } }
                until { replicaHeld() }
                for (i in 0 until later) producer.enqueue(mapOf("n" to jobs + i))
                until { workedOff(jobs + later) }
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

    /** A client given both servers, reading from the replica, writes row 1 over with the builder and reads it back by
     * id, each round answered with the round just written. */
    private suspend fun readsOnReplica(q: String) {
        val db = Fenec.connect(listOf(primary, replica), readFrom = ReadFrom.REPLICA)
        freshQueue(db, q)
        try {
            for (i in 1L..case.int("rounds", 20).toLong()) {
                db.from(q).insert(mapOf("id" to 1, "payload" to mapOf("round" to i), "run_at" to com.fenecdb.Computed.expr("now()")))
                val rows = db.from(q).where("id", 1).rows()
                check(rows.size == 1) { "round $i: one row / $rows" }
                check((rows.single()["payload"] as? Map<*, *>)?.get("round") == i) { "round $i: the row just written / ${rows.single()}" }
            }
        } finally {
            db.run("drop collection $q")
        }
    }
}
