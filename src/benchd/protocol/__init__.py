"""The messages between the daemon and its workers, and a run's outbox of events."""
