"""``python -m riverbed.log.cleaner_process PARENT_PID``: step 2 of a cleaning in a child.

Reads a pickled :class:`~riverbed.log.cleaner.CleaningJob` on stdin, runs
:func:`~riverbed.log.cleaner.clean`, writes the pickled
:class:`~riverbed.log.cleaner.CleaningResult` on stdout (pickle: between the broker and its
own child only). How the broker runs cleanings, see riverbed.broker.log_maintenance.

The child runs at the lowest CPU priority Linux has (SCHED_IDLE, and nice 19 should the
policy be refused): cleaning is background work, and on a small machine the event loop and
the producers it serves should win the cores. It still gets a small share when every core
is busy, so cleaning slows down under load but does not stop. Measured in BENCHMARKS.md:
while a cleaning ran, producers lost about 30% of their throughput at nice 10, 20-30% at
nice 19, 14-24% with SCHED_IDLE.

The child asks Linux to kill it when its parent dies (PR_SET_PDEATHSIG): a cleaning must
never outlive the broker and write ``.cleaned`` files into a directory that a restarted
broker owns.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import sys

from riverbed.log.cleaner import CleaningJob
from riverbed.log.compaction import clean

_PR_SET_PDEATHSIG = 1
CLEANER_NICENESS = 19
"""The lowest nice value (see the module docstring)."""


def _die_with_parent(parent_pid: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def main() -> None:
    _die_with_parent(int(sys.argv[1]))
    os.nice(CLEANER_NICENESS)
    with contextlib.suppress(OSError):  # a container may forbid it: nice 19 stays
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    job = pickle.load(sys.stdin.buffer)
    if not isinstance(job, CleaningJob):
        raise SystemExit("expected a CleaningJob on stdin")
    sys.stdout.buffer.write(pickle.dumps(clean(job)))


if __name__ == "__main__":
    main()
