package com.fenecdb.conformance

import com.fenecdb.Computed
import com.fenecdb.Cond
import com.fenecdb.Fenec
import com.fenecdb.FenecException
import com.fenecdb.FenecRemote
import com.fenecdb.Query
import com.fenecdb.Statement
import kotlinx.coroutines.runBlocking
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.JsonArray
import kotlinx.serialization.json.JsonElement
import kotlinx.serialization.json.JsonNull
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.JsonPrimitive
import kotlinx.serialization.json.booleanOrNull
import kotlinx.serialization.json.longOrNull
import java.io.File
import java.time.OffsetDateTime
import kotlin.time.Duration.Companion.milliseconds

/**
 * The builder-vectors runner (conformance.md Part A). It reads any vectors file in the spec's format, replays each
 * chain on the Kotlin builder (text-only terminals on `Query.from`, endpoints through a client bound to a local
 * [Capture]), and reports one line a case and a tally that never reads as the SDK's summary.
 */
class Vectors(private val out: (String) -> Unit = ::println) {
    var passed = 0; private set
    var failed = 0; private set

    /** A case refused in the runner itself, not by the SDK: malformed, unknown op, unknown encoding. */
    private class Bad(message: String) : Exception(message)

    /** Runs a file; answers false when it could not be read or parsed or held no case (counted as one failure). */
    fun runFile(file: File, only: String?, minimum: Int = 1): Boolean {
        val cases = try {
            Json.parseToJsonElement(file.readText()) as? JsonArray ?: throw Bad("the file is not a JSON array")
        } catch (e: Exception) {
            out("FAIL vectors file ${file}: cannot be read: ${e.message}")
            failed++
            return false
        }
        if (cases.size < minimum) {
            out("FAIL vectors file ${file}: ${cases.size} cases, fewer than the $minimum expected")
            failed++
            return false
        }
        Capture().use { capture ->
            val db = Fenec.connect(capture.url)
            for (c in cases) {
                val case = c as? JsonObject
                val name = (case?.get("name") as? JsonPrimitive)?.content ?: "(unnamed)"
                if (only != null && !name.contains(only)) continue
                val why = try { runCase(case ?: throw Bad("malformed case"), db, capture) } catch (e: Bad) { e.message }
                if (why == null) { passed++; out("ok $name") } else { failed++; out("FAIL $name: $why") }
            }
        }
        out("vectors ${file}: $passed ok, $failed FAIL, 0 checked-elsewhere")
        return failed == 0
    }

    /** Null when the case passes, else `<expected> / <got>`. */
    private fun runCase(case: JsonObject, db: FenecRemote, capture: Capture): String? {
        val steps = (case["steps"] as? JsonArray)?.map { it as? JsonObject ?: throw Bad("malformed case") } ?: throw Bad("malformed case")
        val expectedError = (case["error"] as? JsonPrimitive)?.content
        val expectedText = (case["text"] as? JsonPrimitive)?.content
        val expectedParams = case["params"] as? JsonArray ?: JsonArray(emptyList())
        val headers = (case["headers"] as? JsonObject)?.mapValues { (it.value as JsonPrimitive).content }
        val expected = expectedError?.let { "error `$it`" } ?: "`$expectedText` $expectedParams"

        val got: Statement
        var sentHeaders: Map<String, String> = emptyMap()
        try {
            val (statement, h) = replay(steps, db, capture)
            got = statement
            sentHeaders = h
        } catch (e: FenecException) {
            if (e.code != FenecException.Code.BUILDER) return "$expected / ${e.code} error `${e.message}`"
            return if (expectedError == e.message) null else "$expected / error `${e.message}`"
        } catch (e: Bad) {
            throw e
        } catch (e: Exception) {
            return "$expected / ${e::class.simpleName}: ${e.message}"
        }
        val gotParams = Json.parseToJsonElement(Json.encodeToString(JsonArray.serializer(), JsonArray(got.params.map { wire(it) })))
        val shown = "`${got.text}` $gotParams"
        if (expectedError != null) return "$expected / $shown"
        if (got.text != expectedText || !same(expectedParams, gotParams)) return "$expected / $shown"
        if (headers != null) {
            for ((k, v) in headers) {
                val sent = sentHeaders[k.lowercase()]
                if (sent != v) return "header $k: $v / ${sent ?: "(none)"}"
            }
        }
        return null
    }

    private fun wire(v: Any?): JsonElement = com.fenecdb.wireValue(v)

    private val textOnly = setOf("toFenecQL", "toInsert", "toUpdate", "toDelete")
    private val endpoints = setOf("rows", "first", "count", "insert", "update", "delete")

    /** The statement the chain makes, and for an endpoint the headers it was sent with. */
    private fun replay(steps: List<JsonObject>, db: FenecRemote, capture: Capture): Pair<Statement, Map<String, String>> {
        fun op(s: JsonObject) = (s["op"] as? JsonPrimitive)?.content ?: throw Bad("malformed case")
        fun args(s: JsonObject): List<JsonElement> = (s["args"] as? JsonArray) ?: emptyList()
        if (steps.size < 2 || op(steps[0]) != "from") throw Bad("malformed case")
        val last = steps.last()
        val terminal = op(last)
        for (s in steps.dropLast(1)) if (op(s) in textOnly || op(s) in endpoints) throw Bad("malformed case")
        if (terminal !in textOnly && terminal !in endpoints) {
            if (terminal in setOf("from", "select", "where", "orWhere", "order", "limit", "offset", "require")) throw Bad("malformed case")
            throw Bad("unsupported op $terminal")
        }
        val endpoint = terminal in endpoints
        val options = args(last).lastOrNull() as? JsonObject
        val collection = args(steps[0]).firstOrNull()?.let { decode(it) }
        var q: Query = if (!endpoint) Query.from(collection as? String ?: "$collection") else {
            val waitMs = options?.get("wait")?.let { (it as JsonPrimitive).longOrNull }
            val client = if (waitMs != null && terminal in setOf("update", "delete")) db.withWait(waitMs.milliseconds) else db
            client.from(collection as? String ?: "$collection")
        }
        for (s in steps.subList(1, steps.size - 1)) {
            val a = args(s).map { decode(it) }
            q = when (op(s)) {
                "select" -> com.fenecdb.selectOf(q, a)
                "where" -> com.fenecdb.whereOf(q, a, or = false)
                "orWhere" -> com.fenecdb.whereOf(q, a, or = true)
                "order" -> com.fenecdb.orderOf(q, a.getOrNull(0), a.getOrElse(1) { "asc" })
                "limit" -> com.fenecdb.limitOf(q, a.getOrNull(0))
                "offset" -> com.fenecdb.offsetOf(q, a.getOrNull(0))
                "require" -> com.fenecdb.requireOf(q, a.getOrNull(0))
                else -> throw Bad("unsupported op ${op(s)}")
            }
        }
        val a = args(last).map { decode(it) }
        @Suppress("UNCHECKED_CAST")
        val opts = (if (terminal in setOf("toDelete", "delete")) a.getOrNull(0) else a.getOrNull(1)) as? Map<String, Any?> ?: emptyMap()
        val all = opts["all"] == true
        val require = opts["require"]
        val returning = opts["returning"]
        if (!endpoint) {
            val st = when (terminal) {
                "toFenecQL" -> q.toFenecQL()
                "toInsert" -> com.fenecdb.insertTextOf(q, a.getOrNull(0), require)
                "toUpdate" -> com.fenecdb.updateTextOf(q, a.getOrNull(0), all, require, returning)
                else -> com.fenecdb.deleteTextOf(q, all, require, returning)
            }
            return st to emptyMap()
        }
        capture.sent.clear()
        runBlocking {
            when (terminal) {
                "rows" -> q.rows()
                "first" -> q.first()
                "count" -> q.count()
                "insert" -> com.fenecdb.insertOf(q, a.getOrNull(0), require)
                "update" -> com.fenecdb.updateOf(q, a.getOrNull(0), all, require, returning)
                else -> com.fenecdb.deleteOf(q, all, require, returning)
            }
        }
        if (capture.sent.size != 1) throw Bad("expected one statement sent / ${capture.sent.size} sent")
        val sent = capture.sent[0]
        val body = Json.parseToJsonElement(sent.body) as JsonObject
        val params = (body["params"] as? JsonArray) ?: JsonArray(emptyList())
        return Statement((body["query"] as JsonPrimitive).content, params.map { it }) to sent.headers
    }

    /** A.3: JSON arguments to Kotlin values; a one-key `$` object is an encoding. */
    fun decode(e: JsonElement): Any? = when (e) {
        is JsonNull -> null
        is JsonPrimitive -> when {
            e.isString -> e.content
            e.booleanOrNull != null -> e.booleanOrNull
            e.content.any { it == '.' || it == 'e' || it == 'E' } -> e.content.toDouble()
            else -> e.content.toLongOrNull() ?: e.content.toBigInteger()
        }
        is JsonArray -> e.map { decode(it) }
        is JsonObject -> {
            val key = e.keys.singleOrNull()
            if (key != null && key.startsWith("$")) {
                val v = e.getValue(key)
                fun list(): List<Any?> = (v as? JsonArray)?.map { decode(it) } ?: throw Bad("malformed case")
                when (key) {
                    "\$or" -> Cond.or(*list().toTypedArray())
                    "\$and" -> Cond.and(*list().toTypedArray())
                    "\$not" -> Cond.not(decode(v))
                    "\$raw" -> list().let { Cond.raw(it[0] as String, *it.drop(1).toTypedArray()) }
                    "\$expr" -> list().let { Computed.expr(it[0] as String, *it.drop(1).toTypedArray()) }
                    "\$inc" -> com.fenecdb.incOf(decode(v))
                    "\$date" -> OffsetDateTime.parse((v as JsonPrimitive).content).toInstant()
                    "\$f32" -> FloatArray((v as JsonArray).size) { (v[it] as JsonPrimitive).content.toFloat() }
                    else -> throw Bad("unknown encoding $key")
                }
            } else {
                e.entries.associateTo(LinkedHashMap<String, Any?>()) { (k, x) -> k to decode(x) }
            }
        }
    }

    /** A.5: same JSON types at each place, integers kept apart from floats, maps as sets of pairs. */
    private fun same(a: JsonElement, b: JsonElement): Boolean = when {
        a is JsonNull || b is JsonNull -> a is JsonNull && b is JsonNull
        a is JsonArray && b is JsonArray -> a.size == b.size && a.indices.all { same(a[it], b[it]) }
        a is JsonObject && b is JsonObject -> a.keys == b.keys && a.keys.all { same(a.getValue(it), b.getValue(it)) }
        a is JsonPrimitive && b is JsonPrimitive -> when {
            a.isString || b.isString -> a.isString && b.isString && a.content == b.content
            a.booleanOrNull != null || b.booleanOrNull != null -> a.booleanOrNull == b.booleanOrNull
            else -> {
                val aInt = a.content.none { it == '.' || it == 'e' || it == 'E' }
                val bInt = b.content.none { it == '.' || it == 'e' || it == 'E' }
                if (aInt) bInt && a.content.toBigInteger() == b.content.toBigInteger()
                else a.content.toDouble() == b.content.toDouble()
            }
        }
        else -> false
    }
}
