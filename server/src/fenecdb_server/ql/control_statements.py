"""The trees of the statements that control queues and schedules (docs/fenecql.md: "Pausing a
queue", "Caps and rate limits", "Schedules"), built on `ToAst`, which builds every other
statement's: the parser's transformer is this class."""

from __future__ import annotations

from lark import Token

from . import ast as A
from .escapes import unescape as _unescape
from .to_ast import Located, ToAst, _int, _name, _qerr, _toks, duration_ms


def _duration_ms(s: str, what: str) -> int:
    """`30s`, `1m`, ... as ms (whole ms, s, m, h or d, as `@ttl` takes them), at least 1."""
    ms = duration_ms(s)
    if ms is None:
        raise _qerr(f"{what} is whole ms, s, m, h or d, not `{s}`")
    if ms < 1:
        raise _qerr(f"{what} is at least 1ms")
    return ms


class ControlStatements(ToAst):
    # ---------------------------------------------------------------- queue controls
    def _queue_target(self, c):
        coll = _name(_toks(c, "NAME")[0], "collection name")
        names = _toks(c, "STRING")
        return coll, (_unescape(str(names[0])[1:-1]) if names else None)

    def pause_queue(self, c):
        return A.QueueControl("pause", *self._queue_target(c), None, None, None, None)

    def resume_queue(self, c):
        return A.QueueControl("resume", *self._queue_target(c), None, None, None, None)

    def queue_measure(self, c):
        kind = str(c[0]).lower()
        if kind == "leased":
            return ("measure", kind, None)
        return ("measure", kind, _duration_ms(str(c[1]), "a rate limit's period"))

    def per_field(self, c):
        return ("per", _name(c[0], "field name"))

    def limit_queue(self, c):
        coll, queue = self._queue_target(c)
        n = _int(_toks(c, "INT")[0])
        if n < 1:
            raise _qerr("a limit is at least 1: to stop a queue, pause it")
        measure = next(x for x in c if isinstance(x, tuple) and x[0] == "measure")
        by = next((x[1] for x in c if isinstance(x, tuple) and x[0] == "per"), None)
        return A.QueueControl("limit", coll, queue, measure[1], n, measure[2], by)

    def unlimit_queue(self, c):
        coll, queue = self._queue_target(c)
        kinds = _toks(c, "LEASED", "CLAIMED")
        by = next((x[1] for x in c if isinstance(x, tuple) and x[0] == "per"), None)
        return A.QueueControl("unlimit", coll, queue, str(kinds[0]).lower() if kinds else None, None, None, by)

    def show_queues(self, c):
        return A.ShowQueues()

    # ---------------------------------------------------------------- schedules
    def schedule_when(self, c):
        if c[0].type == "EVERY":
            ms = duration_ms(str(c[1]))
            if ms is None:
                raise Located(c[1].start_pos, f"`every` takes whole ms, s, m, h or d, not `{c[1]}`: "
                                               "a calendar period is a cron")
            return ("every", ms, None)
        zone = _unescape(str(c[3])[1:-1]) if len(c) > 3 else None
        return ("cron", _unescape(str(c[1])[1:-1]), zone)

    def schedule_missed(self, c):
        return ("missed", str(c[1]).lower())

    def create_schedule(self, c):
        name = _name(next(x for x in c if isinstance(x, Token) and x.type == "NAME"), "schedule name")
        when = next(x for x in c if isinstance(x, tuple) and x[0] in ("every", "cron"))
        missed = next((x[1] for x in c if isinstance(x, tuple) and x[0] == "missed"), "once")
        put = next(x for x in c if isinstance(x, A.Put))
        every = when[1] if when[0] == "every" else None
        cron = when[1] if when[0] == "cron" else None
        return A.CreateSchedule(name, every, cron, when[2], missed, put, "ine" in c)

    def schedule_control(self, c):
        return A.ScheduleControl(str(c[0]).lower(), _name(c[1], "schedule name"))

    def drop_schedule(self, c):
        names = [x for x in c if isinstance(x, Token) and x.type == "NAME"]
        return A.ScheduleControl("drop", _name(names[0], "schedule name"), "ie" in c)

    def show_schedules(self, c):
        return A.ShowSchedules()
