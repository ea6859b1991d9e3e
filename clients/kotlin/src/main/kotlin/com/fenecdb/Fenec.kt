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
    fun connect(url: String, token: String? = null, timeout: Duration = 30.seconds, readFrom: ReadFrom = ReadFrom.PRIMARY): FenecRemote =
        FenecRemote.open(listOf(url), token, timeout, readFrom)

    /**
     * A client of the servers at [urls]: a primary and its replicas, in any order. Writes and claims go to its
     * primary ([FenecRemote.url]), at first the first URL, which follows the servers' answers (a replica's 403 names the
     * primary); reads go where [readFrom] says.
     */
    @JvmStatic
    @JvmOverloads
    fun connect(urls: List<String>, token: String? = null, timeout: Duration = 30.seconds, readFrom: ReadFrom = ReadFrom.PRIMARY): FenecRemote =
        FenecRemote.open(urls, token, timeout, readFrom)

    /**
     * [connect] for Java callers, with a `java.time.Duration` (Kotlin's `Duration` is a value class, so the
     * overload above reaches Java only under a mangled name).
     */
    @JvmStatic
    fun connect(url: String, token: String?, timeout: java.time.Duration): FenecRemote =
        connect(url, token, timeout.toKotlinDuration())

    /** [connect] of several servers for Java callers, with a `java.time.Duration`. */
    @JvmStatic
    fun connect(urls: List<String>, token: String?, timeout: java.time.Duration, readFrom: ReadFrom): FenecRemote =
        connect(urls, token, timeout.toKotlinDuration(), readFrom)
}
