package com.fenecdb.conformance

import com.fenecdb.Fenec
import com.fenecdb.FenecException
import com.fenecdb.FenecRemote
import com.fenecdb.Job
import com.fenecdb.Worker
import com.fenecdb.WorkerEvent
import com.fenecdb.WorkerOptions
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitCancellation
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.JsonArray
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.JsonPrimitive
import kotlinx.serialization.json.jsonArray
import kotlinx.serialization.json.jsonObject
import kotlinx.serialization.json.jsonPrimitive
import kotlinx.serialization.json.long
import kotlinx.serialization.json.longOrNull
import java.io.File
import java.security.SecureRandom
import java.util.Base64
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.TimeUnit
import kotlin.time.Duration.Companion.milliseconds

/**
 * The worker under the docs' own policy (`conformance/policy-scenarios.json`): a `fenec-server` of its own, started
 * with the ```policy block of docs/access.md as its policy file and a fresh HS256 secret, the scenario's tokens minted
 * by that server, and the SDK's own [Worker] sending each token. The server is `<repo>/.venv/bin/fenec-server`
 * (the one `make conformance` runs); without it every scenario is skipped, or failed under FENEC_REQUIRE_SERVER=1.
 */
class Policy(private val root: File, private val requireServer: Boolean, private val out: (String) -> Unit = ::println) {
    var passed = 0; private set
    var failed = 0; private set
    var skipped = 0; private set

    private class Failed(message: String) : Exception(message)

    private val command = File(root, ".venv/bin/fenec-server")

    fun runFile(file: File, only: String?) {
        val spec = Json.parseToJsonElement(file.readText()).jsonObject
        val chosen = spec["scenarios"]!!.jsonArray.map { it.jsonObject }.filter { only == null || str(it, "name").contains(only) }
        if (chosen.isEmpty()) return
        if (!command.canExecute()) {
            for (s in chosen) {
                if (requireServer) { failed++; out("FAIL ${str(s, "name")}: no fenec-server at $command") }
                else { skipped++; out("skipped ${str(s, "name")}: no fenec-server at $command") }
            }
            return
        }
        val dir = kotlin.io.path.createTempDirectory("fenec-policy-").toFile()
        try {
            val server = Server(spec, dir)
            try {
                for (s in chosen) {
                    val name = str(s, "name")
                    try {
                        val summary = runBlocking(Dispatchers.Default) { withTimeout(120_000) { play(server, spec, s) } }
                        passed++
                        out("ok $name: $summary")
                    } catch (e: Failed) {
                        failed++
                        out("FAIL $name: ${e.message}")
                    } catch (e: Exception) {
                        failed++
                        out("FAIL $name: no error / $e")
                    }
                }
            } finally {
                server.close()
            }
        } catch (e: Exception) {
            for (s in chosen) { failed++; out("FAIL ${str(s, "name")}: the policy server did not start: $e") }
        } finally {
            dir.deleteRecursively()
        }
        out("policy scenarios $file: $passed ok, $failed FAIL, $skipped skipped")
    }

    /** The server on the docs' policy: its URL, its server token, and a minter of tokens on its secret. */
    private inner class Server(spec: JsonObject, dir: File) : AutoCloseable {
        private val secret = File(dir, "jwt.secret")
        val admin: String = token(24)
        val url: String
        private val process: Process

        init {
            val page = File(root, str(spec, "policy_from")).readText()
            val block = Regex("```policy\n(.*?)```", RegexOption.DOT_MATCHES_ALL).findAll(page).single().groupValues[1]
            val policy = File(dir, "docs.policy").apply { writeText(block) }
            secret.writeText(token(48))
            val pb = ProcessBuilder(command.path, "--http", "127.0.0.1:0", "--jwt-secret-file", secret.path, "--policy", policy.path)
                .redirectOutput(ProcessBuilder.Redirect.DISCARD)
            pb.environment()["FENEC_HTTP_TOKEN"] = admin
            process = pb.start()
            url = address(process) ?: throw IllegalStateException("fenec-server did not report its address")
        }

        fun mint(claims: JsonObject): String {
            val p = ProcessBuilder(command.path, "--jwt-secret-file", secret.path, "--mint-token", claims.toString())
                .redirectError(ProcessBuilder.Redirect.DISCARD).start()
            val text = p.inputStream.bufferedReader().readText().trim()
            check(p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0 && text.isNotEmpty()) { "--mint-token failed" }
            return text
        }

        override fun close() {
            process.destroy()
            if (!process.waitFor(10, TimeUnit.SECONDS)) process.destroyForcibly()
        }
    }

    private suspend fun play(server: Server, spec: JsonObject, s: JsonObject): String {
        val tokens = spec["tokens"]!!.jsonObject.mapValues { server.mint(it.value.jsonObject) }
        val queue = str(spec, "queue")
        val admin = Fenec.connect(server.url, server.admin)
        admin.run("drop collection if exists $queue")
        admin.run(str(spec, "schema"))
        return when (str(s, "kind")) {
            "work" -> work(server, tokens, queue, s)
            "give_back" -> giveBack(server, tokens, queue, s)
            "refused" -> refused(server, tokens, queue, s)
            else -> throw Failed("kind: work, give_back or refused / ${str(s, "kind")}")
        }
    }

    /** The jobs of [s] enqueued through the producer token: each by [Worker.enqueue], or a raw put for initial attempts. */
    private suspend fun enqueue(db: FenecRemote, queue: String, s: JsonObject): Map<String, String> {
        val producer = Worker(db, queue)
        var n = 0
        val groups = HashMap<String, String>()
        for (g in s["jobs"]!!.jsonArray.map { it.jsonObject }) {
            repeat(num(g, "count").toInt()) {
                val key = "${str(g, "group")}-${n++}"
                groups[key] = str(g, "group")
                val payload = (Vectors().decode(g["payload"]!!) as Map<*, *>) + ("key" to key)
                val initial = (g["initial_attempts"] as? JsonPrimitive)?.longOrNull
                if (initial == null) producer.enqueue(payload)
                else db.run("put $queue {payload: \$1, run_at: now(), attempts: \$2}", listOf(payload, initial))
            }
        }
        return groups
    }

    private fun options(s: JsonObject, name: String, events: ConcurrentLinkedQueue<WorkerEvent>): WorkerOptions {
        val w = s["worker"]?.jsonObject ?: JsonObject(emptyMap())
        val backoff = (w["backoff_ms"] as? JsonPrimitive)?.long ?: 1000
        val d = WorkerOptions()
        return WorkerOptions(
            name = name,
            batch = (w["batch"] as? JsonPrimitive)?.long?.toInt() ?: d.batch,
            concurrency = (w["concurrency"] as? JsonPrimitive)?.long?.toInt() ?: d.concurrency,
            lease = (w["lease_ms"] as? JsonPrimitive)?.long?.milliseconds ?: d.lease,
            wait = (w["wait_ms"] as? JsonPrimitive)?.long?.milliseconds ?: d.wait,
            maxAttempts = (w["max_attempts"] as? JsonPrimitive)?.long?.toInt() ?: d.maxAttempts,
            drainTimeout = (w["drain_ms"] as? JsonPrimitive)?.long?.milliseconds ?: d.drainTimeout,
            backoff = { attempts -> (backoff * attempts * attempts).milliseconds },
            onEvent = { events.add(it) },
        )
    }

    /** What a job's payload asks: sleep, then fail while attempts <= fail_times; `hold`: wait to be cancelled. */
    private suspend fun handle(job: Job) {
        val p = job.payload as? Map<*, *> ?: emptyMap<String, Any?>()
        if (p["hold"] == true) awaitCancellation()
        (p["sleep_ms"] as? Number)?.let { delay(it.toLong()) }
        val fail = p["fail"] as? String
        val times = (p["fail_times"] as? Number)?.toLong()
        if (fail != null && (times == null || job.attempts <= times)) throw IllegalStateException(fail)
    }

    private fun keyOf(payload: Any?): String? = (payload as? Map<*, *>)?.get("key")?.toString()

    private suspend fun work(server: Server, tokens: Map<String, String>, queue: String, s: JsonObject): String {
        val groups = enqueue(Fenec.connect(server.url, tokens.getValue("producer")), queue, s)
        val events = ConcurrentLinkedQueue<WorkerEvent>()
        val otherEvents = ConcurrentLinkedQueue<WorkerEvent>()
        val starts = java.util.concurrent.ConcurrentHashMap<String, MutableList<Long>>()
        val workers = (1..num(s, "workers").toInt()).map { i ->
            Worker(Fenec.connect(server.url, tokens.getValue(str(s, "token"))), queue, options(s, "w$i", events))
        }
        val others = (1..num(s, "other_workers").toInt()).map { i ->
            Worker(Fenec.connect(server.url, tokens.getValue(str(s, "other_token"))), queue, options(s, "other$i", otherEvents))
        }
        return kotlinx.coroutines.coroutineScope {
            val runs = (workers + others).map { w ->
                async {
                    try {
                        w.run { job ->
                            synchronized(starts) { starts.getOrPut(keyOf(job.payload) ?: "?") { ArrayList() }.add(job.attempts) }
                            handle(job)
                        }
                        null
                    } catch (e: FenecException) {
                        e
                    }
                }
            }
            val admin = Fenec.connect(server.url, server.admin)
            // settled: acked (the row gone) or dead (run_at null)
            while (admin.from(queue).count() > admin.from(queue).where("run_at", null).count()) delay(50)
            (workers + others).forEach { it.stop() }
            val ended = runs.map { it.await() }
            ended.filterNotNull().firstOrNull()?.let { throw Failed("run ends by a stop / it threw $it") }
            val rows = admin.from(queue).rows().associateBy { keyOf(it["payload"]) }
            for (g in s["jobs"]!!.jsonArray.map { it.jsonObject }) {
                for ((key, group) in groups) {
                    if (group != str(g, "group")) continue
                    val n = starts[key]?.size ?: 0
                    if (n != num(g, "starts").toInt()) throw Failed("$key: ${num(g, "starts").toInt()} starts / $n")
                    val row = rows[key]
                    when (str(g, "expect")) {
                        "done" -> if (row != null) throw Failed("$key acked (its row gone) / $row")
                        "dead" -> {
                            if (row == null || row["run_at"] != null || row["owner"] != null) throw Failed("$key dead / $row")
                            if (row.long("attempts") != num(g, "attempts").toLong()) throw Failed("$key dead at attempts ${num(g, "attempts").toLong()} / $row")
                            if (row.string("error")?.contains(str(g, "error")) != true) throw Failed("$key error ${str(g, "error")} / $row")
                        }
                    }
                }
            }
            val lost = events.count { it.type == WorkerEvent.Type.LOST }
            if (lost != 0) throw Failed("no lease lost (the heartbeat kept every slow job) / $lost lost")
            val otherClaimed = otherEvents.count { it.type == WorkerEvent.Type.CLAIMED }
            if (otherClaimed != 0) throw Failed("the other queue's worker claims nothing / $otherClaimed claims")
            val acked = events.count { it.type == WorkerEvent.Type.DONE }
            val failed = events.count { it.type == WorkerEvent.Type.FAILED }
            val dead = events.count { it.type == WorkerEvent.Type.DEAD }
            "${groups.size} jobs under the policy: $acked acked, $failed failed, $dead dead; the other queue's worker claimed none"
        }
    }

    private suspend fun giveBack(server: Server, tokens: Map<String, String>, queue: String, s: JsonObject): String {
        val groups = enqueue(Fenec.connect(server.url, tokens.getValue("producer")), queue, s)
        val events = ConcurrentLinkedQueue<WorkerEvent>()
        val worker = Worker(Fenec.connect(server.url, tokens.getValue(str(s, "token"))), queue, options(s, "w1", events))
        return kotlinx.coroutines.coroutineScope {
            val run = async { try { worker.run(::handle); null } catch (e: FenecException) { e } }
            while (events.none { it.type == WorkerEvent.Type.START }) delay(20)
            worker.stop()
            run.await()?.let { throw Failed("run ends by the stop / it threw $it") }
            val released = events.count { it.type == WorkerEvent.Type.RELEASED }
            val want = num(s["expect"]!!.jsonObject, "released").toInt()
            if (released != want) throw Failed("$want released / $released (${events.map { it.type }})")
            val rows = Fenec.connect(server.url, server.admin).from(queue).where(com.fenecdb.Cond.raw("run_at <= now()")).where("owner", null).rows()
            val attempts = s["jobs"]!!.jsonArray.single().jsonObject["attempts"]!!.jsonPrimitive.long
            if (rows.size != groups.size || rows.any { it.long("attempts") != attempts }) {
                throw Failed("${groups.size} jobs ready, unowned, at attempts $attempts / $rows")
            }
            "$released given back, ready at attempts $attempts"
        }
    }

    private suspend fun refused(server: Server, tokens: Map<String, String>, queue: String, s: JsonObject): String {
        val expect = s["expect"]!!.jsonObject
        val otherProducer = Fenec.connect(server.url, tokens.getValue(str(s, "other_producer")))
        val put = statusOf { otherProducer.run("put $queue {queue: \$1, payload: \$2, run_at: now(), attempts: 0}", listOf("mail", mapOf("key" to "x"))) }
        if (put != num(expect, "put_status").toInt()) throw Failed("the other queue's put answered ${num(expect, "put_status").toInt()} / $put")
        // a job of this queue, held by this queue's worker: the other queue's worker acks it by its id and owner
        Worker(Fenec.connect(server.url, tokens.getValue("producer")), queue).enqueue(mapOf("key" to "held"))
        val events = ConcurrentLinkedQueue<WorkerEvent>()
        val worker = Worker(Fenec.connect(server.url, tokens.getValue(str(s, "token"))), queue,
            WorkerOptions(name = "w1", wait = 1000.milliseconds, drainTimeout = 200.milliseconds, onEvent = { events.add(it) }))
        return kotlinx.coroutines.coroutineScope {
            val run = async { worker.run { awaitCancellation() } }
            while (events.none { it.type == WorkerEvent.Type.START }) delay(20)
            val held = events.first { it.type == WorkerEvent.Type.START }
            val other = Fenec.connect(server.url, tokens.getValue(str(s, "other_token")))
            val ack = statusOf { other.run("del $queue where id = \$1 and owner = \$2 require 1", listOf(held.id, held.owner)) }
            worker.stop()
            run.await()
            if (ack != num(expect, "ack_status").toInt()) throw Failed("the other queue's ack answered ${num(expect, "ack_status").toInt()} / $ack")
            "the other queue's put $put, its ack of a held job $ack"
        }
    }

    private suspend fun statusOf(call: suspend () -> Unit): Int = try {
        call()
        200
    } catch (e: FenecException) {
        e.status
    }

    private companion object {
        val random = SecureRandom()
        fun token(bytes: Int): String = Base64.getEncoder().encodeToString(ByteArray(bytes).also { random.nextBytes(it) })
        fun str(o: JsonObject, key: String): String = (o[key] as JsonPrimitive).content
        fun num(o: JsonObject, key: String): Double = (o[key] as JsonPrimitive).content.toDouble()

        fun address(process: Process): String? {
            val lines = process.errorStream.bufferedReader()
            var url: String? = null
            while (url == null) {
                val line = lines.readLine() ?: break
                url = Regex("listening on: (http://\\S+)").find(line)?.groupValues?.get(1)
            }
            Thread { try { lines.forEachLine { } } catch (e: Exception) { } }.apply { isDaemon = true }.start()
            return url
        }
    }
}
