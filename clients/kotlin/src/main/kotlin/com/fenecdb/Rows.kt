package com.fenecdb

import java.time.Instant
import java.time.OffsetDateTime

/**
 * One answered row: a read-only map of plain values (String, Long, Double, Boolean, null, List, Map), with typed
 * getters. Timestamps arrive as ISO-8601 text; [instant] reads them.
 */
class Row(private val fields: Map<String, Any?>) : Map<String, Any?> by fields {
    fun string(name: String): String? = fields[name]?.toString()
    fun long(name: String): Long? = (fields[name] as? Number)?.toLong()
    fun int(name: String): Int? = (fields[name] as? Number)?.toInt()
    fun double(name: String): Double? = (fields[name] as? Number)?.toDouble()
    fun boolean(name: String): Boolean? = fields[name] as? Boolean

    @Suppress("UNCHECKED_CAST")
    fun map(name: String): Map<String, Any?>? = fields[name] as? Map<String, Any?>
    fun list(name: String): List<Any?>? = fields[name] as? List<Any?>
    fun instant(name: String): Instant? = (fields[name] as? String)?.let { OffsetDateTime.parse(it).toInstant() }

    override fun equals(other: Any?): Boolean = fields == other
    override fun hashCode(): Int = fields.hashCode()
    override fun toString(): String = fields.toString()
}

/** The rows of an answer, in the order the server answered them. */
class Rows(private val rows: List<Row>) : List<Row> by rows {
    override fun equals(other: Any?): Boolean = rows == other
    override fun hashCode(): Int = rows.hashCode()
    override fun toString(): String = rows.toString()
}

/**
 * What one raw statement answered: [rows] for a read or a write with `returning`, [affected] for a write without,
 * [message] for a schema statement. [seq] is the `Fenec-Seq` a write left; [replayed] tells that the answer is the one
 * kept for an Idempotency-Key.
 */
data class Answer(
    val rows: Rows? = null,
    val affected: Long? = null,
    val message: String? = null,
    val seq: Long? = null,
    val replayed: Boolean = false,
)

/** The answer of a batch: one [Answer] a statement, in order (their seq and replayed are the batch's). */
data class BatchAnswer(val results: List<Answer>, val seq: Long?, val replayed: Boolean)
