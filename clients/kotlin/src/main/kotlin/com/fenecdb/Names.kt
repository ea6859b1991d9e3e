package com.fenecdb

/**
 * Names (client spec R3): the only text of a statement that is not a parameter, so the only place an injection could
 * get through. An identifier starts with a Unicode letter (the Alphabetic property) or `_` and goes on with letters,
 * marks that belong to them, numbers and `_`; a field is identifiers joined by single dots.
 */
internal object Names {
    fun isIdentifier(s: String): Boolean {
        if (s.isEmpty()) return false
        var i = 0
        var first = true
        while (i < s.length) {
            val cp = s.codePointAt(i)
            val ok = cp == '_'.code || Character.isAlphabetic(cp) ||
                (!first && when (Character.getType(cp).toByte()) {
                    Character.DECIMAL_DIGIT_NUMBER, Character.LETTER_NUMBER, Character.OTHER_NUMBER,
                    Character.NON_SPACING_MARK, Character.COMBINING_SPACING_MARK -> true
                    else -> false
                })
            if (!ok) return false
            first = false
            i += Character.charCount(cp)
        }
        return true
    }

    fun collection(name: Any?): String {
        if (name !is String || !isIdentifier(name)) throw FenecException.builder("invalid collection name: ${quote(name)}")
        return name
    }

    fun field(name: Any?): String {
        if (name !is String || !name.split('.').all { isIdentifier(it) }) {
            throw FenecException.builder("invalid field name: ${quote(name)}")
        }
        return name
    }

    /** As JSON.stringify quotes a string: `"` and `\` escaped, control characters and lone surrogates escaped. */
    fun quote(v: Any?): String {
        if (v !is String) return Values.jsonText(v)
        val b = StringBuilder("\"")
        for (i in v.indices) {
            val ch = v[i]
            val lone = (Character.isHighSurrogate(ch) && !(i + 1 < v.length && Character.isLowSurrogate(v[i + 1]))) ||
                (Character.isLowSurrogate(ch) && !(i > 0 && Character.isHighSurrogate(v[i - 1])))
            when {
                ch == '"' -> b.append("\\\"")
                ch == '\\' -> b.append("\\\\")
                ch == '\n' -> b.append("\\n")
                ch == '\r' -> b.append("\\r")
                ch == '\t' -> b.append("\\t")
                ch == '\b' -> b.append("\\b")
                ch == '\u000C' -> b.append("\\f")
                ch < ' ' || lone -> b.append("\\u%04x".format(ch.code))
                else -> b.append(ch)
            }
        }
        return b.append('"').toString()
    }
}
