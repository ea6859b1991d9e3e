package com.fenecdb.conformance

import java.io.File

class Scenarios(val url: String?, val token: String?, val requireServer: Boolean, private val out: (String) -> Unit = ::println) {
    var passed = 0; private set
    var failed = 0; private set
    var skipped = 0; private set
    fun runFile(file: File, only: String?): Boolean = true
}
