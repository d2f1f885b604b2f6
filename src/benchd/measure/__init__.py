"""Every figure derived from the stamps: records, summaries, verdicts, comparisons, run results."""
