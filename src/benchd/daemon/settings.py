"""Daemon settings: environment (BENCHD_*), an optional YAML file (BENCHD_CONFIG), validated at start-up."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from benchd.measure.compare import CONFIDENCE, THRESHOLD
from benchd.measure.cost import Prices
from benchd.measure.fleet import FleetSettings
from benchd.measure.history import HistorySettings
from benchd.models.memory import MEMORY_FRACTION
from benchd.spec import NAME_MAX, GenerateSpec, Name, RunSpec
from benchd.spec.matrix import MatrixProblem, MatrixSpec, parse_matrix
from benchd.spec.validity import ValidityRules
from benchd.supervisor.environments import CURRENT
from benchd.supervisor.settings import WorkerSettings
from benchd.telemetry.metrics import HistogramBuckets, MetricsSettings
from benchd.worker.faults import Faults


class Limits(BaseModel):
    """What one HTTP-submitted spec may ask for; beyond these, 422."""

    model_config = ConfigDict(extra="forbid")

    max_requests: Annotated[int, Field(ge=1)] = 10_000  # measured requests (stop.requests), and warm-up ones apart
    max_prompt_tokens: Annotated[int, Field(ge=1)] = 32_768  # the longest prompt a workload may draw (a trace's too)
    max_output_tokens: Annotated[int, Field(ge=1)] = 8_192  # the longest output a workload may draw (a trace's too)
    # A stage of a generation run, or a whole timed run: refused when it could not end within it at its device's
    # measured speed (models/duration.py), stopped when it runs past it.
    max_duration_s: Annotated[float, Field(gt=0)] = 3_600.0
    # A generation run's stages together, as declared (each stage's stop.duration_s and warm-up seconds): refused
    # beyond it; a run still going at this plus max_duration_s is stopped.
    max_run_duration_s: Annotated[float, Field(gt=0)] = 14_400.0
    max_concurrency: Annotated[int, Field(ge=1)] = 1_024  # a closed loop's concurrency
    max_rate: Annotated[float, Field(gt=0)] = 10_000.0  # an open loop's rate (a ramp's, a capacity search's reach)
    max_stages: Annotated[int, Field(ge=1)] = 32  # load levels, warm-up study levels, kernel shapes × implementations
    max_steps: Annotated[int, Field(ge=1)] = 10_000  # a training step's warm-up + measured steps
    max_repeats: Annotated[int, Field(ge=1)] = 100_000  # a kernel's warm-up + measured calls
    max_flush_bytes: Annotated[int, Field(ge=0)] = 2**30  # a kernel's cache-flush buffer
    # A trace file's size (a million requests are about 63 MB): read once at admission, by a thread of its own within
    # 10 s; 64 KiB a line at most.
    max_trace_bytes: Annotated[int, Field(ge=1)] = 64 << 20
    # What one run may need in memory (weights, KV cache, activations, a timed run's tensors; estimated from the
    # spec): this many bytes, or unset: memory_fraction of the device's available memory (host RAM for a CPU, free
    # GPU memory for CUDA, counting what benchd itself holds and would release).
    memory_bytes: Annotated[int, Field(ge=1)] | None = None
    memory_fraction: Annotated[float, Field(gt=0, le=1)] = MEMORY_FRACTION  # workers plan GPU caches within it


class Reads(BaseModel):
    """What reading may cost the daemon, whoever asks: reads are anonymous unless need_token (docs/guides/daemon.md,
    "What a read may cost"); the costly ones wait for no one: past their slots they get a 503 with Retry-After."""

    model_config = ConfigDict(extra="forbid")

    need_token: bool = False  # GETs need BENCHD_API_TOKEN's bearer token too, all but /healthz, /readyz and /metrics
    compare_slots: Annotated[int, Field(ge=1)] = 2  # comparisons computed at once (GET /compare)
    compare_timeout_s: Annotated[float, Field(gt=0)] = 30.0  # a comparison's reads and statistics; past it, a 503
    # request records one comparison may load, both sides together (each about 1 KiB and its stamps): else a 422
    compare_max_requests: Annotated[int, Field(ge=1)] = 200_000
    # reads of a run's every record at once: /runs/{id}/requests, /timings, /report and a matrix's /report
    record_slots: Annotated[int, Field(ge=1)] = 4
    page_max_bytes: Annotated[int, Field(ge=1 << 16)] = 8 << 20  # a page of GET /runs, /matrices, /schedules
    fleet_slots: Annotated[int, Field(ge=1)] = 2  # fleet views built at once (GET /fleet); past them, a 503
    # the fleet's runs one view reads at most (each node's newest 20 of a workload): past it, a 422 asking for a
    # workload or GPU model; a node's own place is read within it too
    fleet_max_rows: Annotated[int, Field(ge=100)] = 100_000
    history_slots: Annotated[int, Field(ge=1)] = 2  # /history answers built at once (each up to 10,000 runs)
    history_timeout_s: Annotated[float, Field(gt=0)] = 30.0  # building one; past it, a 503
    # Built /history answers kept, until their workload gets a run or an analysis (the newest used kept first)
    history_kept_bytes: Annotated[int, Field(ge=0)] = 64 << 20


class Http(BaseModel):
    """How the daemon's listeners hold connections and threads (docs/guides/daemon.md, "Connections and probes")."""

    model_config = ConfigDict(extra="forbid")

    # /metrics, /healthz and /readyz on a port of their own too, with an event loop, a thread and connections of their
    # own (api/probes.py): point Prometheus and the probes there. Unset: the main port only.
    probe_port: Annotated[int, Field(ge=0, le=65535)] | None = None
    head_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 10.0  # a request head not whole by then: closed (408)
    # Open connections of the main port at most; past it the oldest one waiting for a request head is closed. Unset:
    # below the descriptor limit (RLIMIT_NOFILE) by 256 for the daemon's own files, the listen queue and the probe
    # listener's connections, and at most 4,096.
    max_connections: Annotated[int, Field(ge=1)] | None = None
    probe_max_connections: Annotated[int, Field(ge=1, le=1024)] = 32  # the probe listener's
    backlog: Annotated[int, Field(ge=1, le=4096)] = 128  # each listener's queue of connections not yet accepted
    # Threads that run the main port's sync handlers (anyio's pool: 40). Each thread running a client's request takes
    # turns at the GIL before a scrape's on the probe listener: with 4, the clients were served faster than with 16
    # and a scrape's p99 under 200 of them fell from 105 to 49 ms (docs/benchmarks/hostile-clients.md).
    threads: Annotated[int, Field(ge=1, le=256)] = 4


class ValidityDefaults(ValidityRules):
    """ValidityRules (spec/validity.py) read from the settings: not strict, as every value from the environment is
    text ("0.8")."""

    model_config = ConfigDict(strict=False)


EnvName = Annotated[str, Field(max_length=NAME_MAX, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
LOOPBACK = ["localhost", "127.0.0.0/8", "::1"]


class OpenAISettings(BaseModel):
    """What an openai spec from HTTP may make the daemon do on its behalf: which variable's value it may send as the
    key (none by default, never a BENCHD_* one: the daemon's own settings and secrets), and to which hosts or
    networks it may send requests (base_url) or read a metrics page from (metrics_url): loopback by default."""

    model_config = ConfigDict(extra="forbid")

    key_envs: list[EnvName] = []  # variables whose value an openai spec may send as its key (api_key_env)
    hosts: list[Annotated[str, Field(min_length=1, max_length=253)]] = LOOPBACK  # names, addresses, CIDR networks

    @field_validator("key_envs")
    @classmethod
    def _not_the_daemons(cls, names: list[str]) -> list[str]:
        if own := [name for name in names if name.upper().startswith("BENCHD_")]:
            raise ValueError(f"{', '.join(own)}: a BENCHD_* variable holds the daemon's own settings and secrets, "
                             "never a key a spec may send")
        return names

    @field_validator("hosts")
    @classmethod
    def _names_or_networks(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            if _network(host) is None and not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", host):
                raise ValueError(f"{host!r} is neither a host name nor an address or network (127.0.0.0/8, ::1)")
        return hosts

    def key_problem(self, name: str) -> str | None:
        if name in self.key_envs:
            return None
        allowed = ", ".join(self.key_envs) if self.key_envs else "none are"
        return f"{name!r} is not a variable BENCHD_OPENAI__KEY_ENVS allows a spec to send as its key ({allowed})"

    def url_problem(self, url: str) -> str | None:
        """Why the daemon must not send requests to this URL for a spec from HTTP; None when it may. Judged on the
        URL as the engine's client parses it (urlsplit), user information and backslashes refused outright."""
        parts = urlsplit(url)
        if "@" in parts.netloc or "\\" in url:
            return "user information (user@) and backslashes are not accepted in the URL"
        try:
            host, _ = parts.hostname, parts.port
        except ValueError as error:
            return f"{error} in {url!r}"
        if not host:
            return f"{url!r} names no host"
        address = _address(host)
        if address is not None:
            allowed = any(address in network for h in self.hosts if (network := _network(h)) is not None)
        else:
            allowed = host.rstrip(".").lower() in {h.rstrip(".").lower() for h in self.hosts}
        if allowed:
            return None
        return (f"{host} is not among the hosts BENCHD_OPENAI__HOSTS allows ({', '.join(self.hosts)}): the daemon "
                "sends requests only where its operator lets it")


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return address


class DeclaredSchedule(BaseModel):
    """A schedule the settings declare (a Helm chart's values, a config file): as POST /schedules takes it."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    spec: RunSpec
    interval_s: Annotated[float, Field(gt=0)]
    enabled: bool = True
    # A matrix each interval instead of one run (as POST /matrices takes it: dotted field path → its values, e.g.
    # {"environment": ["current", "candidate"]}), the first variant its baseline; its comparison sets the regression
    # gauges (docs/guides/environments.md).
    matrix: dict[Annotated[str, Field(min_length=1)], Annotated[list[Any], Field(min_length=1)]] | None = None
    repeats: Annotated[int, Field(ge=1)] = 3  # a matrix's rounds

    @model_validator(mode="after")
    def _a_valid_matrix(self) -> DeclaredSchedule:
        if self.matrix is not None:
            self.matrix_spec()  # every variant a valid spec: a bad one refuses the settings, naming it
        return self

    def matrix_spec(self) -> MatrixSpec | None:
        if self.matrix is None:
            return None
        try:
            return parse_matrix({**self.spec.model_dump(mode="json", exclude_unset=True), "matrix": self.matrix,
                                 "repeats": self.repeats})
        except MatrixProblem as error:
            raise ValueError("; ".join(f"{'.'.join(map(str, loc)) or 'matrix'}: {msg}"
                                       for loc, msg in error.problems)) from None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BENCHD_", env_nested_delimiter="__", extra="forbid")

    host: str = "127.0.0.1"  # the address HTTP listens on (also benchd serve --host)
    port: Annotated[int, Field(ge=0, le=65535)] = 8000  # the port HTTP listens on (also benchd serve --port)
    model: str = "tiny"  # the daemon's model: specs without one run on it
    device: Annotated[str, Field(pattern=r"^(auto|cpu(:\d+)?|cuda(:\d+)?)$")] = "auto"  # specs without one run there
    # Where workers run, one process each: all (every GPU CUDA_VISIBLE_DEVICES leaves visible; the CPU where there
    # is none, or when BENCHD_DEVICE is cpu), or a list: cuda:N (the N-th visible GPU), cpu, cpu:0 … cpu:K.
    devices: str | list[str] = "all"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # specs without one: auto is bf16 on CUDA
    database_url: str = "sqlite:///benchd.db"  # the store: SQLite, or postgresql+psycopg://user:pass@host/benchd
    # Every write is journaled here first and applied when the database answers; past spool_max_bytes of writes
    # waiting for an unreachable database, new runs are refused.
    spool_dir: Path = Path("benchd-spool")
    spool_max_bytes: Annotated[int, Field(ge=1 << 20)] = 256 << 20  # journaled writes waiting, at most
    store_start_timeout_s: Annotated[float, Field(ge=0)] = 10.0  # waited at start for migrations and recovery
    # /healthz fails (the chart's liveness probe restarts the daemon, the image's HEALTHCHECK marks it unhealthy) once
    # the run loop has not moved for this long. It beats every second while idle and as it waits for a run or a worker;
    # its longest steps between beats are a worker stopped for another arrangement (30 s) and a matrix's writes flushed
    # before its comparison (30 s).
    liveness_timeout_s: Annotated[float, Field(gt=0)] = 300.0
    # When set, POST, PUT and DELETE need Authorization: Bearer <token> (and, with reads.need_token, every GET but
    # /healthz, /readyz and /metrics).
    api_token: SecretStr | None = None
    label: str | None = None  # a commit or label stored with every run a spec gives none
    default_schedule: bool = True  # run a small workload on the daemon's model every interval
    default_schedule_interval_s: Annotated[float, Field(gt=0)] = 60.0  # the built-in schedule's interval
    queue_max: Annotated[int, Field(ge=1)] = 16  # queued runs; beyond, POST /runs gets 429
    schedules_max: Annotated[int, Field(ge=1)] = 256  # schedules (declared ones too); a new one beyond gets 409
    max_body_bytes: Annotated[int, Field(ge=1024)] = 1 << 20  # a request body larger than this gets 413
    model_roots: list[Path] = []  # local directories HTTP specs may load models from
    limits: Limits = Limits()
    reads: Reads = Reads()
    http: Http = Http()
    # The validity rules a workload leaves unset (BENCHD_VALIDITY__MIN_COMPLETION_RATIO=0.8, …): those set here
    # replace the defaults for every run this daemon takes; a workload's own `validity` still wins.
    validity: ValidityDefaults = ValidityDefaults()
    openai: OpenAISettings = OpenAISettings()  # what openai specs from HTTP may send, and where
    buckets: HistogramBuckets = HistogramBuckets()
    metrics: MetricsSettings = MetricsSettings()
    workers: WorkerSettings = WorkerSettings()
    faults: Faults = Faults()  # fault injection for tests and bench scripts: settings only, never HTTP
    compare_threshold: Annotated[float, Field(ge=0)] = THRESHOLD  # a change smaller than this is no regression
    compare_confidence: Annotated[float, Field(gt=0.5, lt=1)] = CONFIDENCE  # of the comparisons' intervals
    history: HistorySettings = HistorySettings()
    # What a good token costs (docs/figures.md): the node's price per GPU-hour (a CPU worker's hour on a node
    # without GPUs) and per kWh of the GPUs' energy; unset, runs say their energy per good token and no cost.
    prices: Prices = Prices()
    fleet: FleetSettings = FleetSettings()  # each node's place among the nodes of its GPU model (docs/guides/fleet.md)
    # The hardware sampler reads every interval: the freshness of /metrics' hardware gauges, and the resolution of
    # each run's hardware summary. No read completed for hardware_stale_after_s (default max(5 s, 3 intervals))
    # means a hung driver call: the hardware series leave /metrics until a read completes.
    hardware_interval_s: Annotated[float, Field(gt=0)] = 1.0
    hardware_stale_after_s: Annotated[float, Field(gt=0)] | None = None  # unset: max(5 s, 3 intervals)
    # The node: the value of the hostname label on every series and stored with every run (the Kubernetes downward
    # API's spec.nodeName in a cluster); unset or empty: this host's name.
    node_name: Annotated[str, Field(max_length=253)] = ""
    pod_name: Annotated[str, Field(max_length=253)] | None = None  # stored with every run (downward API metadata.name)
    # Schedules declared at start (BENCHD_SCHEDULES as JSON, or `schedules:` in the BENCHD_CONFIG file). The settings
    # own them: they are not written to the store, so one removed from the settings is gone at the next start.
    schedules: list[DeclaredSchedule] = []
    # Python environments a spec may name (its `environment`; the daemon's own is "current"), as JSON: name → an
    # interpreter's path (an existing venv's bin/python), or a list of requirements (pip's: transformers==5.24.0, a git
    # URL at a commit, a local wheel or directory) built once, by the daemon's pip, into a venv under environments_dir
    # that sees the daemon's packages (torch) beneath its own, and reused; a bare name (transformers) is its newest
    # release on the index, rebuilt when a newer one appears. Specs over HTTP name these.
    environments: dict[Name, str | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]] = {}
    environments_dir: Path = Path("benchd-environments")  # the built environments, each with its build's log
    # Whether a spec over HTTP may bring its own `requirements` (releases, or sources at https:// or git+https://),
    # built into a venv of their own like a declared list: off, since each new list is a build (minutes, on the run
    # loop, the queue waiting) and a venv kept on disk, and installing a package runs its code with the daemon's rights.
    environments_from_specs: bool = False

    @field_validator("api_token", "label", "pod_name", mode="before")
    @classmethod
    def _empty_is_unset(cls, value):
        """BENCHD_API_TOKEN= (as compose passes an unset variable) means no token, not an empty one."""
        return None if value == "" else value

    @field_validator("node_name")
    @classmethod
    def _host_by_default(cls, value: str) -> str:
        return value or socket.gethostname()

    @model_validator(mode="after")
    def _schedule_names(self) -> Settings:
        names = [s.name for s in self.schedules]
        if len(set(names)) != len(names):
            raise ValueError(f"schedules: names must be unique, got {names}")
        if self.default_schedule and "default" in names:
            raise ValueError("schedules: 'default' is the built-in schedule's name; set default_schedule to false to "
                             "declare one of that name")
        return self

    @model_validator(mode="after")
    def _a_token_for_reads(self) -> Settings:
        if self.reads.need_token and self.api_token is None:
            raise ValueError("reads.need_token: set api_token, the token reads would need")
        return self

    @field_validator("environments")
    @classmethod
    def _not_current(cls, environments: dict) -> dict:
        if CURRENT in environments:
            raise ValueError(f"{CURRENT!r} is the daemon's own environment; declare others by other names")
        return environments

    @model_validator(mode="after")
    def _stale_after_an_interval(self) -> Settings:
        if self.hardware_stale_after_s is not None and self.hardware_stale_after_s <= self.hardware_interval_s:
            raise ValueError(f"hardware_stale_after_s ({self.hardware_stale_after_s}) must be longer than "
                             f"hardware_interval_s ({self.hardware_interval_s}): a read is due every interval")
        return self

    @field_validator("model_roots")
    @classmethod
    def _absolute(cls, roots: list[Path]) -> list[Path]:
        return [Path(os.path.abspath(root)) for root in roots]

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Precedence: explicit arguments, then the environment, then the config file.
        sources = [init_settings, env_settings]
        config_file = os.environ.get("BENCHD_CONFIG")
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        return tuple(sources)


def resolve(spec: RunSpec, settings: Settings) -> RunSpec:
    """What the spec leaves unset comes from the settings: the daemon's model, dtype, device and label, and the
    validity rules BENCHD_VALIDITY__* sets (the daemon's runs, and `benchd run`'s here)."""
    daemon = {"model": settings.model, "dtype": settings.dtype, "device": settings.device, "label": settings.label}
    unset: dict[str, Any] = {k: v for k, v in daemon.items() if k not in spec.model_fields_set and v is not None}
    if isinstance(spec, GenerateSpec):
        rules, ours = spec.workload.validity, settings.validity
        rules_unset = {k: getattr(ours, k) for k in ours.model_fields_set if k not in rules.model_fields_set}
        if rules_unset:
            unset["workload"] = spec.workload.model_copy(update={"validity": rules.model_copy(update=rules_unset)})
    return spec.model_copy(update=unset)
