package com.fenecdb

import org.junit.jupiter.api.Assumptions
import java.io.File
import java.nio.file.Files
import java.util.concurrent.TimeUnit

/**
 * A `fenec-server` of its own on a database FILE, for the tests that stop and start it: the first start binds
 * 127.0.0.1:0, and every later one the same port, on the same file, so a client's URL stays good across a restart.
 */
class FileServer : AutoCloseable {
    private val command = File(LiveServer.root, ".venv/bin/fenec-server")
    private val dir = Files.createTempDirectory("fenec-kt-").toFile()
    private var process: Process? = null
    private var port = 0

    /** The base URL: the same for every start after the first. */
    lateinit var url: String
        private set

    init {
        Assumptions.assumeTrue(command.canExecute(), "no fenec-server at $command: live tests skipped")
        start()
    }

    fun start() {
        check(process == null) { "the server is running" }
        val p = ProcessBuilder(command.path, "--file", File(dir, "queue.db").path, "--http", "127.0.0.1:$port")
            .redirectOutput(ProcessBuilder.Redirect.DISCARD)
            .start()
        process = p
        val found = LiveServer.address(p)
        url = found ?: throw IllegalStateException("fenec-server did not report its address")
        port = url.substringAfterLast(':').trimEnd('/').toInt()
    }

    /** SIGTERM, as an operator's restart sends it: the server answers what it holds and syncs, then exits. */
    fun stop() {
        val p = process ?: return
        p.destroy()
        if (!p.waitFor(30, TimeUnit.SECONDS)) p.destroyForcibly().waitFor()
        process = null
    }

    override fun close() {
        stop()
        dir.deleteRecursively()
    }
}
