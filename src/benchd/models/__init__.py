"""Models: presets as data, what a run needs in memory (no torch), and loading (torch, worker only)."""
