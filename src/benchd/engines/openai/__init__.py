"""Any OpenAI-compatible server, driven from client processes of benchd's own."""
