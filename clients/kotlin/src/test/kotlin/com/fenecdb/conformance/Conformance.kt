package com.fenecdb.conformance

import java.io.File
import kotlin.system.exitProcess

/**
 * The SDK's conformance run (conformance.md Part C): the vectors runner, the scenario runner, then the worker under
 * the docs' policy ([Policy], on the second server run.py starts), then, when `FENEC_REPLICA_SCENARIOS` is set, the
 * replica cases against `FENEC_PRIMARY_URL` and `FENEC_REPLICA_URL` ([Replicas]), then exactly one line `kotlin: N passed, M failed` on standard output.
 * Exits 0 exactly when M is 0.
 */
object Conformance {
    /** The repository root, found from where this code was loaded (never from the working directory). */
    fun root(): File {
        var dir: File? = File(Conformance::class.java.protectionDomain.codeSource.location.toURI()).absoluteFile
        while (dir != null && !File(dir, "conformance").isDirectory) dir = dir.parentFile
        return dir ?: File(".").absoluteFile
    }

    /** A path from the environment (relative ones against the working directory), or the project's default. */
    fun fileFrom(variable: String, default: String): File {
        val given = System.getenv(variable)?.takeIf { it.isNotEmpty() }
        return if (given != null) File(given).absoluteFile else File(root(), default)
    }

    /** Fewer cases than this in the project's own vectors file means it lost some; any other file needs one. */
    const val PROJECT_MINIMUM = 200

    @JvmStatic
    fun main(args: Array<String>) {
        val only = System.getenv("FENEC_ONLY")?.takeIf { it.isNotEmpty() }
        val vectorsFile = fileFrom("FENEC_VECTORS", "conformance/builder.json")
        val minimum = if (System.getenv("FENEC_VECTORS").isNullOrEmpty()) PROJECT_MINIMUM else 1
        val vectors = Vectors()
        vectors.runFile(vectorsFile, only, minimum)

        val scenarios = Scenarios(
            url = System.getenv("FENEC_URL")?.takeIf { it.isNotEmpty() },
            token = System.getenv("FENEC_TOKEN")?.takeIf { it.isNotEmpty() },
            requireServer = System.getenv("FENEC_REQUIRE_SERVER") == "1",
        )
        scenarios.runFile(fileFrom("FENEC_SCENARIOS", "conformance/worker-scenarios.json"), only)

        val policy = Policy()
        policy.run(requireServer = System.getenv("FENEC_REQUIRE_SERVER") == "1")

        var passed = vectors.passed + scenarios.passed + policy.passed
        var failed = vectors.failed + scenarios.failed + policy.failed
        System.getenv("FENEC_REPLICA_SCENARIOS")?.takeIf { it.isNotEmpty() }?.let { path ->
            val replicas = Replicas(System.getenv("FENEC_PRIMARY_URL") ?: "", System.getenv("FENEC_REPLICA_URL") ?: "")
            replicas.runFile(File(path).absoluteFile, only)
            passed += replicas.passed
            failed += replicas.failed
        }
        System.out.flush()
        println("kotlin: $passed passed, $failed failed")
        System.out.flush()
        exitProcess(if (failed == 0) 0 else 1)
    }
}
