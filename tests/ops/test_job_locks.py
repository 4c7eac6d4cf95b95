"""The jobs' lock seam (apps/ops/jobs.py) against one model: a run of a job proceeds only while no
other session holds that job's lock, and a lock is free again once its holder leaves (also by an
exception). Another thread is another database session."""

from __future__ import annotations

import queue
import threading
from contextlib import ExitStack

import pytest
from django.db import connection

from apps.ops import jobs


class Session(threading.Thread):
    """A holder in its own thread (and so its own database connection), driven step by step."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.todo, self.done = queue.Queue(), queue.Queue()
        self.start()

    def run(self) -> None:
        stacks: dict[str, ExitStack] = {}
        try:
            while (step := self.todo.get()) is not None:
                verb, name = step
                if verb == "enter":
                    stacks[name] = ExitStack()
                    self.done.put(stacks[name].enter_context(jobs.exclusive(name)))
                elif verb == "leave":
                    stacks.pop(name).close()
                    self.done.put(None)
                else:  # "fail": enter, raise inside, report whether the exception came out
                    try:
                        with jobs.exclusive(name):
                            raise RuntimeError("job failed")
                    except RuntimeError:
                        self.done.put("raised")
        finally:
            connection.close()

    def do(self, verb: str, name: str):
        self.todo.put((verb, name))
        return self.done.get(timeout=10)

    def stop(self) -> None:
        self.todo.put(None)
        self.join(10)


def model(steps: list[tuple[int, str, str]]) -> list:
    """What each step answers: enter is True unless another session holds the name."""
    held: dict[str, int] = {}
    out: list = []
    for who, verb, name in steps:
        if verb == "enter":
            got = name not in held
            if got:
                held[name] = who
            out.append(got)
        elif verb == "leave":
            if held.get(name) == who:
                del held[name]
            out.append(None)
        else:
            out.append("raised")
    return out


STEPS = [
    (0, "enter", "prune_nonces"),
    (1, "enter", "prune_nonces"),  # held by session 0: skip
    (1, "enter", "purge_pending_events"),  # another job: proceeds
    (2, "enter", "purge_pending_events"),
    (1, "leave", "prune_nonces"),  # a run that skipped leaves without releasing anything
    (2, "enter", "prune_nonces"),  # still held by 0
    (0, "leave", "prune_nonces"),
    (2, "enter", "prune_nonces"),  # free again
    (0, "fail", "purge_contract_requests"),  # a failing run ...
    (1, "enter", "purge_contract_requests"),  # ... released its lock
    (1, "leave", "purge_contract_requests"),
    (2, "leave", "prune_nonces"),
    (1, "leave", "purge_pending_events"),
    (0, "enter", "purge_pending_events"),
    (0, "leave", "purge_pending_events"),
]


@pytest.mark.django_db(transaction=True)
def test_job_locks_match_the_model():
    sessions = [Session() for _ in range(3)]
    try:
        got = [sessions[who].do(verb, name) for who, verb, name in STEPS]
    finally:
        for s in sessions:
            s.stop()
    assert got == model(STEPS)
    assert got[:3] == [True, False, True]


@pytest.mark.django_db(transaction=True)
def test_run_job_skips_while_another_session_runs_it(tenant_a):
    holder = Session()
    try:
        assert holder.do("enter", "purge_pending_events") is True
        assert jobs.run_job("purge_pending_events") == "purge_pending_events: skipped, another run is in progress"
        holder.do("leave", "purge_pending_events")
        assert jobs.run_job("purge_pending_events").startswith("purged 0 expired pending events in ")
    finally:
        holder.stop()
