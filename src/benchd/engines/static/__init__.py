"""Static batches of generate() in benchd's worker, the baseline: spec.py declares it (no torch), engine.py runs it."""
