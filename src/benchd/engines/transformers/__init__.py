"""transformers' continuous batching in benchd's worker, the default engine: spec.py declares it (no torch), engine.py
runs it."""
