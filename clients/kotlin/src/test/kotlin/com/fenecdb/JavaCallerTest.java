package com.fenecdb;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The surface the README promises Java, called from Java: this file compiles only if every name below is
 * callable as written (a function taking Kotlin's Duration reaches Java only under a mangled name), and the
 * test runs it against a live server. The region between the readme markers is the README's Java block.
 */
class JavaCallerTest {
    @Test
    void javaConnectsWaitsAndUsesTheBlockingTwins() {
        System.setProperty("fenecdb.url", LiveServer.INSTANCE.url());
        // readme:begin
        FenecRemote db = Fenec.connect(System.getProperty("fenecdb.url", "http://127.0.0.1:8080"), null, Duration.ofSeconds(30));
        db.runBlocking("create collection if not exists jobs (payload json, run_at timestamp @sorted, owner text, attempts int)", List.of(), null);
        long mine = db.withWait(Duration.ofSeconds(20)).from("jobs").where("owner", "w1:1").countBlocking();
        // readme:end
        assertEquals(0L, mine);
        String queue = "java_" + System.nanoTime();
        db.runBlocking("create collection " + queue + " (payload json, run_at timestamp @sorted, owner text, attempts int)",
            List.of(), null);
        Query jobs = db.from(queue);
        assertEquals(1L, jobs.insertBlocking(Map.of("payload", Map.of("n", 1), "run_at", "2026-01-01T00:00:00Z", "attempts", 0)));
        assertEquals(1L, Fenec.connect(LiveServer.INSTANCE.url()).from(queue).countBlocking());
    }
}
