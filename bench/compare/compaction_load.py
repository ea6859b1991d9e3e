"""Claims and acks while a compaction runs:
`python -m bench.compare.compaction_load [rounds] [seconds] [after]`.

Starts a `fenec-server` on a file (the harness of `make queue-compare`, bench/compare), loads a
million ready jobs, then per round runs eight claim-and-ack worker processes for `seconds` (3) twice:
once alone, once with `POST /_admin/compact` sent `after` seconds (0) after the workers are started
(they take a while to connect). Prints each window's jobs a second and what the compaction answered;
the jobs taken are put back between windows. Run from the repository's root
(`.venv/bin/python -m bench.compare.compaction_load`); bench/README.md has the numbers.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
import urllib.request

from . import fenec, loadgen


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    after = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    system = fenec.System()
    with tempfile.TemporaryDirectory() as workdir:
        system.start(workdir, durable=False)
        try:
            system.load(1_000_000, ready=True)
            for _ in range(rounds):
                for compact in (False, True):
                    done: dict = {}

                    def compaction(done: dict = done) -> None:
                        time.sleep(after)
                        started = time.perf_counter()
                        request = urllib.request.Request(system.url + "/_admin/compact", method="POST", data=b"")
                        with urllib.request.urlopen(request, timeout=300) as answer:
                            done.update(json.loads(answer.read()))
                        done["seconds"] = time.perf_counter() - started

                    thread = threading.Thread(target=compaction) if compact else None
                    if thread is not None:
                        thread.start()
                    result = loadgen.run_workers(system, "claim-ack", 8, seconds)
                    if thread is not None:
                        thread.join()
                    took = ""
                    if compact:
                        took = f", the compaction took {done['seconds']:.2f} s"
                        took += "".join(f", {k} {done[k]}" for k in ("encode_ms", "write_ms", "rests") if k in done)
                    print(f"compaction={compact}: {result['rate']:.0f} jobs/s{took}", flush=True)
                    system.load(result["done"], ready=True)
        finally:
            system.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
