package com.fenecdb

import kotlinx.coroutines.runBlocking

/**
 * The immutable query builder (client spec §2, text rules §5). Each step hands back a new query and leaves this one
 * untouched, so one base query may be shared by many coroutines. A step that is wrong throws [FenecException] with
 * code BUILDER at once; nothing is sent.
 *
 * Started from a client (`db.from(c)`) it can run: rows, first, count, insert, update(Returning), delete(Returning).
 * Started unbound (`Query.from(c)`) it only writes text: toFenecQL, toInsert, toUpdate, toDelete.
 */
class Query private constructor(
    val collection: String,
    private val remote: FenecRemote?,
    private val fields: List<String>?,
    private val cond: Node?,
    private val orders: List<String>,
    private val limitN: Long?,
    private val offsetN: Long?,
    private val readRequire: Long?,
) {
    companion object {
        /** An unbound query, for text only. */
        @JvmStatic
        fun from(collection: String): Query = Query(Names.collection(collection), null, null, null, emptyList(), null, null, null)

        internal fun bound(collection: String, remote: FenecRemote): Query =
            Query(Names.collection(collection), remote, null, null, emptyList(), null, null, null)
    }

    private fun copy(
        fields: List<String>? = this.fields, cond: Node? = this.cond, orders: List<String> = this.orders,
        limitN: Long? = this.limitN, offsetN: Long? = this.offsetN, readRequire: Long? = this.readRequire,
    ) = Query(collection, remote, fields, cond, orders, limitN, offsetN, readRequire)

    // ---- conditions (R5-R9) ----

    /** `field op value`; the operator is a symbol or its word (`gte`, `contains`, `in`, ...). */
    fun where(field: String, op: String, value: Any?): Query = and(Node.compare(field, op, value))

    /** `field = value`, or, when [value] is a map, the field's operator map (`mapOf("gte" to 2, "lte" to 5)`). */
    fun where(field: String, value: Any?): Query = and(Node.spec(field, value))

    /** An object condition: each field's value, null or operator map, in the map's order. */
    fun where(fields: Map<String, Any?>): Query = and(Node.fields(fields))

    fun where(cond: Cond): Query = and(cond.node)

    /** Joins everything conditioned so far with `or` to the new condition; on a query with none, a where. */
    fun orWhere(field: String, op: String, value: Any?): Query = or(Node.compare(field, op, value))
    fun orWhere(field: String, value: Any?): Query = or(Node.spec(field, value))
    fun orWhere(fields: Map<String, Any?>): Query = or(Node.fields(fields))
    fun orWhere(cond: Cond): Query = or(cond.node)

    internal fun whereAny(cond: Any?): Query = and(Node.of(cond))
    internal fun orWhereAny(cond: Any?): Query = or(Node.of(cond))
    internal fun whereSpec(field: Any?, spec: Any?): Query = and(Node.spec(field, spec))
    internal fun orWhereSpec(field: Any?, spec: Any?): Query = or(Node.spec(field, spec))
    internal fun whereOp(field: Any?, op: Any?, value: Any?): Query = and(Node.compare(field, op, value))
    internal fun orWhereOp(field: Any?, op: Any?, value: Any?): Query = or(Node.compare(field, op, value))

    private fun and(n: Node?): Query = if (n == null) this else copy(cond = Node.junction(false, listOf(cond, n)))
    private fun or(n: Node?): Query = when {
        n == null -> this
        cond == null -> copy(cond = n)
        else -> copy(cond = Node.Junction(true, listOf(cond, n)))
    }

    // ---- clauses (R4, R11-R13) ----

    /** The fields answered; none, or `*` anywhere, means every field. A later select replaces an earlier one. */
    fun select(vararg fields: String): Query = selectAny(fields.toList())

    internal fun selectAny(list: List<Any?>): Query {
        val checked = list.map { if (it == "*") "*" else Names.field(it) }
        return copy(fields = if (checked.isEmpty() || "*" in checked) null else checked)
    }

    /** Adds a sort key; the direction is `asc` or `desc`, in any case. */
    @JvmOverloads
    fun order(field: String, direction: String = "asc"): Query = orderAny(field, direction)

    internal fun orderAny(field: Any?, direction: Any?): Query {
        val f = Names.field(field)
        val d = (direction as? String)?.lowercase()
        if (d != "asc" && d != "desc") throw FenecException.builder("order direction must be 'asc' or 'desc': ${Values.text(direction)}")
        return copy(orders = orders + "$f $d")
    }

    fun limit(n: Long): Query = limitAny(n)
    fun limit(n: Int): Query = limitAny(n)
    fun offset(n: Long): Query = offsetAny(n)
    fun offset(n: Int): Query = offsetAny(n)

    internal fun limitAny(n: Any?): Query =
        copy(limitN = Values.wholeCount(n) ?: throw FenecException.builder("limit must be a non-negative integer: ${Values.text(n)}"))

    internal fun offsetAny(n: Any?): Query =
        copy(offsetN = Values.wholeCount(n) ?: throw FenecException.builder("offset must be a non-negative integer: ${Values.text(n)}"))

    /** `require n` on a read: the read is refused (412) unless it answers exactly n rows. */
    fun require(n: Long): Query = requireAny(n)
    fun require(n: Int): Query = requireAny(n)
    internal fun requireAny(n: Any?): Query = copy(readRequire = requireCount(n))

    // ---- text-only endings ----

    fun toFenecQL(): Statement = readText(limitN, count = false)

    @JvmOverloads
    fun toInsert(docs: Any, require: Long? = null): Statement = insertText(docs, require)

    @JvmOverloads
    fun toUpdate(patch: Map<String, Any?>, all: Boolean = false, require: Long? = null, returning: List<String>? = null): Statement =
        updateText(patch, all, require, returning)

    @JvmOverloads
    fun toDelete(all: Boolean = false, require: Long? = null, returning: List<String>? = null): Statement =
        deleteText(all, require, returning)

    internal fun firstText(): Statement = readText(1, count = false)

    internal fun countText(): Statement {
        val held = when {
            orders.isNotEmpty() -> "order"
            limitN != null -> "limit"
            offsetN != null -> "offset"
            fields != null -> "select"
            readRequire != null -> "require"
            else -> null
        }
        if (held != null) throw FenecException.builder("count cannot be used with `$held`")
        return readText(null, count = true)
    }

    private fun readText(limit: Long?, count: Boolean): Statement {
        val out = Render()
        val b = StringBuilder("get ").append(collection)
        if (fields != null) b.append(" select ").append(fields.joinToString(", "))
        cond?.let { b.append(" where ").append(it.render(out)) }
        if (orders.isNotEmpty()) b.append(" order ").append(orders.joinToString(", "))
        if (limit != null) b.append(" limit ").append(limit)
        if (offsetN != null && offsetN != 0L) b.append(" offset ").append(offsetN)
        if (readRequire != null) b.append(" require ").append(readRequire)
        if (count) b.append(" count")
        return Statement(b.toString(), out.params)
    }

    internal fun insertText(docs: Any?, require: Any?): Statement {
        checkWrite("insert")
        val list: List<Any?> = when (docs) {
            is Map<*, *> -> listOf(docs)
            is List<*> -> docs
            is Array<*> -> docs.toList()
            else -> throw FenecException.builder("insert takes a document or a list of documents (got ${Values.jsonText(docs)})")
        }
        if (list.isEmpty()) throw FenecException.builder("cannot write an empty document list")
        val out = Render()
        val rendered = list.map { doc(it, out, insert = true) }
        val req = require?.let { requireCount(it) }
        val b = StringBuilder("put ").append(collection).append(' ')
        if (rendered.size == 1) b.append(rendered[0]) else b.append(rendered.joinToString(", ", "[", "]"))
        if (req != null) b.append(" require ").append(req)
        return Statement(b.toString(), out.params)
    }

    internal fun updateText(patch: Any?, all: Boolean, require: Any?, returning: Any?): Statement {
        checkWrite("update")
        checkFiltered("update", all)
        val out = Render()
        val b = StringBuilder("set ").append(collection).append(' ').append(doc(patch, out, insert = false))
        return Statement(writeTail(b, out, returning, require), out.params)
    }

    internal fun deleteText(all: Boolean, require: Any?, returning: Any?): Statement {
        checkWrite("delete")
        checkFiltered("delete", all)
        val out = Render()
        val b = StringBuilder("del ").append(collection)
        return Statement(writeTail(b, out, returning, require), out.params)
    }

    /** Where, order, limit, then returning and require: each checked as it is written, in the text's order. */
    private fun writeTail(b: StringBuilder, out: Render, returning: Any?, require: Any?): String {
        cond?.let { b.append(" where ").append(it.render(out)) }
        if (orders.isNotEmpty()) b.append(" order ").append(orders.joinToString(", "))
        if (limitN != null) b.append(" limit ").append(limitN)
        returningClause(returning)?.let { b.append(" returning ").append(it) }
        if (require != null) b.append(" require ").append(requireCount(require))
        return b.toString()
    }

    /** R18: a write refuses a read's require, then the clauses it cannot take, then (insert) a where. */
    private fun checkWrite(verb: String) {
        if (readRequire != null) throw FenecException.builder("$verb takes require as its option: $verb(..., { require: n })")
        val refused = when {
            verb == "insert" && orders.isNotEmpty() -> "order"
            verb == "insert" && limitN != null -> "limit"
            offsetN != null -> "offset"
            fields != null -> "select"
            verb == "insert" && cond != null -> "where"
            else -> null
        }
        if (refused != null) throw FenecException.builder("$verb cannot be used with `$refused`")
    }

    /** R17: an update or delete with no condition needs `all`, or a limit that bounds it. */
    private fun checkFiltered(verb: String, all: Boolean) {
        if (cond == null && !all && limitN == null) {
            throw FenecException.builder("an unfiltered $verb covers the whole collection; if you mean it, $verb({ all: true })")
        }
    }

    private fun returningClause(returning: Any?): String? {
        val list: List<Any?> = when (returning) {
            null, false -> return null
            true -> return "*"
            is List<*> -> returning
            is Array<*> -> returning.toList()
            else -> throw FenecException.builder("returning is true or a list of fields: ${Values.jsonText(returning)}")
        }
        if (list.isEmpty()) throw FenecException.builder("returning names the fields it answers, or * for every one")
        if ("*" in list) {
            if (list.size > 1) throw FenecException.builder("returning * answers every field: it takes no other")
            return "*"
        }
        return list.joinToString(", ") { Names.field(it) }
    }

    private fun doc(d: Any?, out: Render, insert: Boolean): String {
        if (d !is Map<*, *>) throw FenecException.builder("a document is a map of fields (got ${Values.jsonText(d)})")
        if (d.isEmpty()) throw FenecException.builder("cannot write an empty document")
        return d.entries.joinToString(", ", "{", "}") { (k, v) ->
            val f = Names.field(k)
            val value = when (v) {
                is Computed.Inc -> {
                    if (insert) throw FenecException.builder("inc() reads the row it changes: use it in update (field: $f)")
                    "coalesce($f, 0) + ${out.param(v.by)}"
                }
                is Computed.Expr -> Placeholders.render(v.parts, v.params, out)
                else -> out.param(v)
            }
            "$f: $value"
        }
    }

    private fun requireCount(n: Any?): Long =
        Values.wholeCount(n) ?: throw FenecException.builder("require takes a count of rows, a whole number from 0 (got ${Values.text(n)})")

    // ---- endpoints: each sends exactly one POST /query ----

    private fun client(): FenecRemote =
        remote ?: throw IllegalStateException("this query is not bound to a client: start it with db.from(\"$collection\")")

    /** The rows the read answers. */
    suspend fun rows(): Rows = client().rowsOf(toFenecQL(), write = false)

    /** The first row, or null: the read with its limit replaced by 1. */
    suspend fun first(): Row? = client().rowsOf(firstText(), write = false).firstOrNull()

    suspend fun count(): Long {
        val rows = client().rowsOf(countText(), write = false)
        return (rows.firstOrNull()?.get("count") as? Number)?.toLong() ?: 0L
    }

    /** Writes one document (a map) or several (a list of maps); answers the count written. */
    suspend fun insert(docs: Any, require: Long? = null): Long = insertAny(docs, require) // an empty list sends nothing (R15)

    suspend fun update(patch: Map<String, Any?>, all: Boolean = false, require: Long? = null): Long =
        client().affectedOf(updateText(patch, all, require, null))

    /** The update's rows as written; `returning` names the fields, `*` every one. */
    suspend fun updateReturning(patch: Map<String, Any?>, returning: List<String> = listOf("*"), all: Boolean = false, require: Long? = null): Rows =
        client().rowsOf(updateText(patch, all, require, returning), write = true)

    suspend fun delete(all: Boolean = false, require: Long? = null): Long =
        client().affectedOf(deleteText(all, require, null))

    /** The deleted rows as they were: the pop of a queue. */
    suspend fun deleteReturning(returning: List<String> = listOf("*"), all: Boolean = false, require: Long? = null): Rows =
        client().rowsOf(deleteText(all, require, returning), write = true)

    internal suspend fun insertAny(docs: Any?, require: Any?): Long {
        if ((docs is List<*> && docs.isEmpty()) || (docs is Array<*> && docs.isEmpty())) {
            checkWrite("insert")
            require?.let { requireCount(it) }
            return 0
        }
        return client().affectedOf(insertText(docs, require))
    }

    internal suspend fun updateAny(patch: Any?, all: Boolean, require: Any?, returning: Any?): Any =
        if (returning == null || returning == false) client().affectedOf(updateText(patch, all, require, null))
        else client().rowsOf(updateText(patch, all, require, returning), write = true)

    internal suspend fun deleteAny(all: Boolean, require: Any?, returning: Any?): Any =
        if (returning == null || returning == false) client().affectedOf(deleteText(all, require, null))
        else client().rowsOf(deleteText(all, require, returning), write = true)

    // ---- blocking twins, for Java ----

    fun rowsBlocking(): Rows = runBlocking { rows() }
    fun firstBlocking(): Row? = runBlocking { first() }
    fun countBlocking(): Long = runBlocking { count() }
    @JvmOverloads
    fun insertBlocking(docs: Any, require: Long? = null): Long = runBlocking { insert(docs, require) }
    @JvmOverloads
    fun updateBlocking(patch: Map<String, Any?>, all: Boolean = false, require: Long? = null): Long = runBlocking { update(patch, all, require) }
    @JvmOverloads
    fun updateReturningBlocking(patch: Map<String, Any?>, returning: List<String> = listOf("*"), all: Boolean = false, require: Long? = null): Rows =
        runBlocking { updateReturning(patch, returning, all, require) }
    @JvmOverloads
    fun deleteBlocking(all: Boolean = false, require: Long? = null): Long = runBlocking { delete(all, require) }
    @JvmOverloads
    fun deleteReturningBlocking(returning: List<String> = listOf("*"), all: Boolean = false, require: Long? = null): Rows =
        runBlocking { deleteReturning(returning, all, require) }

    override fun toString(): String = try { toFenecQL().text } catch (e: FenecException) { "get $collection" }
}
