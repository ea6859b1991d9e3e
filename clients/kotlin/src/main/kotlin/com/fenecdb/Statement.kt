package com.fenecdb

/** One FenecQL statement and its parameters: `$1` is `params[0]`. What the text-only endings hand back. */
data class Statement(val text: String, val params: List<Any?> = emptyList()) {
    constructor(text: String, vararg params: Any?) : this(text, params.toList())
}
