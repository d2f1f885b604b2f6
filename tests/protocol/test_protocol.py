"""The daemon↔worker protocol: every kind of message and event round-trips through the one codec, every kind defined
is covered here and handled by the daemon's ingest, and what is not a message is a worker's fault, not the
daemon's."""

import threading
import time

import msgspec
import pytest

from benchd.hardware.devices import Slot
from benchd.hardware.speed import DeviceSpeed
from benchd.protocol import codec, events, messages
from benchd.protocol.codec import ProtocolError, decode_command, decode_report, encode
from benchd.protocol.metadata import RunMetadata
from benchd.protocol.outbox import Outbox

METADATA = RunMetadata(run_id="r1", trace_id="ab" * 16, benchd_version="0.1.0", python_version="3.11.7",
                       torch_version="2.13.0", transformers_version="5.17.0", device="cpu", device_name="x86_64",
                       torch_threads=2, host="node", model="tiny", model_load_s=0.5,
                       engine_settings={"block_size": 16}, started_at="2026-01-01T00:00:00.000+00:00",
                       device_limits={"device": "cpu", "copy_bytes_per_s": 2e10},
                       model_cost={"weight_bytes": 1000, "kv_bytes_per_token": 512, "dtype": "float32"})

# One of each kind, every field set (no None, no default): each field's type is exercised.
EVENTS = [
    events.Phase("run", 10.5),
    events.StageStart(0, "concurrency 4", 11.0),
    events.Request(0, 3, "s0-r3", True, 24, 12, 11.25, 11.2501, "00f067aa0ba902b7"),
    events.Submitted("s0-r3", 11.26),
    events.Admitted("s0-r3", 11.27),
    events.Tokens("s0-r3", arrival_s=(11.3, 11.31), arrival_tokens=(1, 3), token_ids=(5, 6, 7, 8),
                  logprobs=(-0.5, -0.25, -2.0, -0.125)),
    events.Prompt("s0-r3", 31),
    events.Counted("s0-r3", 31, 4, 31, 5),
    events.Finished("s0-r3", 11.4, "cancelled"),
    events.Load(0, 11.35, 4, 2, 40, 64),
    events.Drain(0, 11.5, 30.0),
    events.StageEnd(0, "stopped", 12.0, 0.625, "error rate 0.5 over 0.1"),
    events.Steps(0, (12, 0), (0, 2), (0, 12), (78, 26), (2, 2)),
    events.EngineRestart(1, "out_of_memory"),
    events.Timing(0, "step", 2, False, 0.0125, "1024x1024x1024", "float32"),
    events.TimedStage(0, {"stage": "matmul 1024x1024x1024", "timing": {"median": 0.0125}}, 11.0, 12.0),
    events.Span("benchd.train_step.step 2", 11.0, 11.5, {"benchd.step_s": 0.5}),
    events.TimedProgress("matmul", 0, 2, 5, 10, 1.5, 30.0),
]
COMMANDS = [
    messages.Run("r1", {"name": "test", "model": "tiny"}, {"workload": "x", "action": "exit"}, "ab" * 16,
                 {"roots": ["/models"], "paths": {"model": "/models/m"}}),
    messages.Cancel("r1", "cancelled"),
    messages.Warm("tiny", "float32", "cpu"),
    messages.Stop(),
]
REPORTS = [
    messages.Hello(messages.PROTOCOL_VERSION, 123, "3.11.2", "2.13.0", "5.17.0", "12.8", "cpu", 0, -10, 1,
                   DeviceSpeed("cpu", {"float32": 1e11}, 2e10, 64 << 20, 0.4)),
    messages.Heartbeat(10.0, 42, "run", 1 << 30),
    messages.Events("r1", EVENTS),
    messages.Warmed("tiny", "OSError: no such model", 1.5),
    messages.Exiting("RuntimeError: device-side assert triggered"),
    messages.Done("r1", "failed", "RuntimeError: boom", "run", METADATA),
]


def test_every_kind_round_trips_through_the_codec():
    for command in COMMANDS:
        assert decode_command(encode(command)) == command
    for report in REPORTS:
        decoded = decode_report(encode(report))
        assert decoded == report and type(decoded) is type(report)
    (batch,) = [r for r in REPORTS if isinstance(r, messages.Events)]
    assert [type(e) for e in decode_report(encode(batch)).events] == [type(e) for e in EVENTS]


def test_the_examples_cover_every_kind_the_protocol_defines_with_every_field_set():
    """A kind added to the protocol without an example here fails; so does a record left out of its union."""
    examples = [*COMMANDS, *REPORTS, *EVENTS]
    covered = [type(example) for example in examples]
    assert len(covered) == len(set(covered))
    assert set(covered) == set(codec.COMMANDS) | set(codec.REPORTS) | set(codec.EVENTS)
    defined = {value for module in (messages, events) for value in vars(module).values()
               if isinstance(value, type) and issubclass(value, (messages.Message, events.Event))
               and value not in (messages.Message, events.Event)}
    assert defined == set(covered)
    for example in examples:
        unset = [name for name in example.__struct_fields__ if getattr(example, name) is None]
        assert not unset, f"{type(example).__name__}: {unset}"


def test_the_daemons_ingest_handles_every_kind_of_event():
    from benchd.daemon.ingest import RunIngest
    from tests.helpers import make_spec

    assert set(RunIngest(make_spec(), observer=None).handlers) == set(codec.EVENTS)


def test_what_is_not_a_message_is_a_clear_error():
    garbled = b"\xc1\x00\x01"
    with pytest.raises(ProtocolError, match="not a report of the protocol .*MessagePack data is malformed"):
        decode_report(garbled)
    with pytest.raises(ProtocolError, match="not a report of the protocol .*Invalid value 'Bogus'"):
        decode_report(msgspec.msgpack.encode(["Bogus", 1, 2]))
    with pytest.raises(ProtocolError, match=r"Expected `float`, got `str` - at `\$\[1\]`"):
        decode_report(msgspec.msgpack.encode(["Heartbeat", "soon", 1, "run", 0]))
    with pytest.raises(ProtocolError, match=r"Invalid value 'Bogus' - at `\$\[2\]\[0\]\[0\]`"):  # an event in a batch
        decode_report(msgspec.msgpack.encode(["Events", "r1", [["Bogus", 1]]]))
    with pytest.raises(ProtocolError, match="not a command"):  # a report where a command belongs
        decode_command(encode(messages.Exiting("x")))
    with pytest.raises(ProtocolError, match="device_name"):  # the metadata is checked as it is decoded
        decode_report(msgspec.msgpack.encode(["Done", "r1", "succeeded", None, None, {"device": "cpu"}]))


def test_numpy_numbers_cross_as_the_numbers_they_are_and_other_objects_are_refused_as_they_are_encoded():
    import numpy as np

    sample = events.Load(0, np.float64(11.5), np.int64(4), 2, np.int32(40), 64)
    (decoded,) = decode_report(encode(messages.Events("r1", [sample]))).events
    assert decoded == events.Load(0, 11.5, 4, 2, 40, 64) and type(decoded.running) is int
    with pytest.raises(ProtocolError, match="Events cannot be encoded: object is not part of the protocol"):
        encode(messages.Events("r1", [events.Span("s", 1.0, 2.0, {"x": object()})]))


def test_the_outbox_counts_progress_but_not_what_the_dispatcher_makes_anyway():
    outbox = Outbox()
    for event in EVENTS:
        outbox.put(event)
    assert outbox.drain() == EVENTS and outbox.drain() == []
    assert outbox.progress == len(EVENTS) - 4  # Request, Submitted, Load and Drain are not progress


# ---- a worker that speaks another protocol, through a real pipe and the real supervisor ---------------------------


def garbling_worker(conn, device, log_path, env):
    """A worker process that starts as one should, then answers a run with bytes that are no report."""
    hello = messages.Hello(messages.PROTOCOL_VERSION, 0, "3", "none", "none", None, device, 0, 0, 0, None)
    conn.send_bytes(encode(hello))
    while True:
        command = decode_command(conn.recv_bytes())
        if isinstance(command, messages.Run):
            conn.send_bytes(b"\x92\xa5Bogus\x01")  # a well-formed array of a kind nobody defined
        conn.send_bytes(encode(messages.Heartbeat(time.perf_counter(), 0, "run", 0)))


class Sink:
    def __init__(self) -> None:
        self.causes: list[str] = []
        self.ended = threading.Event()

    def events(self, batch) -> None:
        pass

    def done(self, status, error, error_stage, metadata) -> None:
        self.ended.set()

    def died(self, cause: str) -> None:
        self.causes.append(cause)
        self.ended.set()


def test_a_worker_that_sends_what_is_not_a_report_is_ended_as_a_fault_and_its_run_fails(tmp_path, monkeypatch):
    from benchd.supervisor import handle as supervisor
    from benchd.supervisor.handle import WorkerHandle, WorkerSettings

    monkeypatch.setattr(supervisor.entry, "main", garbling_worker)  # the spawned process runs it instead
    deaths = []
    worker = WorkerHandle(Slot("cpu", "cpu", ""), WorkerSettings(log_dir=tmp_path),
                          on_death=lambda handle, death: deaths.append(death))
    worker.start()
    try:
        assert worker.ready.wait(60)
        sink = Sink()
        worker.submit("r1", {}, None, sink)
        assert sink.ended.wait(30)
        (cause,) = sink.causes
        assert "the worker sent what the daemon cannot read" in cause and "Invalid value 'Bogus'" in cause
        (death,) = deaths
        assert death.reason == "protocol" and worker.state == "dead"
        worker._process.join(10)
        assert not worker._process.is_alive()
    finally:
        worker.stop(5)


def test_a_worker_sent_what_is_not_a_command_exits_and_says_why(tmp_path):
    from benchd.supervisor.handle import WorkerHandle, WorkerSettings

    deaths = []
    speed = DeviceSpeed("cpu", {"float32": 1e10}, 1e10, 1, 0.0)  # known: no probe
    worker = WorkerHandle(Slot("cpu", "cpu", ""), WorkerSettings(log_dir=tmp_path),
                          on_death=lambda handle, death: deaths.append(death), speed=speed)
    worker.start()
    try:
        assert worker.ready.wait(120)
        worker._conn.send_bytes(b"\xc1 from another daemon")
        deadline = time.monotonic() + 60
        while not deaths and time.monotonic() < deadline:
            time.sleep(0.1)
        (death,) = deaths
        assert death.reason == "exit" and "exited with code 1" in death.cause
        assert "the daemon sent what this worker cannot read" in death.cause  # from its log's tail
    finally:
        worker.stop(5)
