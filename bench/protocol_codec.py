"""What a run's events cost on their way from an engine to the daemon's ingest, as positional tuples (pickled by
multiprocessing's Connection.send, as before issue 33) and as the protocol's typed records (benchd/protocol: msgspec
Structs, one msgpack codec): µs per event to make one and put it in the outbox (the engine's thread), to encode and
decode a batch (the pulse thread, then the daemon's watch thread), and to hand it to its handler (ingest).

    python bench/protocol_codec.py [--repeats 7]

Two batches of 100 ms: the transformers engine's poll (256 requests, 16 new tokens each: one Tokens event a request,
stamps and ids in lists) and a per-token engine's (static, openai: 1000 Tokens events of one stamp, with the
requests' other events). Prints the median of --repeats timings of each step."""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchd.protocol import codec, events, messages  # noqa: E402
from benchd.protocol.outbox import Outbox  # noqa: E402

TUPLE_DISPATCH = frozenset({"request", "submitted", "load"})


class TupleOutbox:
    """The outbox as it was: events as tuples, the kind first."""

    def __init__(self) -> None:
        self._events: deque = deque()
        self.progress = 0

    def put(self, *event) -> None:
        self._events.append(event)
        if event[0] not in TUPLE_DISPATCH:
            self.progress += 1

    def drain(self) -> list:
        out = list(self._events)
        self._events.clear()
        return out


def poll_batch(put_tuple: bool, outbox, requests: int = 256, tokens: int = 16) -> None:
    """What one poll of the transformers engine puts: a Tokens event a running request (Recorder.stamped_tokens)."""
    stamps = [1000.0 + i * 0.02 for i in range(tokens)]
    ids = list(range(100, 100 + tokens))
    for r in range(requests):
        request_id = f"s0-r{r}"
        if put_tuple:
            outbox.put("tokens", request_id, tuple(stamps[:]), None, tuple(ids[:]))
        else:
            outbox.put(events.Tokens(request_id, arrival_s=tuple(stamps[:]), arrival_tokens=None,
                                     token_ids=tuple(ids[:])))


def per_token_batch(put_tuple: bool, outbox, tokens: int = 1000) -> None:
    """A per-token engine's 100 ms: Tokens of one stamp (Recorder.tokens), and every 20th token a request's end and
    the next one's start, and a load sample."""
    for i in range(tokens):
        request_id = f"s0-r{i // 20}"
        t = 1000.0 + i * 1e-4
        if put_tuple:
            outbox.put("tokens", request_id, (t,), (1,), (i,))
        else:
            outbox.put(events.Tokens(request_id, arrival_s=(t,), arrival_tokens=(1,), token_ids=(i,)))
        if i % 20 == 19:
            following = f"s0-r{i // 20 + 1}"
            if put_tuple:
                outbox.put("finished", request_id, t, None)
                outbox.put("request", 0, i // 20 + 1, following, False, 256, 20, t, t, None)
                outbox.put("load", 0, t, 50, 0, 120, 4096)
            else:
                outbox.put(events.Finished(request_id, t, None))
                outbox.put(events.Request(0, i // 20 + 1, following, False, 256, 20, t, t, None))
                outbox.put(events.Load(0, t, 50, 0, 120, 4096))


def ingest_tuples(batch: list) -> None:
    handlers = {kind: (lambda *fields: None) for kind in ("tokens", "finished", "request", "load")}
    for event in batch:
        handlers[event[0]](*event[1:])


def ingest_records(batch: list) -> None:
    def tokens(event):
        return event.request_id, event.arrival_s, event.arrival_tokens, event.token_ids

    handlers = {events.Tokens: tokens, events.Finished: lambda e: e.request_id, events.Request: lambda e: e.index,
                events.Load: lambda e: e.running}
    for event in batch:
        handlers[type(event)](event)


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, make, repeats: int) -> None:
    old, new = TupleOutbox(), Outbox()
    make(True, old)
    make(False, new)
    old_batch, new_batch = old.drain(), new.drain()
    n = len(new_batch)
    old_bytes = pickle.dumps(("events", "run", old_batch), protocol=pickle.HIGHEST_PROTOCOL)
    new_bytes = codec.encode(messages.Events("run", new_batch))
    assert codec.decode_report(new_bytes).events == new_batch
    rows = [
        ("make + put", lambda: make(True, TupleOutbox()), lambda: make(False, Outbox())),
        ("encode", lambda: pickle.dumps(("events", "run", old_batch), protocol=pickle.HIGHEST_PROTOCOL),
         lambda: codec.encode(messages.Events("run", new_batch))),
        ("decode", lambda: pickle.loads(old_bytes), lambda: codec.decode_report(new_bytes)),
        ("ingest dispatch", lambda: ingest_tuples(old_batch), lambda: ingest_records(new_batch)),
    ]
    print(f"{name}: {n} events; a batch is {len(old_bytes):,} bytes pickled, {len(new_bytes):,} bytes msgpack")
    print(f"  {'µs per event':<18}{'tuples':>10}{'records':>10}")
    totals = [0.0, 0.0]
    for label, old_fn, new_fn in rows:
        a, b = timed(old_fn, repeats) / n * 1e6, timed(new_fn, repeats) / n * 1e6
        totals[0] += a
        totals[1] += b
        print(f"  {label:<18}{a:>10.3f}{b:>10.3f}")
    print(f"  {'total':<18}{totals[0]:>10.3f}{totals[1]:>10.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, msgspec {__import__('msgspec').__version__}")
    measure("transformers poll (256 requests × 16 tokens)", poll_batch, args.repeats)
    measure("per-token engine (1000 tokens, 50 requests)", per_token_batch, args.repeats)


if __name__ == "__main__":
    main()
