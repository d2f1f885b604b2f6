"""The daemon's side of worker processes: spawned, fed, watched, restarted."""
