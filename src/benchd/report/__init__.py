"""Reports: a run's files, HTML pages and charts, the terminal's tables."""
