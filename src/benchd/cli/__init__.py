"""The benchd command line: `benchd serve`, `run`, `runs`, `compare`, `matrices`, `baseline`, `history`, `changes`,
`workloads`, `schedules` (cli.main parses, the modules beside it carry each command out; cli.client talks to a
daemon, trusting none)."""

# Exit codes of every command (docs/getting-started.md): done; the run failed (or, with --fail-on-regression, a
# figure is slower); the spec, the settings or the arguments are bad (the message names the field); the run
# succeeded but a stage's verdict is INVALID (with --fail-on-invalid); interrupted with Ctrl-C (what was measured is
# kept).
EXIT_OK, EXIT_FAILED, EXIT_BAD_SPEC, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
