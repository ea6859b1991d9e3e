"""A replica `fenec-server` whose replays can be held back, for the crash test of a record acked and
not yet replayed (test_replication.py): `python replica_held.py <flag> python -m fenecdb_server.cli
<its arguments>` runs the server in this process (a SIGKILL of it is one of the server), with a
thread that, while the file `<flag>` exists, holds the engine's lock shared, as a long read would:
the follower's replay, which takes it alone, waits; what comes before the replay does not. Once it
holds the lock it creates `<flag>.held`."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from fenecdb_server import cli
from fenecdb_server.database import Database


def _hold(db: Database, flag: str) -> None:
    while True:
        if os.path.exists(flag):
            db.engine.lock.acquire_read()
            with open(flag + ".held", "w"):
                pass
            while os.path.exists(flag):
                time.sleep(0.01)
            db.engine.lock.release_read()
        time.sleep(0.01)


def main() -> None:
    flag = sys.argv[1]
    argv = sys.argv[sys.argv.index("fenecdb_server.cli") + 1:]
    serve = cli.serve

    def held_serve(db: Database, *args: Any, **kwargs: Any) -> int:  # the database opened, before it serves
        threading.Thread(target=_hold, args=(db, flag), daemon=True).start()
        return serve(db, *args, **kwargs)

    cli.serve = held_serve  # cli.py is not compiled: `main` looks the name up when it calls it
    sys.exit(cli.main(argv))


if __name__ == "__main__":
    main()
