"""A small client for a running daemon, used by the CLI."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx

DEFAULT_SERVER = "http://127.0.0.1:8000"


class DaemonError(Exception):
    pass


class Client:
    def __init__(self, server: str | None = None, token: str | None = None, timeout_s: float = 30.0) -> None:
        self.server = (server or os.environ.get("BENCHD_SERVER") or DEFAULT_SERVER).rstrip("/")
        token = token or os.environ.get("BENCHD_API_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout_s)

    def _check(self, response: httpx.Response) -> Any:
        if response.is_success:
            return response.json() if response.content else None
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text
        if isinstance(detail, list):  # validation problems: one line per field
            detail = "\n".join(f"{'.'.join(str(p) for p in d['loc'][1:])}: {d['msg']}" for d in detail)
        raise DaemonError(f"{response.status_code}: {detail}")

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self._check(self.http.post("/runs", json=spec))

    def run(self, run_id: str) -> dict[str, Any]:
        return self._check(self.http.get(f"/runs/{run_id}"))

    def runs(self, **filters: Any) -> dict[str, Any]:
        return self._check(self.http.get("/runs", params={k: v for k, v in filters.items() if v is not None}))

    def get(self, path: str, params: dict[str, Any] | None = None, text: bool = False) -> Any:
        response = self.http.get(path, params={k: v for k, v in (params or {}).items() if v is not None})
        if text and response.is_success:
            return response.text
        return self._check(response)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._check(self.http.post(path, json=body))

    def put(self, path: str, body: dict[str, Any]) -> Any:
        return self._check(self.http.put(path, json=body))

    def cancel(self, run_id: str) -> dict[str, Any]:
        return self._check(self.http.delete(f"/runs/{run_id}"))

    def events(self, run_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event, data) pairs of the run's server-sent events, until its summary."""
        with self.http.stream("GET", f"/runs/{run_id}/events", timeout=None) as response:
            if not response.is_success:
                response.read()
                self._check(response)
            kind, data = "message", []
            for line in response.iter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif not line and data:
                    yield kind, json.loads("\n".join(data))
                    kind, data = "message", []
