package com.fenecdb

import com.fenecdb.Scripted.Reply
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.JsonArray
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.JsonPrimitive
import kotlinx.serialization.json.boolean
import kotlinx.serialization.json.double
import kotlinx.serialization.json.jsonArray
import kotlinx.serialization.json.jsonObject
import kotlinx.serialization.json.jsonPrimitive
import kotlinx.serialization.json.long
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.io.File
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicInteger
import kotlin.reflect.KParameter
import kotlin.reflect.KVisibility
import kotlin.reflect.full.callSuspend
import kotlin.reflect.full.memberProperties
import kotlin.reflect.full.primaryConstructor
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * The Kotlin worker against `conformance/worker-contract.json`, read here and checked mechanically by reflection: the
 * options' names, types and defaults (an option renamed, missing or added fails), the off switch, the constructor's
 * shape, the methods, the event types and each type's fields, and the enqueue statement.
 */
class ContractTest {
    private val contract = Json.parseToJsonElement(File(LiveServer.root, "conformance/worker-contract.json").readText()).jsonObject
    private val options = contract["options"]!!.jsonArray.map { it.jsonObject }
    private fun JsonObject.kotlin(key: String = "names") = this[key]!!.jsonObject["kotlin"]!!.jsonPrimitive.content
    private fun name(o: JsonObject) = o.kotlin()

    @Test
    fun `the options are exactly the contract's, by name`() {
        val params = WorkerOptions::class.primaryConstructor!!.parameters.map { it.name!! }.toSet()
        val deprecated = contract["deprecated"]!!.jsonObject["kotlin"]!!.jsonObject.keys
        assertEquals(options.map(::name).toSet() + deprecated, params)
        assertTrue(WorkerOptions::class.primaryConstructor!!.parameters.all { it.isOptional }, "every option has a default")
    }

    @Test
    fun `each option has the contract's type, default and least value`() {
        val defaults = WorkerOptions()
        val props = WorkerOptions::class.memberProperties.associateBy { it.name }
        for (o in options) {
            val name = name(o)
            val value = props[name]!!.get(defaults)
            val type = o["type"]!!.jsonPrimitive.content
            when {
                type == "duration" -> {
                    assertEquals(Duration::class, props[name]!!.returnType.classifier, name)
                    if ("default_ms" in o) assertEquals(o["default_ms"]!!.jsonPrimitive.long.milliseconds, value, name)
                }
                type == "count" -> assertEquals(o["default"]!!.jsonPrimitive.long, (value as Int).toLong(), name)
                type == "boolean" -> assertEquals(o["default"]!!.jsonPrimitive.boolean, value, name)
            }
            when (val min = (o["min"] as? JsonPrimitive)?.content) {
                null -> {}
                "1" -> assertThrows<IllegalArgumentException>(name) { make(name, 0) }
                "0" -> { make(name, Duration.ZERO); assertThrows<IllegalArgumentException>(name) { make(name, (-1).milliseconds) } }
                "more than 0" -> assertThrows<IllegalArgumentException>(name) { make(name, Duration.ZERO) }
                "retry min" -> assertThrows<IllegalArgumentException>(name) { make(name, defaults.retryMin - 1.milliseconds) }
                else -> throw AssertionError("a least value this test does not know: $min ($name)")
            }
        }
        assertTrue(Regex("w-[0-9a-f]{8}").matches(defaults.name), defaults.name)
        assertEquals(listOf(1.seconds, 4.seconds, 9.seconds), (1L..3L).map { defaults.backoff(it) }) // attempts² seconds
        assertNull(defaults.onEvent)
        assertEquals(defaults.lease / 3, defaults.beat) // heartbeat: lease / 3
    }

    /** WorkerOptions with one option set by its contract name. */
    private fun make(option: String, value: Any): WorkerOptions {
        val ctor = WorkerOptions::class.primaryConstructor!!
        try {
            return ctor.callBy(mapOf(ctor.parameters.single { it.name == option } to value))
        } catch (e: java.lang.reflect.InvocationTargetException) {
            throw e.targetException // what the constructor's own check threw
        }
    }

    @Test
    fun `the heartbeat's unset and off values are the contract's`() {
        val heartbeat = options.single { it["option"]!!.jsonPrimitive.content == "heartbeat" }
        assertEquals("null", heartbeat.kotlin("unset"))
        assertNull(WorkerOptions().heartbeat)
        assertEquals("heartbeat = Duration.ZERO", heartbeat.kotlin("off"))
        assertEquals(Duration.ZERO, WorkerOptions(heartbeat = Duration.ZERO).beat)
    }

    @Test
    fun `the constructor takes a client, the queue's name and the options - and nothing else`() {
        assertEquals("Worker(db: Client, queue: String, options: WorkerOptions = WorkerOptions())", contract["constructor"]!!.jsonObject["kotlin"]!!.jsonPrimitive.content)
        val public = Worker::class.constructors.filter { it.visibility == KVisibility.PUBLIC }
        assertEquals(1, public.size, "one public constructor: ${public.map { it.parameters.map { p -> p.name } }}")
        val params = public.single().parameters
        assertEquals(listOf("db", "queue", "options"), params.map { it.name })
        assertEquals(listOf(FenecRemote::class, String::class, WorkerOptions::class), params.map { it.type.classifier })
        assertEquals(listOf(false, false, true), params.map { it.isOptional })
        assertFalse(Worker::class.constructors.any { c -> c.parameters.any { it.type.classifier == JobQueue::class } }, "the removed Worker(JobQueue, options)")
    }

    @Test
    fun `the methods are the contract's - run and enqueue suspend, stop takes hard`() {
        val methods = contract["method_names"]!!.jsonObject["kotlin"]!!.jsonArray.map { it.jsonPrimitive.content }
        val members = Worker::class.members.filter { it.visibility == KVisibility.PUBLIC }
        for (m in methods) assertTrue(members.any { it.name == m }, "no public $m")
        val run = members.single { it.name == "run" }
        assertTrue(run.isSuspend)
        assertEquals(listOf("handler"), run.parameters.filter { it.kind == KParameter.Kind.VALUE }.map { it.name })
        val stop = members.single { it.name == "stop" }
        assertEquals(listOf("hard" to Boolean::class), stop.parameters.filter { it.kind == KParameter.Kind.VALUE }.map { it.name to it.type.classifier })
        assertTrue(stop.parameters.last().isOptional)
        val enqueue = members.single { it.name == "enqueue" }
        assertTrue(enqueue.isSuspend)
        assertEquals(listOf("payload", "delay"), enqueue.parameters.filter { it.kind == KParameter.Kind.VALUE }.map { it.name })
        assertEquals(Duration::class, enqueue.parameters.last().type.classifier)
        assertTrue(enqueue.parameters.last().isOptional)
        assertEquals(Long::class, enqueue.returnType.classifier)
    }

    private val fields = contract["events"]!!.jsonObject["fields"]!!.jsonObject.mapValues { (_, f) ->
        val o = f.jsonObject
        (o["names"] as? JsonObject)?.get("kotlin")?.jsonPrimitive?.content ?: o["kotlin"]!!.jsonPrimitive.content
    }
    private val types = contract["events"]!!.jsonObject["types"]!!.jsonObject
    private val typeNames = contract["events"]!!.jsonObject["type_names"]!!.jsonObject["kotlin"]!!.jsonObject.mapValues { it.value.jsonPrimitive.content }

    @Test
    fun `the event has the contract's fields and types, and no other`() {
        assertEquals(fields.values.toSet(), WorkerEvent::class.primaryConstructor!!.parameters.map { it.name!! }.toSet())
        assertEquals(typeNames.values.toSet(), WorkerEvent.Type.entries.map { it.name }.toSet())
        assertEquals(typeNames.keys, types.keys)
        for ((shared, kotlin) in typeNames) assertEquals(shared, WorkerEvent.Type.valueOf(kotlin).label)
    }

    @Test
    fun `each event a worker emits carries exactly its type's fields`() = runBlocking(Dispatchers.Default) {
        // a batch of five: 3 is past max attempts (dead unrun); 1 is acked after its first ack is cut (retry, done);
        // 2 throws (failed); 4's ack meets a 412 (lost), and its handler stops the worker, so 5 is given back; the
        // worker is given a replica alone, whose 403 names the primary (primary)
        val batch = """[{"id":1,"payload":{},"attempts":1},{"id":2,"payload":{},"attempts":1},{"id":3,"payload":{},"attempts":9},
            {"id":4,"payload":{},"attempts":1},{"id":5,"payload":{},"attempts":1}]"""
        val acks = AtomicInteger()
        val seen = ConcurrentLinkedQueue<WorkerEvent>()
        Scripted { key, _ ->
            when {
                key!!.startsWith("claim:") -> Scripted.ok(batch)
                key.startsWith("ack:") && key.endsWith(":1") -> if (acks.incrementAndGet() == 1) Reply.Cut else Scripted.affected
                key.startsWith("ack:") && key.endsWith(":4") -> Reply.Answer(412, """{"error":"require 1: 0 rows matched"}""")
                else -> Scripted.affected
            }
        }.use { server ->
            val replica = Scripted { _, _ -> Reply.Answer(403, """{"error":"a replica"}""", mapOf("Fenec-Primary" to server.url)) }
            lateinit var worker: Worker
            worker = Worker(Fenec.connect(listOf(replica.url)), "jobs", WorkerOptions(name = "w7", batch = 5, wait = Duration.ZERO,
                retryMin = 1.milliseconds, retryMax = 2.milliseconds, onEvent = { seen.add(it) }))
            replica.use {
                withTimeout(45_000) {
                    worker.run { job ->
                        when (job.id) {
                            2L -> throw IllegalStateException("smtp timeout")
                            4L -> worker.stop()
                        }
                    }
                }
            }
        }
        val byType = seen.groupBy { it.type }
        assertEquals(WorkerEvent.Type.entries.toSet(), byType.keys, "every type was seen: ${seen.map { it.type }}")
        assertEquals(WorkerEvent.Type.STOPPED, seen.last().type)
        val set = WorkerEvent::class.memberProperties.filter { it.name != "type" }
        for (e in seen) {
            val shared = e.type.label
            var wanted = types[shared]!!.jsonObject["fields"]!!.jsonArray.map { fields[it.jsonPrimitive.content]!! }.toSet()
            if (e.type == WorkerEvent.Type.RETRY && e.id != null) {
                wanted = wanted + types[shared]!!.jsonObject["job_fields_when_of_a_job"]!!.jsonArray.map { fields[it.jsonPrimitive.content]!! }
            }
            assertEquals(wanted, set.filter { it.get(e) != null }.map { it.name }.toSet(), "$e")
        }
        assertEquals("ack", byType[WorkerEvent.Type.LOST]!!.single().call)
        assertEquals("smtp timeout", byType[WorkerEvent.Type.FAILED]!!.single().error)
        assertEquals(listOf(1L), byType[WorkerEvent.Type.DONE]!!.map { it.id })
        assertEquals(listOf(5L), byType[WorkerEvent.Type.RELEASED]!!.map { it.id })
        assertEquals(5, byType[WorkerEvent.Type.CLAIMED]!!.single().count)
        assertEquals(1, byType[WorkerEvent.Type.PRIMARY]!!.size)
    }

    @Test
    fun `enqueue sends the contract's statement and answers the count written`() = runBlocking {
        val enqueue = contract["enqueue"]!!.jsonObject
        Scripted { _, _ -> Scripted.affected }.use { server ->
            val worker = Worker(Fenec.connect(server.url), "mail")
            assertEquals(1L, worker.enqueue(mapOf("to" to "ada@example.com"), delay = 1500.milliseconds))
            val body = Json.parseToJsonElement(server.seen.single().body).jsonObject
            assertEquals(enqueue["statement"]!!.jsonPrimitive.content.replace("<queue>", "mail"), body["query"]!!.jsonPrimitive.content)
            val params = body["params"] as JsonArray
            assertEquals("""{"to":"ada@example.com"}""", params[0].toString())
            assertEquals(1500.0, params[1].jsonPrimitive.double)
            assertEquals(0.0, params[2].jsonPrimitive.double)
            assertNotNull(enqueue["params"])
        }
    }
}
