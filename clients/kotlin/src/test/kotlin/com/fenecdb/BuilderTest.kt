package com.fenecdb

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNotSame
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.time.Instant
import java.time.LocalDateTime
import java.time.OffsetDateTime
import java.util.Date

/** The builder through its typed Kotlin API: what application code writes, beside the shared vectors. */
class BuilderTest {
    private fun refused(message: String, chain: () -> Any?) {
        val e = assertThrows<FenecException> { chain() }
        assertEquals(FenecException.Code.BUILDER, e.code)
        assertEquals(0, e.status)
        assertEquals(message, e.message)
    }

    private fun params(s: Statement) = s.params.map { wireValue(it).toString() }

    @Test
    fun `a base query is immutable and can be shared`() {
        val base = Query.from("tasks").where("queue", "mail")
        val a = base.where("priority", ">", 3).order("priority", "DESC")
        val b = base.limit(2)
        assertNotSame(base, a)
        assertEquals(Statement("get tasks where queue = \$1", listOf("mail")), base.toFenecQL())
        assertEquals(Statement("get tasks where queue = \$1 and priority > \$2 order priority desc", listOf("mail", 3L)), a.toFenecQL())
        assertEquals("get tasks where queue = \$1 limit 2", b.toFenecQL().text)
    }

    @Test
    fun `the claim of the job-queue page, written with Kotlin values`() {
        val s = Query.from("mail_jobs").where(Cond.raw("run_at <= now()")).order("run_at").limit(5)
            .toUpdate(mapOf("owner" to "w9:17", "run_at" to Computed.expr("now() + ?", 60000), "attempts" to Computed.inc(1)),
                returning = listOf("id", "payload", "attempts"))
        assertEquals("set mail_jobs {owner: \$1, run_at: now() + \$2, attempts: coalesce(attempts, 0) + \$3} " +
            "where run_at <= now() order run_at asc limit 5 returning id, payload, attempts", s.text)
        assertEquals(listOf("\"w9:17\"", "60000", "1"), params(s))
    }

    @Test
    fun `ack and fail with require as a named option`() {
        val ack = Query.from("mail_jobs").where("id", 41).where("owner", "w9:17").toDelete(require = 1)
        assertEquals(Statement("del mail_jobs where id = \$1 and owner = \$2 require 1", listOf(41L, "w9:17")), ack)
        val fail = Query.from("mail_jobs").where("id", 41).where("owner", "w9:17").toUpdate(
            mapOf("owner" to null, "error" to "timeout",
                "run_at" to Computed.expr("case when attempts >= ? then null else now() + ? * attempts * attempts end", 5, 1000)),
            require = 1)
        assertEquals("set mail_jobs {owner: \$1, error: \$2, run_at: case when attempts >= \$3 then null else now() + \$4 * attempts * attempts end} " +
            "where id = \$5 and owner = \$6 require 1", fail.text)
        assertEquals(listOf(null, "timeout", 5L, 1000L, 41L, "w9:17"), fail.params)
    }

    @Test
    fun `maps keep their order, operator maps and object conditions`() {
        val s = Query.from("tasks").where(mapOf("state" to "open", "priority" to mapOf("gte" to 2, "lte" to 5))).toFenecQL()
        assertEquals(Statement("get tasks where state = \$1 and priority >= \$2 and priority <= \$3", listOf("open", 2L, 5L)), s)
        val nested = Query.from("tasks").where(Cond.or(Cond.and(mapOf("a" to 1), mapOf("b" to 2)), Cond.not(Cond.or(mapOf("c" to 3), mapOf("d" to 4)))))
        assertEquals("get tasks where (a = \$1 and b = \$2) or not (c = \$3 or d = \$4)", nested.toFenecQL().text)
        val orWhere = Query.from("tasks").where("queue", "mail").where("attempts", "<", 3).orWhere(mapOf("owner" to null))
        assertEquals("get tasks where (queue = \$1 and attempts < \$2) or owner is null", orWhere.toFenecQL().text)
    }

    @Test
    fun `dates go as UTC text to the millisecond, a naive time taken as UTC`() {
        val at = Instant.parse("2025-03-01T08:00:00Z")
        val s = Query.from("tasks")
            .where("a", "<", at)
            .where("b", "<", OffsetDateTime.parse("2025-03-01T10:00:00.5+02:00"))
            .where("c", "<", LocalDateTime.parse("2025-03-01T08:00:00.123"))
            .where("d", "<", Date.from(at))
            .toFenecQL()
        assertEquals(listOf("2025-03-01T08:00:00.000Z", "2025-03-01T08:00:00.500Z", "2025-03-01T08:00:00.123Z", "2025-03-01T08:00:00.000Z"), s.params)
    }

    @Test
    fun `integers stay integers, floats stay floats, a float array is a list`() {
        val s = Query.from("t").where("a", 1).where("b", 1.0).where("c", 7_000_000_000L).where("v", "=", floatArrayOf(0.5f, -0.25f)).toFenecQL()
        assertEquals(listOf("1", "1.0", "7000000000", "[0.5,-0.25]"), params(s))
    }

    @Test
    fun `documents render in their order, several in brackets`() {
        val one = Query.from("mail_jobs").toInsert(mapOf("payload" to mapOf("to" to "kaya@example.com"), "run_at" to Computed.expr("now() + ?", 5000), "attempts" to 0))
        assertEquals("put mail_jobs {payload: \$1, run_at: now() + \$2, attempts: \$3}", one.text)
        assertEquals(listOf("{\"to\":\"kaya@example.com\"}", "5000", "0"), params(one))
        val two = Query.from("mail_jobs").toInsert(listOf(mapOf("a" to 1), mapOf("a" to 2)), require = 2)
        assertEquals(Statement("put mail_jobs [{a: \$1}, {a: \$2}] require 2", listOf(1L, 2L)), two)
    }

    @Test
    fun `refusals are raised at the step that is wrong, with the exact text`() {
        refused("invalid collection name: \"jobs queue\"") { Query.from("jobs queue") }
        refused("invalid field name: \"payload..to\"") { Query.from("tasks").where("payload..to", 1) }
        refused("unknown operator `one of`") { Query.from("tasks").where("bad name", "one of", listOf("a")) }
        refused("`>` cannot be used with null (field: run_at)") { Query.from("tasks").where("run_at", ">", null) }
        refused("`in` does not accept an empty array (field: state)") { Query.from("tasks").where("state", "in", emptyList<String>()) }
        refused("raw(): more `?` placeholders than parameters") { Cond.raw("a = ?") }
        refused("expr(): too many parameters given") { Computed.expr("now()", 1) }
        refused("order direction must be 'asc' or 'desc': up") { Query.from("tasks").order("id", "up") }
        refused("limit must be a non-negative integer: -3") { Query.from("tasks").limit(-3) }
        refused("limit must be a non-negative integer: 9007199254740992") { Query.from("tasks").limit(9007199254740992L) }
        refused("count cannot be used with `order`") { Query.from("tasks").order("id").countText() }
        refused("cannot write an empty document") { Query.from("t").where("id", 1).toUpdate(emptyMap()) }
        refused("inc() reads the row it changes: use it in update (field: attempts)") { Query.from("t").toInsert(mapOf("attempts" to Computed.inc())) }
        refused("inc() takes a number: null") { Computed.inc(Double.NaN) }
        refused("an unfiltered update covers the whole collection; if you mean it, update({ all: true })") { Query.from("t").toUpdate(mapOf("owner" to null)) }
        refused("an unfiltered delete covers the whole collection; if you mean it, delete({ all: true })") { Query.from("t").order("id").toDelete() }
        refused("update cannot be used with `select`") { Query.from("t").select("id").where("id", 1).toUpdate(mapOf("o" to 1)) }
        refused("update takes require as its option: update(..., { require: n })") { Query.from("t").where("id", 1).require(1).toUpdate(mapOf("o" to 1)) }
        refused("returning * answers every field: it takes no other") { Query.from("t").where("id", 1).toUpdate(mapOf("o" to 1), returning = listOf("id", "*")) }
        refused("require takes a count of rows, a whole number from 0 (got -2)") { Query.from("t").where("id", 1).toDelete(require = -2) }
    }

    @Test
    fun `unicode names pass, names with marks too`() {
        assertEquals("get işler select başlık where öncelik = \$1", Query.from("işler").where("öncelik", 1).select("başlık").toFenecQL().text)
        assertEquals("get कार्य", Query.from("कार्य").toFenecQL().text) // Devanagari vowel signs count as letters
        refused("invalid field name: \"a\\nb\"") { Query.from("t").where("a\nb", 1) }
    }

    @Test
    fun `wait, key and token never change the text`() {
        val db = Fenec.connect("http://127.0.0.1:9", "secret").withWait(kotlin.time.Duration.parse("30s")).withIdempotencyKey("k")
        assertEquals(Query.from("jobs").where("id", 1).toDelete(require = 1), db.from("jobs").where("id", 1).toDelete(require = 1))
    }
}
