package com.fenecdb

import kotlin.time.Duration
import kotlin.time.Duration.Companion.seconds
import kotlin.time.toKotlinDuration

/** The entry point: `val db = Fenec.connect("http://127.0.0.1:8080", token)`. */
object Fenec {
    /**
     * A client of the FenecDB server at [url]. [timeout] bounds each request (a held claim gets its wait on top);
     * [Duration.INFINITE] means none.
     */
    @JvmStatic
    @JvmOverloads
    fun connect(url: String, token: String? = null, timeout: Duration = 30.seconds): FenecRemote =
        FenecRemote.open(url, token, timeout)

    /**
     * [connect] for Java callers, with a `java.time.Duration` (Kotlin's `Duration` is a value class, so the
     * overload above reaches Java only under a mangled name).
     */
    @JvmStatic
    fun connect(url: String, token: String?, timeout: java.time.Duration): FenecRemote =
        connect(url, token, timeout.toKotlinDuration())
}
