"""A small client for a running daemon, used by the CLI."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx

DEFAULT_SERVER = "http://127.0.0.1:8000"


class CommandError(Exception):
    """A command of the command line that cannot go on: str() is one line naming what failed and what to do;
    detail (the full error) is for --debug."""

    def __init__(self, message: str, detail: str | None = None, exit_code: int = 1) -> None:
        super().__init__(message)
        self.detail = detail
        self.exit_code = exit_code  # benchd.cli's EXIT_*: 1 failed, 2 bad arguments or settings


class DaemonError(CommandError):
    """What a daemon answered with an error, or why none answered: str() is one line, saying what to do."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status; None when no daemon answered

    @property
    def unreachable(self) -> bool:
        return self.status is None


class _Transport(httpx.HTTPTransport):
    """Every request, streams included: a daemon that cannot be reached is a DaemonError saying so."""

    def __init__(self, server: str) -> None:
        super().__init__()
        self.server = server

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return super().handle_request(request)
        except httpx.TimeoutException:
            raise DaemonError(f"the benchd daemon at {self.server} did not answer in time: check that it runs and "
                              f"is not overloaded (curl {self.server}/healthz)") from None
        except httpx.TransportError as error:
            reason = str(error).split("] ")[-1] or type(error).__name__  # "[Errno 111] Connection refused"
            raise DaemonError(f"cannot reach the benchd daemon at {self.server} ({reason}): start one with "
                              "`benchd serve`, or give its URL with --server or BENCHD_SERVER") from None


class Client:
    def __init__(self, server: str | None = None, token: str | None = None, timeout_s: float = 30.0) -> None:
        self.server = (server or os.environ.get("BENCHD_SERVER") or DEFAULT_SERVER).rstrip("/")
        if not self.server.startswith(("http://", "https://")):
            raise DaemonError(f"the daemon's URL {self.server!r} (--server or BENCHD_SERVER) must start with http:// "
                              f"or https://, e.g. {DEFAULT_SERVER}")
        token = token or os.environ.get("BENCHD_API_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout_s,
                                 transport=_Transport(self.server))

    def _check(self, response: httpx.Response) -> Any:
        try:
            body = response.json() if response.content else None
        except ValueError:  # not JSON: not a benchd daemon, or a proxy's page
            body = None
            if response.is_success:
                raise DaemonError(f"{self.server} answered {response.request.url.path} with something other than "
                                  "JSON: is it a benchd daemon? (--server or BENCHD_SERVER)",
                                  response.status_code) from None
        if response.is_success:
            return body
        detail = body.get("detail") if isinstance(body, dict) else response.text.strip()[:200]
        if isinstance(detail, list):  # validation problems: one line per field
            detail = "\n".join(f"{'.'.join(str(p) for p in d['loc'][1:])}: {d['msg']}" for d in detail)
        if response.status_code == 401:
            detail = f"{detail}: set BENCHD_API_TOKEN to the daemon's token"
        raise DaemonError(f"{response.status_code}: {detail}", response.status_code)

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

    def delete(self, path: str) -> Any:
        return self._check(self.http.delete(path))

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
