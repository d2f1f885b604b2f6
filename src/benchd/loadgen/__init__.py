"""Load generation in the worker: arrivals, request contents, stages that send and record."""
