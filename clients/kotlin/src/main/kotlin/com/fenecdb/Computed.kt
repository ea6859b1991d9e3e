package com.fenecdb

/**
 * Values a patch computes from the row it changes (client spec R16). `inc(n)` writes `f: coalesce(f, 0) + $k`, so
 * a null counts from 0; `expr(text, ...)` writes its text with each `?` the next parameter.
 */
sealed class Computed {
    class Expr internal constructor(internal val parts: List<String>, internal val params: List<Any?>) : Computed()
    class Inc internal constructor(internal val by: Any) : Computed()

    companion object {
        @JvmStatic
        fun expr(text: String, vararg params: Any?): Computed =
            Expr(Placeholders.split("expr()", text, params.toList()), params.map { Values.plain(it) })

        @JvmStatic
        @JvmOverloads
        fun inc(by: Number = 1): Computed = incOf(by)

        /** inc() of any value, refused unless it is a finite number: what a vectors file may ask. */
        internal fun incOf(by: Any?): Computed {
            val ok = when (by) {
                is Double -> by.isFinite()
                is Float -> by.isFinite()
                is Number -> true
                else -> false
            }
            if (!ok) throw FenecException.builder("inc() takes a number: ${Values.jsonText(by)}")
            return Inc(Values.plain(by)!!)
        }
    }
}
