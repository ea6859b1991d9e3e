package com.fenecdb

/*
 * The one error type of the client, and the one place a status becomes a code.
 *
 *   RuntimeException
 *   └── FenecException(code, message, status, at, completed, primary)
 *         code BUILDER    a chain the builder refuses; raised at the step, before any request; status 0
 *         code QUERY      400: the statement does not parse, a bad parameter, a claim the server cannot hold
 *         code DENIED     401 / 403 (a replica's 403 names its primary in `primary`)
 *         code NOT_FOUND  404
 *         code DUPLICATE  409
 *         code UNMET      412: a `require n` not met (a batch holding it was put back)
 *         code IO         422 (a reused Idempotency-Key), 5xx, any other status, and a failed connection (status 0)
 *
 * Coroutine cancellation is never wrapped: it stays a CancellationException. A misuse of the API itself
 * (an empty idempotency key, a negative wait) is an IllegalArgumentException, as Kotlin code expects.
 */
class FenecException(
    val code: Code,
    override val message: String,
    /** The HTTP status of a server refusal; 0 for a builder refusal or a connection that failed. */
    val status: Int = 0,
    /** The index of the statement that stopped a batch, from 0; null otherwise. */
    val at: Int? = null,
    /** How many statements of a stopped batch stayed applied (always 0: a batch lands whole); null otherwise. */
    val completed: Int? = null,
    /**
     * The primary a replica's 403 names (its `Fenec-Primary`): nothing was done there. The client follows it by
     * itself; it reaches the caller only past the hops one call may take. Null otherwise.
     */
    val primary: String? = null,
    cause: Throwable? = null,
) : RuntimeException(message, cause) {

    /** The answer had `Retry-After`. */
    internal var retryAfter = false

    enum class Code { BUILDER, QUERY, DENIED, NOT_FOUND, DUPLICATE, UNMET, IO }

    override fun toString(): String =
        "FenecException($code${if (status != 0) ", status $status" else ""}${if (at != null) ", at $at" else ""}): $message"

    companion object {
        /** The code a refusal with this HTTP status carries (clients.md §1). */
        fun codeFor(status: Int): Code = when (status) {
            400 -> Code.QUERY
            401, 403 -> Code.DENIED
            404 -> Code.NOT_FOUND
            409 -> Code.DUPLICATE
            412 -> Code.UNMET
            else -> Code.IO
        }

        internal fun builder(message: String) = FenecException(Code.BUILDER, message)
    }
}
