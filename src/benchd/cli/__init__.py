"""The benchd command line: `benchd serve`, `run`, `runs`, `compare`, `matrices` (cli.main parses, the modules beside
it carry each command out)."""

# Exit codes of every command: done; the run failed (or found a regression); the spec or the arguments are bad (the
# message names the field); interrupted with Ctrl-C (what was measured is kept).
EXIT_OK, EXIT_FAILED, EXIT_BAD_SPEC, EXIT_INTERRUPTED = 0, 1, 2, 130
