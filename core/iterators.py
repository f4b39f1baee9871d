"""Iterator helpers shared by the layers above."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def prefetch(it: Iterator[T], name: str = "prefetch") -> Iterator[T]:
    """Iterate `it` one item ahead in a worker thread (at most two items in memory), so producing the next item
    (reading and decoding a file: Arrow releases the GIL) overlaps the caller's work on this one. `it` must not
    yield None."""
    with ThreadPoolExecutor(1, thread_name_prefix=name) as ex:
        fut = ex.submit(next, it, None)
        while True:
            item = fut.result()
            if item is None:
                return
            fut = ex.submit(next, it, None)
            yield item
