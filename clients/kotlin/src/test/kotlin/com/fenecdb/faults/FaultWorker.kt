package com.fenecdb.faults

import com.fenecdb.Fenec
import com.fenecdb.Job
import com.fenecdb.Worker
import com.fenecdb.WorkerEvent
import com.fenecdb.WorkerOptions
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.serialization.json.JsonNull
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.JsonPrimitive
import sun.misc.Signal
import sun.misc.SignalHandler
import java.io.FileDescriptor
import java.io.FileOutputStream
import java.io.PrintStream
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.milliseconds

/*
 * The Kotlin SDK's fault worker, which conformance/faults.py starts through fault-worker.sh: the SDK's own [Worker],
 * configured from FENEC_* variables (FENEC_SERVERS, when set, its client's servers, comma-separated), its handler doing what each job's payload says, every event one JSON line on
 * standard output. SIGTERM stops it gracefully, SIGINT hard; either way it prints `stopped` and exits 0.
 * It lives with the tests so that it stays out of the SDK's public surface.
 */

private val out = PrintStream(FileOutputStream(FileDescriptor.out), false, Charsets.UTF_8)

private fun json(value: Any?): kotlinx.serialization.json.JsonElement = when (value) {
    null -> JsonNull
    is Number -> JsonPrimitive(value)
    is Boolean -> JsonPrimitive(value)
    is List<*> -> kotlinx.serialization.json.JsonArray(value.map { json(it) })
    else -> JsonPrimitive(value.toString())
}

private fun line(fields: Map<String, Any?>) {
    val text = JsonObject(fields.mapValues { json(it.value) }).toString()
    synchronized(out) {
        out.println(text)
        out.flush()
    }
}

private fun env(key: String): String? = System.getenv(key)?.takeIf { it.isNotBlank() }
private fun envLong(key: String): Long? = env(key)?.let { it.toLongOrNull() ?: throw IllegalArgumentException("$key is a whole number (got $it)") }

private fun Map<*, *>.long(key: String): Long? = (this[key] as? Number)?.toLong()

/** What a job's payload asks: sleep (cut short when the lease is lost or at a hard stop), then throw, fail or succeed. */
private suspend fun handle(worker: String, job: Job) {
    val payload = job.payload as? Map<*, *> ?: emptyMap<String, Any?>()
    var ok = false
    try {
        val sleep = payload.long("sleep_ms") ?: 0
        if (sleep > 0) delay(sleep) // a cancelled coroutine (lost lease, hard stop) stops sleeping at once
        val failTimes = payload.long("fail_times")
        val due = failTimes == null || job.attempts <= failTimes
        if (payload["throw"] == true && due) throw IllegalStateException("job ${job.id} threw at attempt ${job.attempts}")
        val fail = payload["fail"] as? String
        if (fail != null && due) throw RuntimeException(fail)
        ok = true
    } finally {
        line(mapOf("event" to "end", "worker" to worker, "id" to job.id, "owner" to job.owner, "attempts" to job.attempts,
            "ok" to ok, "t" to System.currentTimeMillis()))
    }
}

fun main() {
    val url = env("FENEC_URL") ?: throw IllegalArgumentException("FENEC_URL is not set")
    val queueName = env("FENEC_QUEUE") ?: throw IllegalArgumentException("FENEC_QUEUE is not set")
    val defaults = WorkerOptions()
    val timeout = envLong("FENEC_TIMEOUT_MS")?.milliseconds ?: defaults.timeout
    val lease = envLong("FENEC_LEASE_MS")?.milliseconds ?: defaults.lease
    val backoffMs = envLong("FENEC_BACKOFF_MS") ?: 1000
    val name = env("FENEC_WORKER") ?: defaults.name
    val options = WorkerOptions(
        name = name,
        batch = envLong("FENEC_BATCH")?.toInt() ?: defaults.batch,
        concurrency = envLong("FENEC_CONCURRENCY")?.toInt() ?: defaults.concurrency,
        lease = lease,
        wait = envLong("FENEC_WAIT_MS")?.milliseconds ?: defaults.wait,
        heartbeat = envLong("FENEC_HEARTBEAT_MS")?.milliseconds,
        maxAttempts = envLong("FENEC_MAX_ATTEMPTS")?.toInt() ?: defaults.maxAttempts,
        drainTimeout = envLong("FENEC_DRAIN_MS")?.milliseconds ?: defaults.drainTimeout,
        backoff = { attempts -> (backoffMs * attempts * attempts).milliseconds },
        timeout = timeout,
        keepDone = env("FENEC_KEEP_DONE").let { it != null && it != "0" },
        onEvent = { e: WorkerEvent ->
            line(mapOf("event" to e.type.label, "worker" to e.worker, "id" to e.id, "owner" to e.owner, "attempts" to e.attempts,
                "error" to e.error, "delay_ms" to e.delay?.inWholeMilliseconds, "count" to e.count, "call" to e.call,
                "url" to e.url, "t" to System.currentTimeMillis()))
        },
    )
    // FENEC_SERVERS, when set: the client's servers, comma-separated, the primary first (named in `ready`)
    val servers = (env("FENEC_SERVERS") ?: url).split(',').map { it.trim() }.filter { it.isNotEmpty() }
    val worker = Worker(Fenec.connect(servers, timeout = timeout), queueName, options)

    // SIGTERM: the graceful stop; SIGINT: the hard one. Either ends `running`. Both are in place before `ready`: the
    // driver signals as soon as it sees a job start, and a signal that came before its handler would be the JVM's
    // (an exit without give-backs). A signal the JVM was started with ignored (a shell's background job without job
    // control ignores SIGINT) stays ignored whatever is asked: said at once, rather than never stopping.
    for ((sig, hard) in listOf("TERM" to false, "INT" to true)) {
        val before = Signal.handle(Signal(sig)) { worker.stop(hard = hard) }
        if (before == SignalHandler.SIG_IGN) {
            System.err.println("fault worker $name: SIG$sig is ignored in this process (inherited), so it cannot stop the worker")
            exitProcess(2)
        }
    }
    // `ready` comes first: the worker's own events follow it
    line(mapOf("event" to "ready", "worker" to name, "servers" to worker.db.servers, "t" to System.currentTimeMillis()))
    var failure: Throwable? = null
    val running = CoroutineScope(Dispatchers.Default).launch {
        try {
            worker.run { job -> handle(name, job) }
        } catch (e: Throwable) {
            failure = e
        }
    }
    runBlocking { running.join() }
    val failed = failure
    if (failed != null && failed !is kotlinx.coroutines.CancellationException) {
        System.err.println("fault worker $name: ${failed.message ?: failed}")
        exitProcess(1)
    }
    exitProcess(0)
}
