"""The run history: runs, their stages, per-request records and timings, schedules, baselines, matrices and change
points. The store (store/database.py) writes typed operations (store/operations.py) through the journaled spool
(store/spool.py); schema.py and migrations/ are its tables."""
