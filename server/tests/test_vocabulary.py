"""One name a concept (server README, "The words"): a held claim is held, never parked, a waiter, a
held request or a ready claim; the transport's way to the service is the direct path, never the
short way, the quick read or `answer_now`. The retired names stay out of the server's code and
tests, its docs and the SDKs' sources and tests (bench/README.md, the history of the measurements,
may name what a thing was called when it was measured)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# `Waiter` the class alone: a thread waiting for an fsync is a waiter (storage/sync.py)
RETIRED = re.compile(r"\b[Pp]ark(?:s|ed|ing)?\b|\bWaiter\b|\bReadyClaim\b|\b[Hh]eld[ _]requests?\b"
                     r"|\banswer_now\b|\b[Ss]hort way\b|\b[Qq]uick read\b|\b_direct_read\b")
SUFFIXES = {".py", ".md", ".go", ".kt", ".kts", ".mjs", ".js", ".ts", ".cs", ".swift", ".lark", ".html"}
PLACES = ["server/src", "server/tests", "server/README.md", "docs", "clients", "conformance", "README.md"]
SKIPPED = {"node_modules", "build", "dist", ".gradle", "bin", "obj", "artifacts"}
HERE = Path(__file__).resolve()


def files() -> list[Path]:
    out = []
    for place in PLACES:
        path = ROOT / place
        found = [path] if path.is_file() else sorted(path.rglob("*"))
        out += [p for p in found if p.is_file() and p.suffix in SUFFIXES and p.resolve() != HERE
                and not SKIPPED & set(p.relative_to(ROOT).parts)]
    return out


def retired(text: str) -> list[str]:
    return [f"{n}: {m.group(0)!r}" for n, line in enumerate(text.splitlines(), 1) for m in RETIRED.finditer(line)]


def test_no_retired_name_of_a_held_claim_or_the_direct_path_is_left() -> None:
    found = {p.relative_to(ROOT).as_posix(): retired(p.read_text(encoding="utf-8", errors="replace")) for p in files()}
    assert not {k: v for k, v in found.items() if v}


def test_the_check_sees_each_retired_name() -> None:
    said = "a Parked claim\nthe Waiter\nParking it\nthe short way\nthe quick read\nApp.answer_now\nheld_requests\n"
    assert len(retired(said)) == 7
    assert retired("a held claim on the direct path; a writer waiting for its fsync") == []
