"""The public surface is exactly the agreed names (clients.md §3.2 plus the worker helper and
the documented exception tree); a name slipping in or out fails here."""

import fenecdb

AGREED = {
    # clients.md §3.2
    "Client", "AsyncClient", "FenecError", "raw", "expr", "inc", "or_", "and_", "not_", "collection",
    # what those calls hand back
    "Query", "AsyncQuery", "TextQuery", "Rows", "Cond", "Expr", "Inc",
    # the exception tree (fenecdb/_errors.py)
    "BuilderError", "BadRequestError", "UnauthorizedError", "ForbiddenError", "NotFoundError",
    "DuplicateError", "UnmetError", "KeyReusedError", "UnavailableError",
    # the worker helper
    "Worker", "AsyncWorker", "Job", "AsyncJob",
}


def test_all_is_the_agreed_names() -> None:
    assert set(fenecdb.__all__) == AGREED
    assert len(fenecdb.__all__) == len(AGREED)


def test_every_public_name_is_exported_and_nothing_else() -> None:
    public = {n for n in vars(fenecdb) if not n.startswith("_")}
    assert public == AGREED
    for name in fenecdb.__all__:
        assert getattr(fenecdb, name).__module__.startswith("fenecdb.")


def test_the_package_is_typed() -> None:
    from pathlib import Path
    assert (Path(fenecdb.__file__).parent / "py.typed").exists()
