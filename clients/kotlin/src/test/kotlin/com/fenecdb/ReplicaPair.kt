package com.fenecdb

import org.junit.jupiter.api.Assumptions
import java.io.File
import java.nio.file.Files
import java.util.concurrent.TimeUnit

/**
 * A primary and its replica of their own, each on a database file in a temporary folder (`--replication-token`,
 * `--sync always`), on 127.0.0.1:0, for the replica tests; stopped with SIGTERM on [close].
 */
class ReplicaPair : AutoCloseable {
    private val command = File(LiveServer.root, ".venv/bin/fenec-server")
    private val dir = Files.createTempDirectory("fenec-kt-replicas-").toFile()
    private val token = "kt-test-${System.nanoTime()}"
    private val processes = ArrayList<Process>()

    val primary: String
    val replica: String

    init {
        Assumptions.assumeTrue(command.canExecute(), "no fenec-server at $command: live tests skipped")
        primary = start("primary")
        replica = start("replica", "--replica-of", primary)
    }

    private fun start(name: String, vararg more: String): String {
        val p = ProcessBuilder(command.path, "--file", File(dir, "$name.fenec").path, "--http", "127.0.0.1:0",
            "--sync", "always", "--replication-token", token, *more)
            .redirectOutput(ProcessBuilder.Redirect.DISCARD)
            .start()
        processes.add(p)
        return LiveServer.address(p) ?: run { close(); throw IllegalStateException("the $name did not report its address") }
    }

    override fun close() {
        for (p in processes.reversed()) {
            p.destroy()
            if (!p.waitFor(30, TimeUnit.SECONDS)) p.destroyForcibly().waitFor()
        }
        processes.clear()
        dir.deleteRecursively()
    }
}
