package com.fenecdb

/**
 * Conditions (client spec R5-R10). A [Cond] is immutable and checked when it is made: a refusal is raised by the
 * call that is wrong. It renders at the end of the chain, when parameters get their numbers.
 */
class Cond internal constructor(internal val node: Node?) {

    companion object {
        /** Text written as given, each `?` the next parameter (R10). */
        @JvmStatic
        fun raw(text: String, vararg params: Any?): Cond = Cond(Node.Raw(Placeholders.split("raw()", text, params.toList()), params.map { Values.plain(it) }))

        /** Joins conditions (maps are object conditions) with `or`. */
        @JvmStatic
        fun or(vararg members: Any?): Cond = Cond(Node.junction(true, members.map { Node.of(it) }))

        /** Joins conditions (maps are object conditions) with `and`. */
        @JvmStatic
        fun and(vararg members: Any?): Cond = Cond(Node.junction(false, members.map { Node.of(it) }))

        /** `not (<c>)`. */
        @JvmStatic
        fun not(member: Any?): Cond = Cond(Node.of(member)?.let { Node.Not(it) })

        /** `field op value`, the operator a symbol or its word (R5). */
        @JvmStatic
        fun cmp(field: String, op: String, value: Any?): Cond = Cond(Node.compare(field, op, value))

        /** The object condition: each field's value, null or operator map, in the map's order, joined with `and`. */
        @JvmStatic
        fun fields(fields: Map<String, Any?>): Cond = Cond(Node.fields(fields))
    }
}

/** The `?` placeholders of raw() and expr(): the text cut at each one, checked against the parameters. */
internal object Placeholders {
    fun split(who: String, text: String, params: List<Any?>): List<String> {
        val parts = text.split('?')
        val holes = parts.size - 1
        if (holes > params.size) throw FenecException.builder("$who: more `?` placeholders than parameters")
        if (holes < params.size) throw FenecException.builder("$who: too many parameters given")
        return parts
    }

    fun render(parts: List<String>, params: List<Any?>, out: Render): String {
        val b = StringBuilder(parts[0])
        for (i in params.indices) b.append(out.param(params[i])).append(parts[i + 1])
        return b.toString()
    }
}

/** A statement being written: its parameters, numbered from 1 in the order their placeholders stand. */
internal class Render {
    val params = ArrayList<Any?>()
    fun param(v: Any?): String {
        params.add(Values.plain(v))
        return "$" + params.size
    }
}

internal sealed class Node {
    class Compare(val field: String, val symbol: String, val value: Any?) : Node()
    class IsNull(val field: String, val negated: Boolean) : Node()
    class In(val field: String, val values: List<Any?>) : Node()
    class Raw(val parts: List<String>, val params: List<Any?>) : Node()
    class Junction(val isOr: Boolean, val members: List<Node>) : Node()
    class Not(val inner: Node) : Node()

    fun render(out: Render, insideOr: Boolean? = null): String = when (this) {
        is Compare -> "$field $symbol ${out.param(value)}"
        is IsNull -> if (negated) "$field is not null" else "$field is null"
        is In -> "$field in [" + values.joinToString(", ") { out.param(it) } + "]"
        is Raw -> Placeholders.render(parts, params, out)
        is Not -> "not (" + inner.render(out) + ")"
        is Junction -> {
            val text = members.joinToString(if (isOr) " or " else " and ") { it.render(out, isOr) }
            // an `and` inside an `or`, or an `or` inside an `and`, takes parentheses (R8)
            if (insideOr != null && insideOr != isOr) "($text)" else text
        }
    }

    companion object {
        private val OPERATORS = mapOf(
            "=" to "=", "eq" to "=",
            "!=" to "!=", "ne" to "!=", "neq" to "!=",
            "<" to "<", "lt" to "<",
            "<=" to "<=", "lte" to "<=", "le" to "<=",
            ">" to ">", "gt" to ">",
            ">=" to ">=", "gte" to ">=", "ge" to ">=",
            "~" to "~", "like" to "~", "contains" to "~",
            "has" to "has",
            "in" to "in",
        )

        /** A junction with one member is that member; an empty one disappears (R8). */
        fun junction(isOr: Boolean, members: List<Node?>): Node? {
            val kept = members.filterNotNull()
            return when (kept.size) {
                0 -> null
                1 -> kept[0]
                else -> Junction(isOr, kept)
            }
        }

        /** A condition argument: a [Cond], or a map taken as an object condition. */
        fun of(c: Any?): Node? = when (c) {
            is Cond -> c.node
            is Map<*, *> -> fields(c)
            else -> throw FenecException.builder("a condition is a map of fields or a Cond (got ${Values.jsonText(c)})")
        }

        /** where(field, op, value): the operator is checked before the field name (R5). */
        fun compare(field: Any?, op: Any?, value: Any?): Node {
            val symbol = OPERATORS[op] ?: throw FenecException.builder("unknown operator `${Values.text(op)}`")
            return leaf(Names.field(field), symbol, value)
        }

        /** where(field, value): equality, or the field's operator map when the value is a map. */
        fun spec(field: Any?, value: Any?): Node? {
            val f = Names.field(field)
            return if (value is Map<*, *>) operatorMap(f, value) else leaf(f, "=", value)
        }

        fun fields(map: Map<*, *>): Node? = junction(false, map.entries.map { (k, v) -> spec(k, v) })

        private fun operatorMap(field: String, ops: Map<*, *>): Node? {
            if (ops.isEmpty()) throw FenecException.builder("empty condition object (field: $field)")
            return junction(false, ops.entries.map { (k, v) ->
                val symbol = if (k == "not") "!=" else OPERATORS[k]
                    ?: throw FenecException.builder("unknown operator `${Values.text(k)}` (field: $field)")
                leaf(field, symbol, v)
            })
        }

        private fun leaf(field: String, symbol: String, value: Any?): Node {
            if (symbol == "in") {
                val list = asList(value) ?: throw FenecException.builder("`in` expects an array (field: $field)")
                if (list.isEmpty()) throw FenecException.builder("`in` does not accept an empty array (field: $field)")
                return In(field, list.map { Values.plain(it) })
            }
            if (value == null) {
                return when (symbol) {
                    "=" -> IsNull(field, false)
                    "!=" -> IsNull(field, true)
                    else -> throw FenecException.builder("`$symbol` cannot be used with null (field: $field)")
                }
            }
            return Compare(field, symbol, Values.plain(value))
        }

        private fun asList(v: Any?): List<Any?>? = when (v) {
            is List<*> -> v
            is Array<*> -> v.toList()
            is Iterable<*> -> v.toList()
            is FloatArray, is DoubleArray, is IntArray, is LongArray -> Values.plain(v) as List<*>
            else -> null
        }
    }
}
