"""Iterator helpers shared by the layers above."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Prefetch(Generic[T]):
    """Iterate `it` one item ahead in a worker thread (at most two items in memory), so producing the next item
    (reading and decoding a file: Arrow releases the GIL) overlaps the caller's work on this one. `it` must not
    yield None.

    The first item is asked for at construction, so a caller can start the read, do other work (routing runs its
    data-quality suite meanwhile) and then iterate. `close()` (or leaving a `with` block) waits for the item in
    flight and stops the thread; a fully consumed Prefetch closes itself.
    """

    def __init__(self, it: Iterator[T], name: str = "prefetch") -> None:
        self._it = it
        self._ex = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._fut: Future[T | None] | None = self._ex.submit(next, it, None)

    def __iter__(self) -> Prefetch[T]:
        return self

    def __next__(self) -> T:
        if self._fut is None:
            raise StopIteration
        try:
            item = self._fut.result()
        except BaseException:
            self.close()
            raise
        if item is None:
            self.close()
            raise StopIteration
        self._fut = self._ex.submit(next, self._it, None)
        return item

    def close(self) -> None:
        self._fut = None
        self._ex.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Prefetch[T]:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


def prefetch(it: Iterator[T], name: str = "prefetch") -> Prefetch[T]:
    """`Prefetch(it, name)`: iterate `it` one item ahead in a worker thread (see Prefetch)."""
    return Prefetch(it, name)


class WriteBehind:
    """Run jobs one at a time, in order, in a worker thread, one job behind the caller: the caller prepares item k+1
    while item k is written (Parquet encoding and commits release the GIL). `submit` first waits for the job
    before it, so at most one job is in flight; each finished job's result goes to `on_done`, in the caller's
    thread and before the next job starts (so a progress report there describes what is written, and nothing
    more). A job's exception is raised by the `submit` or `drain` that waits for it, and no later job is started.
    Leaving the `with` block waits for the job in flight."""

    def __init__(self, name: str = "write-behind", on_done: Callable[[Any], None] | None = None) -> None:
        self._ex = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._pending: Future[Any] | None = None
        self._on_done = on_done
        self.started = False  # has any job been submitted

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        self.drain()
        self._pending = self._ex.submit(fn, *args)
        self.started = True

    def drain(self) -> None:
        """Wait for the job in flight (if any) and hand its result to `on_done`."""
        fut, self._pending = self._pending, None
        if fut is not None:
            result = fut.result()
            if self._on_done is not None:
                self._on_done(result)

    def __enter__(self) -> WriteBehind:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._ex.shutdown(wait=True)
