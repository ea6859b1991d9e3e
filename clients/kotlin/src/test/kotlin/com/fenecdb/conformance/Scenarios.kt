package com.fenecdb.conformance

import com.fenecdb.Fenec
import com.fenecdb.FenecException
import com.fenecdb.FenecRemote
import com.fenecdb.JobQueue
import com.fenecdb.Row
import com.fenecdb.Statement
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeoutOrNull
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.JsonArray
import kotlinx.serialization.json.JsonElement
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.JsonPrimitive
import java.io.File
import java.security.SecureRandom
import java.util.Collections
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicInteger
import kotlin.time.Duration.Companion.milliseconds

/**
 * The worker-scenario runner (conformance.md Part B). Each scenario runs in a collection of its own,
 * `<prefix>_kotlin_<8 hex>`, made before and dropped after. Every queue operation is a [JobQueue] call, the SDK's
 * builder and real write calls; before the first of each kind its text-only twin is checked against B.3's template.
 * A script runs on one connection; `during` starts a second; a swarm gives each producer and worker its own.
 */
class Scenarios(val url: String?, val token: String?, val requireServer: Boolean, private val out: (String) -> Unit = ::println) {
    var passed = 0; private set
    var failed = 0; private set
    var skipped = 0; private set

    /** A scenario failed: `<step or invariant>: <expected> / <got>`. */
    class Failed(message: String) : Exception(message)

    companion object {
        const val LANG = "kotlin"
        const val DEFAULT_SCHEMA = "create collection {q} (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"
        val TEMPLATES = mapOf(
            "enqueue" to "put {q} {payload: \$1, run_at: now() + \$2, attempts: \$3}",
            "claim" to "set {q} {owner: \$1, run_at: now() + \$2, attempts: coalesce(attempts, 0) + \$3} where run_at <= now() order run_at asc limit <batch> returning *",
            "ack" to "del {q} where id = \$1 and owner = \$2 require 1",
            "extend" to "set {q} {run_at: now() + \$1} where id = \$2 and owner = \$3 require 1",
            "fail" to "set {q} {owner: \$1, error: \$2, run_at: case when attempts >= \$3 then null else now() + \$4 * attempts * attempts end} where id = \$5 and owner = \$6 require 1",
            "pop" to "del {q} where run_at <= now() order run_at asc limit <n> returning *",
            "resend" to "set {q} {run_at: now(), attempts: \$1, error: \$2} where id = \$3 and run_at is null",
        )
        private val random = SecureRandom()
        fun nowMs(): Double = System.nanoTime() / 1e6
        fun keyOf(row: Row): String = (row["payload"] as? Map<*, *>)?.get("key")?.toString() ?: "?"
    }

    fun runFile(file: File, only: String?): Boolean {
        val scenarios = try {
            val root = Json.parseToJsonElement(file.readText()) as JsonObject
            if ((root["format"] as? JsonPrimitive)?.content != "1") throw Failed("not a format 1 scenarios file")
            (root["scenarios"] as JsonArray).map { it as JsonObject }
        } catch (e: Exception) {
            out("FAIL $file: cannot read the scenarios: ${e.message}")
            failed++
            out("scenarios $file: 0 ok, 1 FAIL, 0 skipped")
            return false
        }
        val chosen = scenarios.filter { only == null || str(it, "name").contains(only) }
        if (url == null) {
            if (requireServer) {
                out("FAIL scenarios: FENEC_REQUIRE_SERVER=1 but FENEC_URL is not set")
                failed++
            } else {
                for (s in chosen) { out("skipped ${str(s, "name")}: FENEC_URL not set"); skipped++ }
            }
            out("scenarios $file: $passed ok, $failed FAIL, $skipped skipped")
            return failed == 0
        }
        for (s in chosen) {
            val name = str(s, "name")
            try {
                val summary = runBlocking(Dispatchers.Default) { runScenario(s) }
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
        out("scenarios $file: $passed ok, $failed FAIL, $skipped skipped")
        return failed == 0
    }

    private suspend fun runScenario(s: JsonObject): String {
        val hex = ByteArray(4).also { random.nextBytes(it) }.joinToString("") { "%02x".format(it) }
        val queue = "${str(s, "prefix", "q")}_${LANG}_$hex"
        val tolerance = num(s, "tolerance_ms", 150.0)
        val timeoutMs = num(s, "timeout_ms", 30000.0)
        val admin = Fenec.connect(url!!, token)
        admin.run((s["schema"]?.let { (it as JsonPrimitive).content } ?: DEFAULT_SCHEMA).replace("{q}", queue))
        try {
            return if (str(s, "kind") == "swarm") {
                val got = Swarm(queue, s, tolerance, nowMs() + timeoutMs).run()
                checkInvariants(s["expect"] as? JsonObject ?: JsonObject(emptyMap()), got)
                got.entries.joinToString(", ") { "${it.key} ${it.value}" }
            } else {
                val steps = (s["steps"] as? JsonArray ?: JsonArray(emptyList())).map { it as JsonObject }
                val script = Script(queue, tolerance)
                withTimeoutOrNull(timeoutMs.toLong().milliseconds) {
                    script.run(steps, Fenec.connect(url, token), "step")
                } ?: throw Failed("timeout_ms: within ${timeoutMs.toLong()} ms / still running")
                "${steps.size} steps"
            }
        } finally {
            try { admin.run("drop collection $queue") } catch (e: FenecException) { /* the run's answer stands */ }
        }
    }

    /** The queue of one scenario, checking each kind of statement against its template once. */
    private inner class Checked(db: FenecRemote, val name: String, val checked: MutableSet<String>) {
        val q = JobQueue(db, name)

        fun check(kind: String, made: Statement, vararg fill: Pair<String, Any>) {
            if (kind in checked) return
            var want = TEMPLATES.getValue(kind).replace("{q}", name)
            for ((k, v) in fill) want = want.replace("<$k>", v.toString())
            if (made.text != want) throw Failed("$kind template: $want / ${made.text}")
            checked.add(kind)
        }

        suspend fun enqueue(key: String, payload: Map<String, Any?>?, delayMs: Long): Long {
            val doc = LinkedHashMap(payload ?: emptyMap()).apply { put("key", key) }
            check("enqueue", q.enqueueStatement(doc, delayMs.milliseconds))
            return q.enqueue(doc, delayMs.milliseconds)
        }

        suspend fun claim(owner: String, batch: Int, leaseMs: Long, waitMs: Long?, key: String?): Pair<List<Row>, Boolean> {
            check("claim", q.claimStatement(owner, batch, leaseMs.milliseconds), "batch" to batch)
            val rows = q.claim(owner, batch, leaseMs.milliseconds, waitMs?.milliseconds, key)
            return rows to (key != null && q.db.replayed)
        }

        suspend fun ack(id: Any, owner: String): Boolean {
            check("ack", q.ackStatement(id, owner))
            return q.ack(id, owner)
        }

        suspend fun extend(id: Any, owner: String, leaseMs: Long): Boolean {
            check("extend", q.extendStatement(id, owner, leaseMs.milliseconds))
            return q.extend(id, owner, leaseMs.milliseconds)
        }

        suspend fun fail(id: Any, owner: String, error: String, deadAfter: Int, backoffMs: Long): Boolean {
            check("fail", q.failStatement(id, owner, error, deadAfter, backoffMs.milliseconds))
            return q.fail(id, owner, error, deadAfter, backoffMs.milliseconds)
        }

        suspend fun pop(n: Int): List<Row> {
            check("pop", q.popStatement(n), "n" to n)
            return q.pop(n)
        }

        suspend fun resend(id: Any): Long {
            check("resend", q.resendStatement(id))
            return q.resend(id)
        }

        suspend fun idOf(key: String): Any? = q.db.from(name).select("id").where("payload.key", key).first()?.get("id")
    }

    // ---- scripts ----

    private inner class Script(val queue: String, val tolerance: Double) {
        var counter = 0
        val ids = HashMap<String, Any?>()
        val owners = HashMap<Pair<String, String>, MutableList<String>>()
        var lastClaim: Triple<String?, String, String>? = null // (idempotency key, worker, owner)
        val checked: MutableSet<String> = Collections.synchronizedSet(HashSet())

        fun expect(label: String, want: JsonElement?, got: JsonElement) {
            if (want != null && want != got) throw Failed("$label: $want / $got")
        }

        suspend fun run(steps: List<JsonObject>, db: FenecRemote, label: String) {
            val q = Checked(db, queue, checked)
            steps.forEachIndexed { i, step -> step(q, step, "$label ${i + 1}") }
        }

        suspend fun step(q: Checked, step: JsonObject, at: String) {
            val action = step.keys.firstOrNull { it != "expect" } ?: throw Failed("$at: a step with no action")
            val expect = step["expect"]?.takeIf { it !is kotlinx.serialization.json.JsonNull }
            val label = "$at ($action)"
            val arg = step[action]
            when (action) {
                "enqueue" -> for (item in (arg as JsonArray).map { it as JsonObject }) {
                    @Suppress("UNCHECKED_CAST")
                    val payload = item["payload"]?.let { Vectors().decode(it) } as Map<String, Any?>?
                    val n = q.enqueue(str(item, "key"), payload, num(item, "delay_ms", 0.0).toLong())
                    expect(label, expect, obj("affected" to n))
                }
                "claim" -> claim(q, arg as JsonObject, expect as JsonObject?, label)
                "ack", "extend", "fail" -> {
                    val a = arg as JsonObject
                    val (id, owner) = job(a, label)
                    val ok = when (action) {
                        "ack" -> q.ack(id, owner)
                        "extend" -> q.extend(id, owner, num(a, "lease_ms", 30000.0).toLong())
                        else -> q.fail(id, owner, str(a, "error", "failed"), num(a, "dead_after", 5.0).toInt(), num(a, "backoff_ms", 1000.0).toLong())
                    }
                    expect(label, expect, JsonPrimitive(if (ok) "ok" else "unmet"))
                }
                "pop" -> {
                    val rows = q.pop(num(arg as JsonObject, "limit", 1.0).toInt())
                    expect(label, expect, obj("keys" to JsonArray(rows.map { JsonPrimitive(keyOf(it)) })))
                }
                "resend" -> {
                    val key = str(arg as JsonObject, "key")
                    val id = ids[key] ?: q.idOf(key) ?: throw Failed("$label: a job with key $key / none")
                    expect(label, expect, obj("affected" to q.resend(id)))
                }
                "sleep_ms" -> delay((arg as JsonPrimitive).content.toDouble().toLong())
                "counts" -> {
                    val c = q.q.counts()
                    val all = mapOf("ready" to c.ready, "leased" to c.leased, "delayed" to c.delayed, "dead" to c.dead, "total" to c.total)
                    val e = expect as? JsonObject
                    if (e != null) expect(label, e, JsonObject(e.keys.associateWith { JsonPrimitive(all[it]) }))
                }
                "during" -> coroutineScope {
                    val a = arg as JsonObject
                    val inner = (a["step"] as JsonObject)["claim"] as JsonObject
                    val held = async { claim(q, inner, expect as JsonObject?, "$label claim") }
                    delay(num(a, "after_ms", 0.0).toLong())
                    val second = Fenec.connect(url!!, token)
                    run((a["then"] as? JsonArray ?: JsonArray(emptyList())).map { it as JsonObject }, second, "$label then")
                    held.await()
                }
                else -> throw Failed("$label: unsupported action $action")
            }
        }

        fun job(a: JsonObject, label: String): Pair<Any, String> {
            val key = str(a, "key")
            val worker = str(a, "worker")
            val list = owners[worker to key]
            if (list.isNullOrEmpty()) throw Failed("$label: $worker never claimed $key")
            val which = a["claim"]?.let { (it as JsonPrimitive).content } ?: "last"
            val owner = if (which == "last") list.last() else list[which.toInt() - 1]
            return (ids[key] ?: throw Failed("$label: no id for $key")) to owner
        }

        suspend fun claim(q: Checked, a: JsonObject, expect: JsonObject?, label: String) = coroutineScope {
            val worker = str(a, "worker")
            val key = a["idempotency_key"]?.let { (it as JsonPrimitive).content }
            val last = lastClaim
            // a claim repeating the previous claim's key resends it unchanged, owner included, as a retry would
            val owner = if (key != null && last != null && last.first == key && last.second == worker) last.third
            else "$worker:${++counter}"
            lastClaim = Triple(key, worker, owner)
            val waitMs = a["wait_ms"]?.let { num(a, "wait_ms", 0.0).toLong() }
            val cancelAfter = a["cancel_after_ms"]?.let { num(a, "cancel_after_ms", 0.0).toLong() }
            val started = nowMs()
            // keys share one namespace on an open server, and every SDK runs the same file against it: a key is made
            // the scenario's own by its collection's name, as the collection itself is (B.2)
            val scoped = key?.let { "$queue:$it" }
            val call = async { q.claim(owner, num(a, "batch", 1.0).toInt(), num(a, "lease_ms", 30000.0).toLong(), waitMs, scoped) }
            var cancelled = false
            if (cancelAfter != null) {
                delay(cancelAfter)
                call.cancel()
            }
            val (rows, replayed) = try { call.await() } catch (e: CancellationException) {
                if (!call.isCancelled) throw e
                cancelled = true
                emptyList<Row>() to false
            }
            val took = nowMs() - started
            for (row in rows) {
                ids[keyOf(row)] = row["id"]
                owners.getOrPut(worker to keyOf(row)) { ArrayList() }.add(owner)
            }
            if (expect == null) return@coroutineScope
            expect["cancelled"]?.let {
                expect("$label cancelled", it, JsonPrimitive(cancelled))
                if (cancelled && took > cancelAfter!! + tolerance) throw Failed("$label cancelled within ${cancelAfter + tolerance} ms / ${took.toLong()} ms")
            }
            expect["keys"]?.let { expect("$label keys", it, JsonArray(rows.map { r -> JsonPrimitive(keyOf(r)) })) }
            expect["attempts"]?.let { expect("$label attempts", it, JsonArray(rows.map { r -> JsonPrimitive(r.long("attempts")) })) }
            expect["replayed"]?.let { expect("$label replayed", it, JsonPrimitive(replayed)) }
            expect["min_ms"]?.let { val m = num(expect, "min_ms", 0.0); if (took < m - tolerance) throw Failed("$label min_ms: ${m.toLong()} / ${took.toLong()}") }
            expect["max_ms"]?.let { val m = num(expect, "max_ms", 0.0); if (took > m + tolerance) throw Failed("$label max_ms: ${m.toLong()} / ${took.toLong()}") }
        }
    }

    // ---- swarms ----

    private class Claim(val key: String, val owner: String, val sent: Double, val received: Double, val attempts: Long) {
        @Volatile var leaseEnd = 0.0
        @Volatile var settled = false
    }

    private inner class Swarm(val queue: String, val spec: JsonObject, val tolerance: Double, val deadline: Double) {
        val jobs = ArrayList<Triple<String, String, Long>>() // key, behaviour, delay
        val claims: MutableList<Claim> = Collections.synchronizedList(ArrayList())
        val acks = ConcurrentHashMap<String, AtomicInteger>()
        val dead: MutableSet<String> = ConcurrentHashMap.newKeySet()
        val stale = AtomicInteger()
        val enqueued = ConcurrentHashMap<String, Double>()
        val checked: MutableSet<String> = ConcurrentHashMap.newKeySet()
        @Volatile var done = false

        fun finished() = acks.size + dead.size >= jobs.size

        suspend fun run(): Map<String, Long> = coroutineScope {
            for (g in (spec["jobs"] as JsonArray).map { it as JsonObject }) {
                repeat(num(g, "count", 0.0).toInt()) { jobs.add(Triple("j${jobs.size + 1}", str(g, "behaviour"), num(g, "delay_ms", 0.0).toLong())) }
            }
            val behaviour = jobs.associate { it.first to it.second }
            val delayOf = jobs.associate { it.first to it.third }
            val w = spec["workers"] as JsonObject
            val leaseMs = num(w, "lease_ms", 30000.0).toLong()
            val batch = num(w, "batch", 1.0).toInt()
            val waitMs = num(w, "wait_ms", 0.0).toLong()
            val deadAfter = num(spec, "dead_after", 5.0).toInt()
            val backoffMs = num(spec, "backoff_ms", 1000.0).toLong()

            suspend fun work(q: Checked, c: Claim, row: Row) {
                val what = behaviour[c.key] ?: "ok"
                val attempt = row.long("attempts") ?: 0
                val id = row["id"]!!
                if (what == "forget" && attempt == 1L) return // as a worker that died: no ack, no fail
                if (what == "slow") {
                    val end = nowMs() + 2.5 * leaseMs
                    while (true) {
                        delay(minOf(leaseMs / 3.0, maxOf(end - nowMs(), 0.0)).toLong())
                        if (nowMs() >= end) break
                        val sent = nowMs()
                        if (q.extend(id, c.owner, leaseMs)) c.leaseEnd = sent + leaseMs else { stale.incrementAndGet(); return }
                    }
                }
                if (what == "fail_always" || (what == "fail_once" && attempt == 1L)) {
                    if (q.fail(id, c.owner, "$what on attempt $attempt", deadAfter, backoffMs)) {
                        c.settled = true
                        if (attempt >= deadAfter) dead.add(c.key)
                    } else stale.incrementAndGet()
                } else {
                    if (q.ack(id, c.owner)) {
                        c.settled = true
                        acks.getOrPut(c.key) { AtomicInteger() }.incrementAndGet()
                    } else stale.incrementAndGet()
                }
                if (finished()) done = true
            }

            suspend fun worker(me: Int) {
                val q = Checked(Fenec.connect(url!!, token), queue, checked)
                var counter = 0
                while (!done && nowMs() < deadline) {
                    val owner = "w$me:${++counter}"
                    val sent = nowMs()
                    val (rows, _) = q.claim(owner, batch, leaseMs, waitMs, null)
                    val received = nowMs()
                    coroutineScope {
                        for (row in rows) {
                            val c = Claim(keyOf(row), owner, sent, received, row.long("attempts") ?: 0).also { it.leaseEnd = sent + leaseMs }
                            claims.add(c)
                            launch { work(q, c, row) }
                        }
                    }
                }
            }

            val p = spec["producers"] as? JsonObject
            val producers = maxOf(p?.let { num(it, "count", 1.0).toInt() } ?: 1, 1)
            val spread = p?.let { num(it, "spread_ms", 0.0) } ?: 0.0
            val shuffled = jobs.shuffled() // which failing job comes when, and from which producer, differs run to run
            val workers = (1..num(w, "count", 1.0).toInt()).map { i -> async { worker(i) } }
            delay(50) // the workers are already waiting when the jobs come
            (0 until producers).map { i ->
                async {
                    val share = shuffled.filterIndexed { k, _ -> k % producers == i }
                    val q = Checked(Fenec.connect(url!!, token), queue, checked)
                    val gap = spread / maxOf(share.size, 1)
                    for ((key, _, d) in share) {
                        enqueued[key] = nowMs()
                        q.enqueue(key, null, d)
                        delay(gap.toLong())
                    }
                }
            }.awaitAll()
            while (!finished() && nowMs() < deadline) delay(20)
            done = true
            try { workers.awaitAll() } catch (e: Failed) { throw e } catch (e: Exception) {
                throw Failed("a worker stopped: $e")
            }
            if (!finished()) throw Failed("timeout_ms: acked + dead = ${jobs.size} / ${acks.size + dead.size}")

            // the invariants of B.4.2, measured on the runner's own clock, leaning towards passing only what is sure
            var whileLeased = 0L; var beforeDue = 0L; var reclaimed = 0L
            val byKey = claims.sortedBy { it.sent }.groupBy { it.key }
            for ((key, list) in byKey) {
                for (i in 1 until list.size) {
                    val earlier = list[i - 1]; val later = list[i]
                    if (!earlier.settled && later.received + tolerance < earlier.leaseEnd) whileLeased++
                }
                for (c in list) {
                    val d = delayOf[key] ?: 0
                    if (d > 0 && c.received < (enqueued[key] ?: 0.0) + d - tolerance) beforeDue++
                    if (behaviour[key] == "forget" && c.attempts >= 2) reclaimed++
                }
            }
            val db = Fenec.connect(url!!, token)
            val deadRows = db.from(queue).select("id", "error").where("run_at", null).rows()
            val left = db.from(queue).where("run_at", "!=", null).count()
            if (deadRows.any { (it["error"] as? String).isNullOrEmpty() }) throw Failed("dead: every dead row keeps its error / a dead row without one")
            linkedMapOf(
                "acked" to acks.size.toLong(),
                "acked_twice" to acks.values.count { it.get() > 1 }.toLong(),
                "dead" to deadRows.size.toLong(),
                "left" to left,
                "claimed_while_leased" to whileLeased,
                "claimed_before_due" to beforeDue,
                "reclaimed_after_lapse" to reclaimed,
                "stale" to stale.get().toLong(),
                "max_attempts" to (claims.maxOfOrNull { it.attempts } ?: 0L),
            )
        }
    }

    private fun checkInvariants(expect: JsonObject, got: Map<String, Long>) {
        for ((name, want) in expect) {
            val value = got[name] ?: throw Failed("$name: an invariant this runner knows / unknown")
            if (want is JsonObject) {
                want["min"]?.let { if (value < (it as JsonPrimitive).content.toDouble()) throw Failed("$name: at least ${it.content} / $value") }
                want["max"]?.let { if (value > (it as JsonPrimitive).content.toDouble()) throw Failed("$name: at most ${it.content} / $value") }
            } else if (value.toDouble() != (want as JsonPrimitive).content.toDouble()) {
                throw Failed("$name: $want / $value")
            }
        }
    }

    private fun str(o: JsonObject, k: String, default: String = ""): String = (o[k] as? JsonPrimitive)?.content ?: default
    private fun num(o: JsonObject, k: String, default: Double): Double = (o[k] as? JsonPrimitive)?.content?.toDoubleOrNull() ?: default
    private fun obj(vararg pairs: Pair<String, Any?>): JsonObject = JsonObject(pairs.associate { (k, v) ->
        k to when (v) { is JsonElement -> v; is Number -> JsonPrimitive(v); else -> JsonPrimitive(v?.toString()) }
    })
}
