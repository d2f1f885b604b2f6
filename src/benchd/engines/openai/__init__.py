"""Any OpenAI-compatible server, driven from client processes of benchd's own: spec.py declares it (no torch, nor
anything a client process does not need); engine.py drives it from the worker; client.py is a client process."""
