"""OpenMP threads that sleep while they wait: asked for before torch loads its OpenMP runtime.

torch runs its CPU kernels in OpenMP teams. With no wait policy set, GNU OpenMP (torch's on Linux) lets a team's idle
threads spin at every barrier for a few milliseconds, unless the process's OpenMP threads outnumber its CPUs, when it
spins only briefly. On a machine other processes keep busy, a spinning thread holds a core its team-mate needs,
and each of the thousands of small parallel regions of a decode step can wait a scheduler time slice: the hf
engine's batches ran 10-100x slower. Nothing in the engine's thread caused it: the same batch on the main thread
is as slow. It looked like a first-batch cost because a second team (the trainer's, from its first update on the
main thread) pushed the process's OpenMP threads past the CPU count, which cut the spinning short for the batches
after it. PASSIVE lets waiting threads sleep at once, whatever the number of teams and the load
(bench/engine_first_batch.py, docs/benchmarks.md).

The runtime reads the variable once, when torch is first imported: `prefer_passive_waits()` is called by the
`astuner` command, `tune()` and `astuner chat` before anything imports torch. Nothing here imports torch.
"""

from __future__ import annotations

import os
import sys

# a wait policy the user chose (the standard variable, GNU OpenMP's spin count, LLVM / Intel OpenMP's block time)
POLICY_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def prefer_passive_waits() -> str:
    """OMP_WAIT_POLICY=PASSIVE for this process (and the processes it starts) unless the user set a wait policy.
    Returns "set"; "user" when a policy variable was set already (kept as it is); "late" when torch is imported
    already (its OpenMP runtime has read the environment: nothing is changed)."""
    if any(name in os.environ for name in POLICY_VARIABLES):
        return "user"
    if "torch" in sys.modules:
        return "late"
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return "set"


def threads_spin_while_waiting() -> bool:
    """True when torch's OpenMP threads wait with the runtime's default (spinning): no wait-policy variable is set.
    (This process never sets one after torch is loaded: `prefer_passive_waits` refuses then.)"""
    return not any(name in os.environ for name in POLICY_VARIABLES)


SPINNING_NOTE = ("torch was imported before OMP_WAIT_POLICY was set, so its idle OpenMP threads spin: generation on "
                 "the CPU runs many times slower on a busy machine; set OMP_WAIT_POLICY=PASSIVE before torch is "
                 "imported")
