package com.fenecdb

import com.fenecdb.conformance.Replicas
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Test
import java.io.File

/** The shared replica cases, played against a primary and a replica of their own ([ReplicaPair]). */
class LiveReplicasTest {
    @Test
    fun `the shared replica cases pass`() {
        ReplicaPair().use { pair ->
            val lines = ArrayList<String>()
            val replicas = Replicas(pair.primary, pair.replica) { lines.add(it) }
            val file = File.createTempFile("replica-cases", ".json")
            try {
                file.writeText(replicas.players.keys.joinToString(",", "[", "]") { """{"name": "$it"}""" })
                replicas.runFile(file, null)
            } finally {
                file.delete()
            }
            assertEquals(0, replicas.failed, lines.joinToString("\n"))
            assertEquals(3, replicas.passed, lines.joinToString("\n"))
        }
    }
}
