package com.fenecdb

import com.fenecdb.conformance.Conformance
import com.fenecdb.conformance.Vectors
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File

/** The builder vectors in the normal test command (conformance.md A.7), and the runner's own refusals. */
class VectorsTest {
    @Test
    fun `every case of the vectors file passes`() {
        val given = System.getenv("FENEC_VECTORS")?.takeIf { it.isNotEmpty() }
        val file = Conformance.fileFrom("FENEC_VECTORS", "conformance/builder.json")
        val lines = ArrayList<String>()
        val v = Vectors { lines.add(it) }
        val ok = v.runFile(file, System.getenv("FENEC_ONLY")?.takeIf { it.isNotEmpty() }, if (given == null) Conformance.PROJECT_MINIMUM else 1)
        assertTrue(ok, lines.filter { !it.startsWith("ok ") }.joinToString("\n"))
        assertEquals(0, v.failed)
    }

    @Test
    fun `the runner fails what is malformed, unknown or empty, and never skips`() {
        val file = File(LiveServer.root, "clients/kotlin/src/test/resources/runner-refusals.json")
        val lines = ArrayList<String>()
        val v = Vectors { lines.add(it) }
        assertFalse(v.runFile(file, null))
        assertEquals(listOf(
            "ok a good case",
            "FAIL no terminal: malformed case",
            "FAIL terminal in the middle: malformed case",
            "FAIL an op nobody knows: unsupported op explode",
            "FAIL an encoding nobody knows: unknown encoding \$bigint",
            "FAIL a wrong expectation: `get tasks` [] / `get notes` []",
            "vectors $file: 1 ok, 5 FAIL, 0 checked-elsewhere",
        ), lines)
        val empty = File.createTempFile("vectors", ".json").apply { writeText("[]"); deleteOnExit() }
        assertFalse(Vectors { }.runFile(empty, null))
    }
}
