"""Start-up: the parser's tables come from a private cache (ql/grammar_cache.py) and the parser
loaded from it answers exactly as one built from the grammar: the same statements, the same
syntax errors word for word. A cache directory others may write in is never used."""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
from pathlib import Path

WORDS = ["get", "set", "del", "put", "jobs", "where", "run_at", "<=", "now()", "+", "30000", "order", "limit",
         "1", "returning", "*", "require", "{", "}", "owner:", "$1", "count", "select", "id", ",", "(", ")",
         "and", "or", "not", "null", "'x'", "\"y", "create", "collection", "index", "on", "@sorted", "@ttl(30s)",
         "drop", "[", "]", "desc", "case", "when", "then", "else", "end", "=", "!=", "!", ".5", "1.", "$",
         "attempts", "payload.to", "bucket(now(), 60000)", ";", "-", "timestamp", "text", "if", "absent"]
GOOD = [
    "get jobs where run_at <= now() order run_at limit 10",
    "set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
    "where run_at <= now() order run_at limit 10 returning *",
    "del jobs where id = $1 and owner = $2 require 1",
    "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)",
    "create index on jobs (payload.to) @hash",
    "put jobs {payload: {to: 'a'}, run_at: now(), attempts: 0}",
    "get jobs select case when attempts > 3 then 'dead' else 'ok' end as state",
    "get jobs count; get jobs where owner is null",
]

SCRIPT = """
import json, sys
from fenecdb_server.ql.parser import parse
from fenecdb_server.errors import FenecError
out = []
for text in json.load(sys.stdin):
    try:
        out.append(["ok", repr(parse(text))])
    except FenecError as e:
        out.append([e.status, e.message])
print(json.dumps(out))
"""


def corpus() -> list[str]:
    rng = random.Random(20261202)
    texts = list(GOOD)
    for _ in range(400):
        texts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))))
    return texts


def parse_in_child(texts: list[str], cache_home: Path | None) -> list:
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "FENEC_PARSER_CACHE")}
    if cache_home is None:
        env["FENEC_PARSER_CACHE"] = "off"
    else:
        env["XDG_CACHE_HOME"] = str(cache_home)
    r = subprocess.run([sys.executable, "-c", SCRIPT], input=json.dumps(texts), capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def cache_files(home: Path) -> list[Path]:
    return sorted((home / "fenecdb").glob("parser-*.lark-cache"))


def test_a_cached_parser_answers_exactly_as_a_built_one(tmp_path) -> None:
    texts = corpus()
    built = parse_in_child(texts, None)
    assert sum(1 for kind, _ in built if kind == "ok") >= len(GOOD)
    assert sum(1 for kind, _ in built if kind == 400) > 100  # the errors are compared too
    home = tmp_path / "cache"
    cold = parse_in_child(texts, home)  # builds and saves
    [saved] = cache_files(home)
    assert stat.S_IMODE(os.stat(home / "fenecdb").st_mode) == 0o700
    mtime = saved.stat().st_mtime_ns
    warm = parse_in_child(texts, home)  # loads
    assert saved.stat().st_mtime_ns == mtime  # loaded, not rebuilt
    assert cold == built and warm == built


def test_a_damaged_cache_is_rebuilt_and_answers_the_same(tmp_path) -> None:
    texts = GOOD + ["get jobs where", "set jobs {a: 1} where a < b < c", "get jobs where x = 'open"]
    built = parse_in_child(texts, None)
    home = tmp_path / "cache"
    parse_in_child(texts, home)
    [saved] = cache_files(home)
    good = saved.read_bytes()
    saved.write_bytes(good[: len(good) // 2])  # a write cut short
    assert parse_in_child(texts, home) == built
    mtime = saved.stat().st_mtime_ns
    assert parse_in_child(texts, home) == built
    assert saved.stat().st_mtime_ns == mtime  # rewritten whole: the next start loads it as it is
    saved.write_bytes(b"not a cache at all\n")
    assert parse_in_child(texts, home) == built


def test_a_cache_directory_others_may_write_in_is_not_used(tmp_path) -> None:
    home = tmp_path / "cache"
    (home / "fenecdb").mkdir(parents=True)
    os.chmod(home / "fenecdb", 0o777)
    texts = GOOD[:2]
    assert parse_in_child(texts, home) == parse_in_child(texts, None)
    assert cache_files(home) == []
    os.chmod(home / "fenecdb", 0o700)
    parse_in_child(texts, home)
    assert len(cache_files(home)) == 1
