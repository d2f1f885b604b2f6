"""Worker processes: each owns an engine and the device; the daemon supervises them."""
