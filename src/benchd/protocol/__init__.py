"""The messages between the daemon and its workers (messages, events: typed records), their one codec, and a run's
outbox of events."""
