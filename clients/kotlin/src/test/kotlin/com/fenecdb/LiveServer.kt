package com.fenecdb

import org.junit.jupiter.api.Assumptions
import java.io.File
import java.util.concurrent.TimeUnit

/**
 * A real `fenec-server`, in memory on 127.0.0.1:0, for the live tests: started once for the test JVM, its address read
 * from its `listening on: http://...` log line, stopped with SIGTERM when the JVM ends.
 */
object LiveServer {
    /** The repository root, from where the test classes were loaded (clients/kotlin/target/test-classes). */
    val root: File by lazy {
        var dir: File? = File(LiveServer::class.java.protectionDomain.codeSource.location.toURI()).absoluteFile
        while (dir != null && !File(dir, "clients/kotlin").isDirectory) dir = dir.parentFile
        dir ?: File("../..").absoluteFile
    }

    private val command: File get() = File(root, ".venv/bin/fenec-server")

    private val started: String? by lazy { start() }

    /** A server started by someone else (FENEC_TEST_URL), used instead of one of our own: the wire corpus records
     *  the live tests through its proxy so (conformance/wire/README.md). */
    private val given: String? = System.getenv("FENEC_TEST_URL")?.takeIf { it.isNotEmpty() }?.trimEnd('/')

    /** The server's base URL; a test that needs it is skipped, with the reason, when the command is missing. */
    fun url(): String {
        given?.let { return it }
        Assumptions.assumeTrue(command.canExecute(), "no fenec-server at $command: live tests skipped")
        return started ?: throw IllegalStateException("fenec-server did not report its address")
    }

    private fun start(): String? {
        val process = ProcessBuilder(command.path, "--http", "127.0.0.1:0")
            .redirectOutput(ProcessBuilder.Redirect.DISCARD)
            .start()
        Runtime.getRuntime().addShutdownHook(Thread {
            process.destroy() // SIGTERM: the server answers any held claim and syncs before it exits
            if (!process.waitFor(5, TimeUnit.SECONDS)) process.destroyForcibly()
        })
        return address(process)
    }

    /**
     * The base URL a starting `fenec-server` prints on stderr (`listening on: http://...`), or null if it never
     * does; the rest of its log is drained on a thread so that the server never blocks on a full pipe.
     */
    fun address(process: Process, seconds: Long = 60): String? {
        val lines = process.errorStream.bufferedReader()
        val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds)
        var url: String? = null
        while (url == null && System.nanoTime() < deadline) {
            val line = lines.readLine() ?: break
            url = Regex("listening on: (http://\\S+)").find(line)?.groupValues?.get(1)
        }
        Thread { try { lines.forEachLine { } } catch (e: Exception) { } }.apply { isDaemon = true }.start()
        return url
    }
}
