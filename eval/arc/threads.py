"""Worker threads for the vote: the few jobs it runs beside its main thread (the inputs' decode, the
report's pictures, the JSON files), as `concurrent.futures.ThreadPoolExecutor` ran them, without
importing that package at start-up (it imports `logging`, `traceback` and `string`: about 3 ms of a
vote's CPU, docs/notebook/2026-12-06-vote.md, fifth pass).

`Workers(n, name)` starts n threads that take the jobs in the order submitted; `submit(fn, *args)`
returns a `Job` whose `result()` waits for it and returns its value or raises its exception. Leaving
the `with` block waits for every job submitted (as the executor's `shutdown(wait=True)`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class Job:
    """One submitted call: its value or its exception once done."""

    __slots__ = ("fn", "args", "kwargs", "done", "value", "error")

    def __init__(self, fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def result(self) -> Any:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args, **self.kwargs)
        except BaseException as e:  # handed to whoever waits on it, as a Future does
            self.error = e
        finally:
            self.fn = self.args = self.kwargs = None  # type: ignore[assignment]  # its inputs freed once done
            self.done.set()


class Workers:
    """n threads running submitted jobs in order; the `with` block's end waits for them all."""

    def __init__(self, n: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True) for i in range(n)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Job:
        job = Job(fn, args, kwargs)
        self._jobs.put(job)
        return job

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            job.run()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for _ in self._threads:
            self._jobs.put(None)  # after every job submitted: each thread ends once the queue is drained
        for t in self._threads:
            t.join()


__all__ = ["Job", "Workers"]
