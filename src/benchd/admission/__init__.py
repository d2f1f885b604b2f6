"""What may run, judged before it is queued, for the daemon's HTTP API and the command line alike: a spec's limits,
its memory plan, its time at its device's measured speed, and what it may reach (paths under the roots, hosts and
keys the settings allow). What it refuses is a Refused naming each field and why; the API answers it with a 422,
the command line with its lines."""

from benchd.admission.memory import Memory
from benchd.admission.policy import admit
from benchd.admission.refusal import Later, Problem, Refused, Unmeasured

__all__ = ["Later", "Memory", "Problem", "Refused", "Unmeasured", "admit"]
