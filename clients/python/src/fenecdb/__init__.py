"""FenecDB's Python client: the job-queue surface of clients.md §3.2.

    from fenecdb import Client, AsyncClient, FenecError, raw, expr, inc, or_, and_, not_

    db = Client("http://127.0.0.1:8080")
    jobs = db.collection("jobs")
    taken = (jobs.where(raw("run_at <= now()")).order("run_at").limit(10)
             .update({"owner": tag, "run_at": expr("now() + ?", 30000), "attempts": inc(1)},
                     returning=True, wait=30))

The modules behind the names are private; this list is the public surface, and a test holds
it to the agreed names.
"""

from ._async_worker import AsyncJob, AsyncWorker
from ._client import AsyncClient, AsyncQuery, Client, Query
from ._conditions import Cond, and_, not_, or_, raw
from ._errors import (
    BadRequestError,
    BuilderError,
    DuplicateError,
    FenecError,
    ForbiddenError,
    KeyReusedError,
    NotFoundError,
    UnauthorizedError,
    UnavailableError,
    UnmetError,
)
from ._query import Expr, Inc, TextQuery, collection, expr, inc
from ._wire import Rows
from ._worker import Job, Worker

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncJob",
    "AsyncQuery",
    "AsyncWorker",
    "BadRequestError",
    "BuilderError",
    "Client",
    "Cond",
    "DuplicateError",
    "Expr",
    "FenecError",
    "ForbiddenError",
    "Inc",
    "Job",
    "KeyReusedError",
    "NotFoundError",
    "Query",
    "Rows",
    "TextQuery",
    "UnauthorizedError",
    "UnavailableError",
    "UnmetError",
    "Worker",
    "and_",
    "collection",
    "expr",
    "inc",
    "not_",
    "or_",
    "raw",
]
