package com.fenecdb

import kotlinx.serialization.json.JsonArray
import kotlinx.serialization.json.JsonElement
import kotlinx.serialization.json.JsonNull
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.JsonPrimitive
import java.math.BigDecimal
import java.math.BigInteger
import java.time.Instant
import java.time.LocalDate
import java.time.LocalDateTime
import java.time.OffsetDateTime
import java.time.ZoneOffset
import java.time.ZonedDateTime
import java.time.format.DateTimeFormatter
import java.util.Date

/**
 * Values between Kotlin and the wire (client spec R14).
 *
 * A parameter is first made plain ([plain]): a date or time becomes its ISO-8601 text in UTC to the
 * millisecond, a typed number array a list. Then [toJson] writes it; integers stay integers (`1`, never `1.0`).
 * Answers come back through [fromJson]: a JSON number without a fraction or exponent is a Long.
 */
internal object Values {
    private val ISO_MS: DateTimeFormatter = DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC)

    fun isoUtc(instant: Instant): String = ISO_MS.format(instant)

    /** The value as the builder keeps it in a statement's parameters. */
    fun plain(v: Any?): Any? = when (v) {
        null, is String, is Boolean, is Long, is Double, is JsonElement -> v
        is Int -> v.toLong()
        is Short -> v.toLong()
        is Byte -> v.toLong()
        is Float -> v.toDouble()
        is BigInteger, is BigDecimal -> v
        is Instant -> isoUtc(v)
        is OffsetDateTime -> isoUtc(v.toInstant())
        is ZonedDateTime -> isoUtc(v.toInstant())
        is LocalDateTime -> isoUtc(v.toInstant(ZoneOffset.UTC)) // a naive time is taken as UTC
        is LocalDate -> isoUtc(v.atStartOfDay().toInstant(ZoneOffset.UTC))
        is Date -> isoUtc(v.toInstant())
        is FloatArray -> v.map { it.toDouble() }
        is DoubleArray -> v.toList()
        is IntArray -> v.map { it.toLong() }
        is LongArray -> v.toList()
        is Array<*> -> v.map { plain(it) }
        is Row -> v.toMap().mapValuesTo(LinkedHashMap()) { plain(it.value) }
        is Map<*, *> -> v.entries.associateTo(LinkedHashMap<String, Any?>()) { (k, x) -> k.toString() to plain(x) }
        is Iterable<*> -> v.map { plain(it) }
        is Computed -> throw FenecException.builder("a computed value goes only directly on a field of a document")
        is Cond -> throw FenecException.builder("a condition is not a value")
        is Number -> v.toDouble()
        else -> throw FenecException.builder("cannot send a value of type ${v::class.qualifiedName}")
    }

    fun toJson(v: Any?): JsonElement = when (val p = plain(v)) {
        null -> JsonNull
        is JsonElement -> p
        is String -> JsonPrimitive(p)
        is Boolean -> JsonPrimitive(p)
        is Long -> JsonPrimitive(p)
        is Double -> {
            if (!p.isFinite()) throw FenecException.builder("a number sent as JSON must be finite (got $p)")
            JsonPrimitive(p)
        }
        is BigInteger -> JsonPrimitive(p)
        is BigDecimal -> JsonPrimitive(p)
        is Map<*, *> -> JsonObject(p.entries.associateTo(LinkedHashMap()) { (k, x) -> k.toString() to toJson(x) })
        is List<*> -> JsonArray(p.map { toJson(it) })
        else -> throw FenecException.builder("cannot send a value of type ${p::class.qualifiedName}")
    }

    fun fromJson(e: JsonElement): Any? = when (e) {
        is JsonNull -> null
        is JsonPrimitive -> when {
            e.isString -> e.content
            e.content == "true" -> true
            e.content == "false" -> false
            e.content.any { it == '.' || it == 'e' || it == 'E' } -> e.content.toDouble()
            else -> e.content.toLongOrNull() ?: BigInteger(e.content)
        }
        is JsonArray -> e.map { fromJson(it) }
        is JsonObject -> e.entries.associateTo(LinkedHashMap<String, Any?>()) { (k, x) -> k to fromJson(x) }
    }

    /** A value as JSON text, as JavaScript's JSON.stringify writes it (non-finite numbers are `null`). */
    fun jsonText(v: Any?): String = when (v) {
        is Double -> if (v.isFinite()) numberText(v) else "null"
        is Float -> if (v.isFinite()) numberText(v.toDouble()) else "null"
        else -> try { toJson(v).toString() } catch (e: FenecException) { v.toString() }
    }

    /** A value as JavaScript's String(v) writes it, for messages that quote what was given. */
    fun text(v: Any?): String = when (v) {
        null -> "null"
        is Double -> numberText(v)
        is Float -> numberText(v.toDouble())
        else -> v.toString()
    }

    private fun numberText(d: Double): String = when {
        d.isNaN() -> "NaN"
        d.isInfinite() -> if (d > 0) "Infinity" else "-Infinity"
        d == Math.rint(d) && Math.abs(d) < 1e21 -> BigDecimal(d).toBigInteger().toString()
        else -> d.toString()
    }

    /**
     * A whole number from 0 to 2^53-1, or null: the literals of limit, offset and require. A Double with no fraction
     * counts, as in every language whose JSON has one kind of number.
     */
    fun wholeCount(v: Any?): Long? {
        val n: Long = when (v) {
            is Long -> v
            is Int -> v.toLong()
            is Short -> v.toLong()
            is Byte -> v.toLong()
            is Double -> if (v.isFinite() && v == Math.rint(v) && Math.abs(v) <= MAX_SAFE) v.toLong() else return null
            is Float -> return wholeCount(v.toDouble())
            is BigInteger -> if (v.bitLength() < 63) v.toLong() else return null
            else -> return null
        }
        return if (n in 0..MAX_SAFE) n else null
    }

    const val MAX_SAFE: Long = 9007199254740991L // 2^53 - 1
}
