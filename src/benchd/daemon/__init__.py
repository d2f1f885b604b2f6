"""The daemon: its settings, run queue, lifecycle of a run, schedules, matrices and what follows a run."""
