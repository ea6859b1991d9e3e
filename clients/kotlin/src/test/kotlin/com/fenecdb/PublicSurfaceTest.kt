package com.fenecdb

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Test
import java.io.File
import kotlin.reflect.KVisibility

/** The agreed API and nothing more: a class that slips in or out of the public surface fails this test. */
class PublicSurfaceTest {
    private val agreed = setOf(
        "Answer", "BatchAnswer", "Computed", "Computed\$Expr", "Computed\$Inc", "Cond", "Fenec", "FenecException",
        "FenecException\$Code", "FenecRemote", "Job", "JobQueue", "JobQueue\$Counts", "Query", "Row", "Rows",
        "ReadFrom", "Statement", "Worker", "WorkerEvent", "WorkerEvent\$Type", "WorkerOptions",
    )

    @Test
    fun `the public classes of com fenecdb are exactly the agreed ones`() {
        val dir = File(Fenec::class.java.protectionDomain.codeSource.location.toURI()).resolve("com/fenecdb")
        val public = dir.listFiles()!!.map { it.name.removeSuffix(".class") }
            .filter { !it.endsWith("\$Companion") && !it.contains("\$\$") }
            .filter { name ->
                val c = Class.forName("com.fenecdb.$name")
                !c.isSynthetic && !c.isAnonymousClass && name.substringAfterLast('$').first().isUpperCase() &&
                    generateSequence(c) { it.enclosingClass }.all { it.kotlin.visibility == KVisibility.PUBLIC } // effective
            }
            .toSet()
        assertEquals(agreed, public)
    }
}
