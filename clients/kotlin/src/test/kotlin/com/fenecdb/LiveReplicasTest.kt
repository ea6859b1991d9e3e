package com.fenecdb

import com.fenecdb.conformance.Replicas
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Test
import java.io.File

/** The shared replica cases (conformance/replica-scenarios.json), played against a pair of their own ([ReplicaPair]). */
class LiveReplicasTest {
    @Test
    fun `the shared replica cases pass`() {
        ReplicaPair().use { pair ->
            val lines = ArrayList<String>()
            val replicas = Replicas(pair.primary, pair.replica) { lines.add(it) }
            replicas.runFile(File(LiveServer.root, "conformance/replica-scenarios.json"), null)
            assertEquals(0, replicas.failed, lines.joinToString("\n"))
            assertEquals(3, replicas.passed, lines.joinToString("\n"))
        }
    }
}
