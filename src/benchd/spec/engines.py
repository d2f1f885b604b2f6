"""The options of each generation engine: transformers' continuous batching, static generate(), an OpenAI-compatible
server."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from benchd.spec.fields import (
    INT_MAX,
    MODEL_MAX,
    NAME_MAX,
    PATH_MAX,
    FreeFormMapping,
    PositiveInt,
)
from benchd.spec.fields import Strict as _Strict

THREADS_MAX = 4096  # torch's CPU threads: admission holds a spec to the cores its worker may use
# What one openai client process holds resident (an interpreter with uvloop, orjson and httptools, and its
# connections' buffers): 64 of them measured 1.57 GB. Admission counts client_processes of them against host RAM.
CLIENT_PROCESS_BYTES = 32 << 20
# A timeout every timer and socket takes (a loop's call_later, a socket's timeval overflow past ~1e9 s): a day.
TIMEOUT_MAX_S = 86_400.0
Timeout = Annotated[float, Field(gt=0, le=TIMEOUT_MAX_S)]
# What a URL may hold (RFC 3986's unreserved and reserved characters, and %-escapes): no space, control character,
# backslash or other character that a request line or a client's parser would read differently.
URL = Annotated[str, Field(max_length=2048, pattern=r"^https?://[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+$")]


class TransformersOptions(_Strict):
    """Continuous batching settings. None means: benchd's default for the device (see engines)."""

    block_size: Annotated[int, Field(ge=4, le=INT_MAX)] | None = None  # transformers' paged cache minimum
    num_blocks: PositiveInt | None = None
    max_batch_tokens: PositiveInt | None = None
    max_requests_per_batch: PositiveInt | None = None
    use_cuda_graph: bool | None = None
    use_async_batching: bool | None = None
    compile_level: Annotated[int, Field(ge=0, le=3)] | None = None
    # torch's intra-op CPU threads while the engine runs (the paged sdpa path builds each step's attention mask with
    # CPU tensor ops on the generation thread); not a transformers setting
    cpu_threads: Annotated[int, Field(ge=1, le=THREADS_MAX)] | None = None
    library_defaults: bool = False  # pass nothing benchd would choose: transformers' own defaults


class StaticOptions(_Strict):
    batch_size: PositiveInt = 8


class OpenAIOptions(_Strict):
    """An OpenAI-compatible server (vLLM, TGI, SGLang, `transformers serve`, …), driven with streaming requests."""

    base_url: URL = "http://127.0.0.1:8000/v1"
    model: Annotated[str, Field(min_length=1, max_length=MODEL_MAX)] | None = None  # the served model's name; default: RunSpec.model
    api: Literal["completions", "chat"] = "completions"
    # The output limit's field: max_tokens is read by vLLM, TGI, SGLang and transformers serve on both APIs;
    # OpenAI's own chat API wants max_completion_tokens.
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    api_key_env: Annotated[str, Field(max_length=NAME_MAX, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None  # read at run time
    extra_body: FreeFormMapping = Field(default_factory=dict)  # merged into every request (ignore_eos, …)
    # include_usage gives the final count; continuous_usage_stats (vLLM) a running count on every chunk.
    stream_options: FreeFormMapping | None = Field(default_factory=lambda: {"include_usage": True})
    tokenizer: Annotated[str, Field(max_length=PATH_MAX)] | None = None  # a local directory: sizes synthetic prompts and counts tokens in text
    # default: the workload's concurrency, or 1,024 a client process in open loop
    max_connections: PositiveInt | None = None
    # Client processes sharing the arrival schedule (round robin), each an event loop on a core of its own:
    # one holds about 800 requests/s on time (docs/benchmarks/load-generators.md); more for higher rates on more cores.
    # Each is an interpreter of about 25 MiB (counted by admission against host RAM), ended after a minute idle.
    client_processes: Annotated[int, Field(ge=1, le=64)] = 1
    connect_timeout_s: Timeout = 10.0  # a connection; and the whole check that the server answers, before the run
    stall_timeout_s: Timeout = 60.0  # no byte for this long (the first byte too): the request fails as a timeout
    head_timeout_s: Timeout = 60.0  # the response's head, from the request's write: bytes that never make one fail
    request_timeout_s: Timeout | None = None  # whole request, first byte to last (else the run's end bounds it)
    # The server's Prometheus page (vLLM, SGLang, TGI): read by the daemon every metrics_interval_s during the run
    # into the run's server timeline and benchd_server_* gauges (benchd.measure.server_metrics). None: not read.
    metrics_url: URL | None = None
    metrics_interval_s: Annotated[float, Field(ge=0.1, le=60.0)] = 1.0

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


EngineName = Literal["transformers", "static", "openai"]
