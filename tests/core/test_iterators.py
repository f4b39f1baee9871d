"""The pipeline helpers routing and the rollout ingest stand on: order, one job in flight, errors that stop the
line, and a read-ahead that starts at once and closes."""

from __future__ import annotations

import threading
import time

import pytest

from core.iterators import Prefetch, WriteBehind


def test_write_behind_runs_in_order_one_at_a_time_and_reports_before_the_next_starts() -> None:
    log: list[str] = []
    running = threading.Semaphore(1)

    def job(i: int) -> int:
        assert running.acquire(blocking=False), "two jobs in flight"
        try:
            log.append(f"run {i}")
            time.sleep(0.01)
            return i
        finally:
            running.release()

    def done(r: int) -> None:  # slow: a next job started before it would log in between
        time.sleep(0.02)
        log.append(f"done {r}")

    with WriteBehind("t", on_done=done) as w:
        for i in range(4):
            w.submit(job, i)
        w.drain()
    assert log == ["run 0", "done 0", "run 1", "done 1", "run 2", "done 2", "run 3", "done 3"]


def test_write_behind_raises_a_jobs_error_and_starts_nothing_after_it() -> None:
    ran: list[int] = []

    def job(i: int) -> None:
        if i == 1:
            raise ValueError("disk full")
        ran.append(i)

    with pytest.raises(ValueError, match="disk full"), WriteBehind("t") as w:
        for i in range(4):
            w.submit(job, i)  # the submit after job 1 waits for it and raises
    assert ran == [0]


def test_prefetch_reads_ahead_at_once_and_closes() -> None:
    asked: list[int] = []

    def items():
        for i in range(3):
            asked.append(i)
            yield i

    p = Prefetch(items(), "t")
    deadline = time.time() + 5
    while not asked and time.time() < deadline:  # the first item is asked for before anyone iterates
        time.sleep(0.005)
    assert asked == [0]
    with p:
        assert next(p) == 0
    assert list(p) == []  # closed: nothing more, and no thread left reading

    def boom():
        yield 1
        raise OSError("gone")

    with Prefetch(boom(), "t") as q:
        assert next(q) == 1
        with pytest.raises(OSError, match="gone"):
            next(q)
