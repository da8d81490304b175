"""Work run on a machine's second core while this process does its own: a forked child process.

The converter's steps are single-threaded Python for the most part (torch.export's tracing, transformers'
generate()), so two independent ones (the graphs' traces and the parity checks' PyTorch side; the gate's greedy and
beam search) take the time of the longer one on two cores instead of their sum. Threads would not: the Python parts hold the
interpreter's lock. A forked child starts at once (no imports) and shares this process's memory pages, copy on
write: work that only reads the model's weights adds no copy of them.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional


def cores() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def can_fork() -> bool:
    return cores() >= 2 and "fork" in multiprocessing.get_all_start_methods()


class Job:
    """`work()` running in a forked child (or already run here, where there is one core or no fork); `result()`
    waits for it and returns what it returned, or raises what it raised (the same exception, or a RuntimeError with
    its text where it does not unpickle)."""

    def __init__(self, work: Callable[[], Any], what: str) -> None:
        self.what = what
        self.child = None
        if not can_fork():
            self._done: Optional[tuple] = (True, work())
            return
        self._done = None
        context = multiprocessing.get_context("fork")
        self.receive, send = context.Pipe(duplex=False)
        sys.stdout.flush()
        sys.stderr.flush()
        self.child = context.Process(target=_child, args=(work, send), name=f"seq2onnx: {what}", daemon=True)
        self.child.start()
        send.close()

    def result(self) -> Any:
        if self._done is None:
            try:
                sent = self.receive.recv()          # before join: a large message would block the child's exit
            except EOFError:
                self.child.join()
                sent = (False, (None, f"{self.what}: its process ended without a result (exit code "
                                      f"{self.child.exitcode}; killed for memory?)"))
            finally:
                self.child.join()
                self.receive.close()
            self._done = sent
        ok, value = self._done
        if not ok:
            raise _exception(*value)
        return value

    def stop(self) -> None:
        """Kill the child (the work's result is not wanted)."""
        if self.child is not None and self._done is None:
            self.child.kill()
            self.child.join()
            self.receive.close()
            self._done = (False, (None, f"{self.what}: stopped"))


@contextmanager
def beside(work: Callable[[], Any], what: str) -> Iterator[Job]:
    """`work()` in a forked child while the with-block runs here; the block's end waits for the child and raises
    what `work` raised; the block may take its result earlier (`job.result()`). Where the block raises, the child is
    killed."""
    job = Job(work, what)
    try:
        yield job
    except BaseException:
        job.stop()
        raise
    job.result()


def _exception(pickled: Optional[bytes], text: str) -> BaseException:
    try:
        return pickle.loads(pickled) if pickled is not None else RuntimeError(text)
    except Exception:
        return RuntimeError(text)


def _child(work: Callable[[], Any], send) -> None:
    # the parent's OpenMP threads do not exist in a forked child: torch on one thread never enters a parallel region
    import torch
    torch.set_num_threads(1)
    try:
        value = work()
    except BaseException as exc:             # noqa: BLE001 - everything goes back to the parent, which raises it
        try:
            pickled: Optional[bytes] = pickle.dumps(exc)
        except Exception:
            pickled = None
        send.send((False, (pickled, f"{type(exc).__name__}: {exc}")))
        return
    send.send((True, value))
