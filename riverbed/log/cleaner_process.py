"""``python -m riverbed.log.cleaner_process PARENT_PID``: step 2 of a cleaning in a child.

Reads a pickled :class:`~riverbed.log.cleaner.CleaningJob` on stdin, runs
:func:`~riverbed.log.cleaner.clean`, writes the pickled
:class:`~riverbed.log.cleaner.CleaningResult` on stdout (pickle: between the broker and its
own child only). How the broker runs cleanings, see riverbed.broker.log_maintenance.

The child lowers its CPU priority to the lowest (nice 19): cleaning is background work, and
on a small machine the event loop and the producers it serves should win the cores. It
still gets a share when every core is busy, so cleaning never starves (measured in
BENCHMARKS.md: nice 10 cost producers 30% of their throughput while it ran, nice 19 20%).

The child asks Linux to kill it when its parent dies (PR_SET_PDEATHSIG): a cleaning must
never outlive the broker and write ``.cleaned`` files into a directory that a restarted
broker owns.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys

from riverbed.log.cleaner import CleaningJob
from riverbed.log.compaction import clean

_PR_SET_PDEATHSIG = 1
CLEANER_NICENESS = 19
"""The lowest priority; see the module docstring for why and what it cost at 10."""


def _die_with_parent(parent_pid: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def main() -> None:
    _die_with_parent(int(sys.argv[1]))
    os.nice(CLEANER_NICENESS)
    job = pickle.load(sys.stdin.buffer)
    if not isinstance(job, CleaningJob):
        raise SystemExit("expected a CleaningJob on stdin")
    sys.stdout.buffer.write(pickle.dumps(clean(job)))


if __name__ == "__main__":
    main()
