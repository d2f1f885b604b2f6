"""The benchd command line."""
