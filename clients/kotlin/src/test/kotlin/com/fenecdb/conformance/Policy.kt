package com.fenecdb.conformance

import com.fenecdb.Fenec
import com.fenecdb.FenecException
import com.fenecdb.Job
import com.fenecdb.Worker
import com.fenecdb.WorkerEvent
import com.fenecdb.WorkerOptions
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import kotlinx.coroutines.withTimeoutOrNull
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.JsonPrimitive
import kotlinx.serialization.json.int
import kotlinx.serialization.json.jsonArray
import kotlinx.serialization.json.jsonObject
import kotlinx.serialization.json.jsonPrimitive
import kotlinx.serialization.json.long
import java.io.File
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicInteger
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * The worker under the docs' own policy (conformance/README.md, "The worker under the docs' policy"): one case,
 * `worker under the docs' policy`, played with the SDK's own [Worker] against the second server `run.py` starts with
 * `worker-policy.json`'s policy, told by FENEC_POLICY_URL, FENEC_POLICY_ROOT_TOKEN, FENEC_POLICY_TOKENS and
 * FENEC_POLICY_SCENARIO.
 */
class Policy(private val out: (String) -> Unit = ::println) {
    var passed = 0; private set
    var failed = 0; private set

    private class Failed(message: String) : Exception(message)

    fun run(requireServer: Boolean) {
        val url = System.getenv("FENEC_POLICY_URL")?.takeIf { it.isNotEmpty() }?.trimEnd('/')
        if (url == null) {
            if (requireServer) { failed++; out("FAIL $NAME: FENEC_REQUIRE_SERVER=1 but FENEC_POLICY_URL is not set") }
            else out("skipped $NAME: FENEC_POLICY_URL not set")
            return
        }
        try {
            val spec = Json.parseToJsonElement(File(System.getenv("FENEC_POLICY_SCENARIO")).readText()).jsonObject
            val tokens = Json.parseToJsonElement(System.getenv("FENEC_POLICY_TOKENS")).jsonObject.mapValues { it.value.jsonPrimitive.content }
            val summary = runBlocking(Dispatchers.Default) { play(spec, url, tokens, System.getenv("FENEC_POLICY_ROOT_TOKEN")) }
            passed++
            out("ok $NAME: $summary")
        } catch (e: Failed) {
            failed++
            out("FAIL $NAME: ${e.message}")
        } catch (e: Exception) {
            failed++
            out("FAIL $NAME: $e")
        }
    }

    private suspend fun until(what: String, done: suspend () -> Boolean) {
        withTimeoutOrNull(DEADLINE) { while (!done()) delay(50) } ?: throw Failed("not within $DEADLINE: $what")
    }

    private fun keyOf(payload: Any?): String = (payload as? Map<*, *>)?.get("key")?.toString() ?: "?"

    private suspend fun play(spec: JsonObject, url: String, tokens: Map<String, String>, root: String): String = coroutineScope {
        val admin = Fenec.connect(url, root)
        val producer = Fenec.connect(url, tokens.getValue("producer"))
        val other = Fenec.connect(url, tokens.getValue("other"))
        try {
            admin.run("drop collection jobs")
        } catch (e: FenecException) {
            if (e.code != FenecException.Code.NOT_FOUND) throw e // each SDK's runner starts from a fresh queue
        }
        admin.run(spec["schema"]!!.jsonPrimitive.content)
        val w = spec["worker"]!!.jsonObject
        fun ms(key: String) = w[key]!!.jsonPrimitive.long.milliseconds
        val events = ConcurrentLinkedQueue<WorkerEvent>()
        val backoff = ms("backoff_ms")
        val worker = Worker(Fenec.connect(url, tokens.getValue("worker")), "jobs", WorkerOptions(
            name = w["name"]!!.jsonPrimitive.content, batch = w["batch"]!!.jsonPrimitive.int,
            concurrency = w["concurrency"]!!.jsonPrimitive.int, lease = ms("lease_ms"), wait = ms("wait_ms"),
            maxAttempts = w["max_attempts"]!!.jsonPrimitive.int, backoff = { backoff }, drainTimeout = ms("drain_timeout_ms"),
            onEvent = { events.add(it) },
        ))
        val enqueuer = Worker(producer, "jobs") // a producer's token enqueues; it never runs
        val jobs = spec["jobs"]!!.jsonArray.map { it.jsonObject }
        val byKey = jobs.associateBy { it["key"]!!.jsonPrimitive.content }
        val queueOfWorker = spec["tokens"]!!.jsonObject["worker"]!!.jsonObject["queue"]!!.jsonPrimitive.content
        for (job in jobs) {
            val key = job["key"]!!.jsonPrimitive.content
            if ((job["by"] as? JsonPrimitive)?.content == "server token") {
                admin.run("put jobs {queue: \$1, payload: \$2, run_at: now(), attempts: \$3}",
                    listOf(queueOfWorker, mapOf("key" to key), job["attempts"]!!.jsonPrimitive.long))
            } else if (enqueuer.enqueue(mapOf("key" to key)) != 1L) {
                throw Failed("enqueue answers 1 / otherwise")
            }
        }
        val starts = ConcurrentHashMap<String, AtomicInteger>()
        val stopping = CompletableDeferred<Unit>()
        val handler: suspend (Job) -> Unit = { job ->
            val key = keyOf(job.payload)
            starts.getOrPut(key) { AtomicInteger() }.incrementAndGet()
            val spec1 = byKey[key]
            // the `left` job (step 5) is acked at once; `block-<n>` (step 6) waits for the stop
            when (spec1?.get("behaviour")?.jsonPrimitive?.content ?: if (key.startsWith("block")) "block" else "ok") {
                "fail-always" -> throw IllegalStateException(key)
                "fail-once" -> if (job.attempts == 1L) throw IllegalStateException(key)
                "slow" -> delay(spec1!!["hold_ms"]!!.jsonPrimitive.long) // past the lease: only the heartbeat keeps it
                "block" -> withTimeoutOrNull(DEADLINE) { stopping.await() }
            }
        }
        val running = async {
            try {
                worker.run(handler)
                null
            } catch (e: FenecException) {
                e
            }
        }
        suspend fun rows() = admin.from("jobs").rows().associateBy { keyOf(it["payload"]) }
        until("every job settled") {
            running.isCompleted || rows().let { now ->
                byKey.all { (k, j) ->
                    if (j["expect"]!!.jsonObject["fate"]!!.jsonPrimitive.content == "acked") k !in now else now[k]?.get("run_at") == null && k in now
                }
            }
        }
        if (running.isCompleted) throw Failed("run goes on / it ended: ${running.await()}")
        val now = rows()
        for ((key, job) in byKey) {
            val exp = job["expect"]!!.jsonObject
            val n = starts[key]?.get() ?: 0
            if (n != exp["starts"]!!.jsonPrimitive.int) throw Failed("$key started ${exp["starts"]} times / $n")
            if (exp["fate"]!!.jsonPrimitive.content == "dead") {
                val row = now.getValue(key)
                if (row.string("error") != exp["error"]!!.jsonPrimitive.content || row.long("attempts") != exp["attempts"]!!.jsonPrimitive.long || row["owner"] != null) {
                    throw Failed("$key dead with ${exp["error"]} at ${exp["attempts"]}, no owner / $row")
                }
            }
        }
        // the other queue's token: a ready mail job is not there for it
        if (enqueuer.enqueue(mapOf("key" to "left")) != 1L) throw Failed("enqueue answers 1 / otherwise")
        val left = rows()["left"]
        // the claim a Worker sends (JobQueue's, the same statement), with the other queue's token: it takes nothing
        val taken = com.fenecdb.JobQueue(other, "jobs").claim("w-8:1", batch = 10, lease = 30.seconds)
        if (taken.isNotEmpty()) throw Failed("the other queue's worker claims nothing / it claimed $taken")
        if (left != null) {
            for (statement in listOf("set jobs {run_at: now() + 60000} where id = \$1 and owner = \$2 require 1",
                "del jobs where id = \$1 and owner = \$2 require 1")) {
                val code = try {
                    other.run(statement, listOf(left["id"], left.string("owner") ?: "w-7:1"))
                    null
                } catch (e: FenecException) {
                    e.code
                }
                if (code != FenecException.Code.UNMET) throw Failed("412 for the other queue's `$statement` / $code")
            }
        }
        until("the left job acked") { "left" !in rows() }
        // the stop: two block jobs run, the third is given back; one put, so that one claim takes them all
        val n = spec["stop"]!!.jsonObject["jobs"]!!.jsonPrimitive.int
        producer.run("put jobs \$1", listOf((0 until n).map { mapOf("payload" to mapOf("key" to "block-$it"), "run_at" to 0, "attempts" to 0) }))
        until("two block jobs running") { starts.filterKeys { it.startsWith("block") }.values.sumOf { it.get() } == 2 }
        worker.stop()
        stopping.complete(Unit)
        withTimeout(DEADLINE) { running.await() }?.let { throw Failed("run ends by the stop / it threw $it") }
        val back = rows().filterKeys { it.startsWith("block") }.values
        val exp = spec["stop"]!!.jsonObject["expect"]!!.jsonObject
        val givenBack = exp["given_back"]!!.jsonPrimitive.int
        val attempts = exp["given_back_row"]!!.jsonObject["attempts"]!!.jsonPrimitive.long
        if (back.size != givenBack || back.any { it["owner"] != null || it.long("attempts") != attempts || it["run_at"] == null }) {
            throw Failed("$givenBack block job given back, owner null, attempts $attempts, run_at set / $back")
        }
        val types = events.groupingBy { it.type.label }.eachCount()
        if (types["released"] != givenBack || (types["lost"] ?: 0) != 0 || types["stopped"] != 1) {
            throw Failed("$givenBack released, no lost, one stopped / $types")
        }
        val contract = Json.parseToJsonElement(File(File(System.getenv("FENEC_POLICY_SCENARIO")).parentFile, "worker-contract.json").readText())
        val known = contract.jsonObject["events"]!!.jsonObject["type_names"]!!.jsonObject["kotlin"]!!.jsonObject.keys
        if (!known.containsAll(types.keys)) throw Failed("events of the contract's types / ${types.keys}")
        "${byKey.size} jobs settled under the docs' policy (${types["done"]} acked, ${types["failed"]} failed, ${types["dead"]} dead); " +
            "the other queue's token claimed nothing and its extend and ack were 412; the stop gave $givenBack back"
    }

    private companion object {
        const val NAME = "worker under the docs' policy"
        val DEADLINE = 60.seconds
    }
}
