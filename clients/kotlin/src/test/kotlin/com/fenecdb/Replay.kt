package com.fenecdb

import kotlinx.serialization.json.JsonElement

/*
 * Entry points that take any value, as a vectors file may give it (conformance.md A.2: "any other value is kept as
 * given, so that refusals can be tested"). They sit in the test tree beside the builder's package and reach its
 * internal any-value steps, so the public API stays the typed one while a runner replays any file unchanged.
 */

fun selectOf(q: Query, fields: List<Any?>): Query = q.selectAny(fields)
fun whereOf(q: Query, args: List<Any?>, or: Boolean): Query = when (args.size) {
    1 -> if (or) q.orWhereAny(args[0]) else q.whereAny(args[0])
    2 -> if (or) q.orWhereSpec(args[0], args[1]) else q.whereSpec(args[0], args[1])
    3 -> if (or) q.orWhereOp(args[0], args[1], args[2]) else q.whereOp(args[0], args[1], args[2])
    else -> throw IllegalArgumentException("where takes 1 to 3 arguments (got ${args.size})")
}
fun orderOf(q: Query, field: Any?, direction: Any?): Query = q.orderAny(field, direction)
fun limitOf(q: Query, n: Any?): Query = q.limitAny(n)
fun offsetOf(q: Query, n: Any?): Query = q.offsetAny(n)
fun requireOf(q: Query, n: Any?): Query = q.requireAny(n)
fun incOf(by: Any?): Computed = Computed.incOf(by)
fun insertTextOf(q: Query, docs: Any?, require: Any?): Statement = q.insertText(docs, require)
fun updateTextOf(q: Query, patch: Any?, all: Boolean, require: Any?, returning: Any?): Statement = q.updateText(patch, all, require, returning)
fun deleteTextOf(q: Query, all: Boolean, require: Any?, returning: Any?): Statement = q.deleteText(all, require, returning)
suspend fun insertOf(q: Query, docs: Any?, require: Any?): Long = q.insertAny(docs, require)
suspend fun updateOf(q: Query, patch: Any?, all: Boolean, require: Any?, returning: Any?): Any = q.updateAny(patch, all, require, returning)
suspend fun deleteOf(q: Query, all: Boolean, require: Any?, returning: Any?): Any = q.deleteAny(all, require, returning)

/** A parameter as the wire encoder of `POST /query` writes it. */
fun wireValue(v: Any?): JsonElement = Values.toJson(v)
