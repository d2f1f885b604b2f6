"""Any OpenAI-compatible server (vLLM, TGI, SGLang, `transformers serve`, …), driven from client processes of benchd's
own: its options, its spec and its record (the engine itself is engines/openai/engine.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from benchd.spec.engines import EngineRecord
from benchd.spec.fields import MODEL_MAX, NAME_MAX, PATH_MAX, FreeFormMapping, PositiveInt, Strict
from benchd.spec.run import GenerateSpec

# What one openai client process holds resident (an interpreter with uvloop, orjson and httptools, and its
# connections' buffers): 64 of them measured 1.57 GB. Admission counts client_processes of them against host RAM.
CLIENT_PROCESS_BYTES = 32 << 20
# A timeout every timer and socket takes (a loop's call_later, a socket's timeval overflow past ~1e9 s): a day.
TIMEOUT_MAX_S = 86_400.0
Timeout = Annotated[float, Field(gt=0, le=TIMEOUT_MAX_S)]
# What a URL may hold (RFC 3986's unreserved and reserved characters, and %-escapes): no space, control character,
# backslash or other character that a request line or a client's parser would read differently.
URL = Annotated[str, Field(max_length=2048, pattern=r"^https?://[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+$")]


class OpenAIOptions(Strict):
    """An OpenAI-compatible server (vLLM, TGI, SGLang, `transformers serve`, …), driven with streaming requests."""

    base_url: URL = "http://127.0.0.1:8000/v1"
    """The server's OpenAI API (…/v1); over HTTP, only on the hosts BENCHD_OPENAI__HOSTS allows (loopback by default).
    """
    model: Annotated[str, Field(min_length=1, max_length=MODEL_MAX)] | None = None
    """The served model's name in each request; default: the spec's model."""
    api: Literal["completions", "chat"] = "completions"
    """Streaming /v1/completions, or /v1/chat/completions (the prompt as a user message)."""
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """The output limit's field: max_tokens is read by vLLM, TGI, SGLang and transformers serve on both APIs; OpenAI's
    own chat API wants max_completion_tokens."""
    api_key_env: Annotated[str, Field(max_length=NAME_MAX, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None
    """The variable whose value is sent as the API key (Bearer), read at run time; over HTTP, only those
    BENCHD_OPENAI__KEY_ENVS lists, never a BENCHD_* one."""
    extra_body: FreeFormMapping = Field(default_factory=dict)
    """Merged into every request (ignore_eos, …); never a field benchd sets itself."""
    stream_options: FreeFormMapping | None = Field(default_factory=lambda: {"include_usage": True})
    """Sent as the request's stream_options: include_usage gives the final count; continuous_usage_stats (vLLM) a
    running count on every chunk."""
    tokenizer: Annotated[str, Field(max_length=PATH_MAX)] | None = None
    """A local directory holding the served model's tokenizer: it sizes synthetic prompts in tokens and counts tokens in
    text."""
    max_connections: PositiveInt | None = None
    """Connections each client process keeps; default: the workload's concurrency, or 1,024 a client process in open
    loop."""
    client_processes: Annotated[int, Field(ge=1, le=64)] = 1
    """Client processes sharing the arrival schedule (round robin), each an event loop on a core of its own: one holds
    about 800 requests/s on time; each an interpreter of about 25 MiB, counted against host RAM."""
    connect_timeout_s: Timeout = 10.0
    """A connection, and the whole check that the server answers before the run, in seconds."""
    stall_timeout_s: Timeout = 60.0
    """No byte for this long (the first byte too): the request fails as a timeout."""
    head_timeout_s: Timeout = 60.0
    """The response's head, from the request's write: bytes that never make one fail the request."""
    request_timeout_s: Timeout | None = None
    """The whole request, first byte to last; default: the run's end bounds it."""
    metrics_url: URL | None = None
    """The server's Prometheus page (vLLM, SGLang, TGI): read by the daemon every metrics_interval_s during the run into
    the run's server timeline and benchd_server_* gauges; over HTTP, only on the allowed hosts."""
    metrics_interval_s: Annotated[float, Field(ge=0.1, le=60.0)] = 1.0
    """Seconds between reads of metrics_url."""

    @field_validator("api_key_env")
    @classmethod
    def _not_the_daemons(cls, name: str | None) -> str | None:
        if name is not None and name.upper().startswith("BENCHD_"):
            raise ValueError("a BENCHD_* variable holds benchd's own settings and secrets: never sent as a key")
        return name

    @model_validator(mode="after")
    def _reserved(self) -> OpenAIOptions:
        reserved = {"model", "prompt", "messages", "stream", "max_tokens", "max_completion_tokens",
                    "stream_options"} & set(self.extra_body)
        if reserved:
            raise ValueError(f"extra_body: {', '.join(sorted(reserved))} set by benchd itself")
        return self


# How the engine says its server did not answer (engines/openai/engine.py asks it before any request).
UNANSWERED = "openai.base_url: nothing answers at"


class OpenAISpec(GenerateSpec):
    """Generation by an OpenAI-compatible server, driven with streaming requests."""

    engine: Literal["openai"]
    """An OpenAI-compatible server, driven with streaming requests from client processes of benchd's own."""
    openai: OpenAIOptions = Field(default_factory=OpenAIOptions)
    """The server, its API and the client's settings."""

    @property
    def options(self) -> OpenAIOptions:
        return self.openai

    @model_validator(mode="after")
    def _tokenizer(self) -> OpenAISpec:
        if self.workload.dataset is None and self.openai.tokenizer is None:
            raise ValueError("openai.tokenizer: synthetic prompts are sized in tokens, which needs the served "
                             "model's tokenizer (a local directory); or give workload.dataset")
        return self

    def paths(self) -> dict[str, str]:
        tokenizer = {"openai.tokenizer": self.openai.tokenizer} if self.openai.tokenizer is not None else {}
        return {**tokenizer, **super().paths()}

    def urls(self) -> dict[str, str]:
        return {f"openai.{field}": url for field, url in (("base_url", self.openai.base_url),
                                                          ("metrics_url", self.openai.metrics_url)) if url is not None}

    def key_envs(self) -> dict[str, str]:
        return {"openai.api_key_env": self.openai.api_key_env} if self.openai.api_key_env is not None else {}

    def host_bytes(self) -> tuple[tuple, int, str]:
        n = self.openai.client_processes
        return ("openai", "client_processes"), n * CLIENT_PROCESS_BYTES, f"{n} client processes"

    def tokenizer(self) -> str | None:
        return self.openai.tokenizer

    def server(self) -> str:
        return self.openai.base_url

    def served_model(self) -> str:
        return self.openai.model or self.model

    def operation(self) -> str:
        return "chat" if self.openai.api == "chat" else "text_completion"

    def metrics_page(self) -> tuple[str, float] | None:
        return (self.openai.metrics_url, self.openai.metrics_interval_s) if self.openai.metrics_url else None

    def load_problem(self, first: str) -> str:
        if UNANSWERED in first:
            why = first.split(UNANSWERED, 1)[1].split(": ", 1)[-1]
            return (f"the server at {self.openai.base_url} (openai.base_url) did not answer: {why}; start it, or "
                    "give the URL it serves at")
        if self.openai.tokenizer is None:
            return (f"could not prepare the run: {first} (openai.tokenizer is unset: prompts come from "
                    "workload.dataset and are counted in characters)")
        return (f"could not load the tokenizer {self.openai.tokenizer!r}: {first}; give a local directory holding "
                "the served model's tokenizer (tokenizer.json or its files)")


ENGINE = EngineRecord(name="openai", spec=OpenAISpec, create="benchd.engines.openai.engine:create", loads_model=False,
                      stamps="stream", genai_provider="openai")
