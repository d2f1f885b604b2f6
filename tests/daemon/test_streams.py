"""A run's event stream (daemon/streams.py): a heartbeat through every silence, so that a client tells a stuck daemon
from a slow run (issue 48); a run that ended before the stream opened still gives its summary."""

import asyncio

from benchd.daemon.streams import HEARTBEAT, RunEvent, RunEvents


def test_a_silent_run_sends_heartbeats_until_its_final_event():
    async def follow() -> list[str]:
        events = RunEvents(heartbeat_s=0.05)
        got: list[str] = []

        async def still_running() -> None:
            return None

        async def read() -> None:
            async for text in events.stream("r1", still_running):
                got.append(text)

        reader = asyncio.create_task(read())
        await asyncio.sleep(0.3)  # a queued run: nothing to say
        events.publish("r1", RunEvent("status", {"status": "running"}))
        await asyncio.sleep(0.01)
        events.publish("r1", RunEvent("summary", {"status": "succeeded"}, final=True))
        await asyncio.wait_for(reader, 5)
        return got

    got = asyncio.run(follow())
    assert got[0] == HEARTBEAT == ": heartbeat\n\n" and got.count(HEARTBEAT) >= 4  # at once, then every 0.05 s
    assert got[-2:] == ['event: status\ndata: {"status": "running"}\n\n',
                        'event: summary\ndata: {"status": "succeeded"}\n\n']


def test_a_run_that_had_ended_gives_its_summary_at_once():
    async def follow() -> list[str]:
        events = RunEvents()

        async def ended() -> RunEvent:
            return RunEvent("summary", {"status": "failed"}, final=True)

        return [text async for text in events.stream("r1", ended)]

    assert asyncio.run(follow()) == [HEARTBEAT, 'event: summary\ndata: {"status": "failed"}\n\n']
