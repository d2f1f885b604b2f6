"""The command line against a hostile server (issue 48): an endless, dripping, silent, redirecting, compressed or
lying server ends each command in one clear line within bounded time and memory, and what it says is shown as
text, never obeyed by the terminal nor read as markup."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from benchd.cli.client import MAX_ANSWER_BYTES
from benchd.cli.main import main
from tests.cli.hostile import HostileServer, compressed, dripping, endless, redirecting, silent, stream
from tests.helpers import ROOT

# What a terminal would obey: a window title (OSC 0), clearing the screen (CSI 2J), a bell, C1's CSI, a reversal
# of the text (U+202E), rich's markup ("[/]" closed nothing: MarkupError) and an emoji code.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J[/]\u202eevil[bold red]\x9b31m:thumbs_up:"
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J[/]\\u202eevil[bold red]\\x9b31m:thumbs_up:"


def run(capsys, *args: str) -> tuple[int, str, str]:
    """The command in this process (a subprocess's start costs seconds): its exit code, stdout and stderr."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


# The command line, writing its own peak resident memory (VmHWM: this process's since its exec, not the forking
# test's) to the file named first.
MEASURED = ("import atexit, runpy, sys; path = sys.argv.pop(1); atexit.register(lambda: open(path, 'w').write("
            "next(x for x in open('/proc/self/status') if x.startswith('VmHWM')))); "
            "runpy.run_module('benchd.cli', run_name='__main__')")


def test_an_endless_answer_is_cut_at_its_cap_in_bounded_memory(tmp_path):
    """Endless JSON took the CLI to 3.7 GB in 40 s: now it reads 32 MiB, and stops."""
    peak = tmp_path / "peak"
    with HostileServer(endless) as server:
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-c", MEASURED, str(peak), "runs", "list", "--server", server.url],
                                cwd=ROOT, capture_output=True, text=True, timeout=120)
        elapsed = time.monotonic() - started
    assert result.returncode == 1 and result.stdout == ""
    assert one_line(result.stderr) == (f"benchd: {server.url}/runs sent more than 32 MiB: stopped reading (is it a "
                                       "benchd daemon?)")
    assert server.sent < MAX_ANSWER_BYTES + (16 << 20)  # the cap, and what the sockets' buffers held
    kib = int(peak.read_text().split()[1])
    assert kib < 300 << 10 and elapsed < 60, (kib, elapsed)  # an interpreter (~70 MiB) and the 32 MiB read


@pytest.mark.parametrize("behaviour", [dripping, silent], ids=["dripping", "silent"])
def test_a_dripping_or_silent_server_ends_at_the_calls_deadline(behaviour, capsys, monkeypatch):
    """A byte every 20 s (no read ever timed out), or nothing at all: a call's deadline covers it whole."""
    monkeypatch.setenv("BENCHD_CLIENT_TIMEOUT_S", "1.5")
    with HostileServer(behaviour) as server:
        started = time.monotonic()
        code, out, err = run(capsys, "workloads", "--server", server.url)
        elapsed = time.monotonic() - started
    assert code == 1 and out == "" and elapsed < 30, elapsed
    assert one_line(err).startswith(f"benchd: the benchd daemon at {server.url} did not answer within 1.5 s "
                                    "(BENCHD_CLIENT_TIMEOUT_S gives it longer)")


def test_no_redirect_is_followed_and_no_encoding_taken_that_was_not_asked(capsys):
    with HostileServer(redirecting) as server:
        code, _, err = run(capsys, "runs", "show", "abc", "--server", server.url)
    assert code == 1 and server.requests == [("GET", "/runs/abc")]  # asked once, the redirect to itself not taken
    assert one_line(err) == (f"benchd: {server.url} redirected /runs/abc to '{server.url}/runs/abc' (307): benchd "
                             "follows no redirect; give the daemon's own URL with --server or BENCHD_SERVER")
    with HostileServer(compressed) as server:
        code, _, err = run(capsys, "runs", "show", "abc", "--server", server.url)
    assert code == 1 and one_line(err) == (f"benchd: {server.url} answered /runs/abc in an encoding it was not asked "
                                           "for (gzip): is it a benchd daemon?")


def test_an_event_stream_gone_silent_ends_at_its_idle_time_and_heartbeats_keep_it(capsys, monkeypatch):
    """Headers, then nothing (timeout=None hung until killed): a stream is given IDLE_S from its last line; the
    daemon's heartbeats, lines, keep a slow run's stream alive."""
    monkeypatch.setenv("BENCHD_CLIENT_IDLE_S", "1")

    def heartbeats(conn) -> None:  # 2 s of heartbeats, then silence
        for _ in range(10):
            time.sleep(0.2)
            conn.send(b": heartbeat\n\n")
        conn.server.stopping.wait(60)

    quick = ("run", "--model", "tiny", "--requests", "2")
    with HostileServer(stream(b'event: status\ndata: {"status": "running"}\n\n', heartbeats)) as server:
        started = time.monotonic()
        code, _, err = run(capsys, *quick, "--server", server.url)
        elapsed = time.monotonic() - started
    assert code == 1 and 2.5 < elapsed < 30, elapsed  # 2 s of heartbeats, then 1 s of silence
    assert err.splitlines()[-1] == (
        f"benchd: the benchd daemon at {server.url} sent nothing on run r1's event stream for 1 s, not even its "
        "heartbeat (BENCHD_CLIENT_IDLE_S waits longer): it is stuck, or something between cuts the stream; the run "
        "may go on (benchd runs show r1)")
    with HostileServer(stream(b": heartbeat\n\ndata: " + b"x" * (2 << 20), lambda conn: None)) as server:
        code, _, err = run(capsys, *quick, "--server", server.url)
    assert code == 1 and err.splitlines()[-1] == (f"benchd: {server.url}/runs/r1/events sent a line longer than "
                                                  "1 MiB: stopped reading")
    with HostileServer(stream(b": heartbeat\n\n", lambda conn: None)) as server:  # closed before its summary
        code, _, err = run(capsys, *quick, "--server", server.url)
    assert code == 1 and err.splitlines()[-1].startswith(
        f"benchd: the benchd daemon at {server.url} ended run r1's event stream before its summary")


def lying(conn, method: str, path: str) -> None:
    """Every string a control sequence, a reversal and markup; a 422 that names a field with them."""
    run = {"id": "r1", "status": "failed", "workload": HOSTILE, "model": HOSTILE, "engine": "transformers",
           "label": HOSTILE, "created_at": "2026-11-28T01:17:03", "finished_at": None, "summary": [],
           "error": HOSTILE, "spec": {}, "metadata": {}, "valid": None}
    if method == "POST":
        conn.json({"detail": [{"loc": ["body", HOSTILE], "msg": f"[/red]{HOSTILE}", "type": "x"}]},
                  "422 Unprocessable Entity")
    elif path.startswith("/changes"):  # a change point between two labels: the history's sentence names them
        side = {"runs": 4, "first_run": "a", "last_run": "b", "start": "2026-11-28T01:00:00Z",
                "end": "2026-11-28T01:00:00Z", "mean": 0.01, "ci_low": 0.009, "ci_high": 0.011}
        change = {"id": "c1", "workload": HOSTILE, "device": "cpu", "node": HOSTILE, "figure": "ttft_s.p50",
                  "run_id": "r1", "at": "2026-11-28T01:00:00Z", "direction": "worse", "relative_change": 0.5,
                  "ci_low": 0.4, "ci_high": 0.6, "p_value": 1e-4, "confidence": 0.95, "before": side, "after": side,
                  "stack": [{"field": "label", "before": "v1", "after": HOSTILE}],
                  "detected_at": "2026-11-28T01:00:00Z"}
        conn.json({"items": [change], "total": 1, "limit": 50, "offset": 0})
    elif path.startswith("/runs/"):
        conn.json(run)
    elif path.startswith("/runs"):
        conn.json({"items": [run], "total": 1, "limit": 20, "offset": 0})
    else:
        conn.json({"detail": HOSTILE}, "503 Service Unavailable")


def test_what_a_server_says_is_shown_escaped_never_obeyed_nor_read_as_markup(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    with HostileServer(lying) as server:
        for args in (("runs", "list"), ("runs", "show", "r1"), ("changes",), ("workloads",), ("history", "w"),
                     ("run", "--model", "tiny", "--requests", "2"), ("runs", "list", "--json")):
            code, out, err = run(capsys, *args, "--server", server.url)
            for text in (out, err):
                assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text and "\x9b" not in text
                assert "MarkupError" not in text and "Traceback" not in text and "👍" not in text
            said = out + err
            assert max(map(len, out.splitlines()), default=0) <= 80 or args[-1] == "--json", out
            if args[-1] == "--json":  # the answer as sent: JSON's own escapes keep it inert
                assert code == 0 and json.loads(out)["items"][0]["label"] == HOSTILE
            elif args[0] == "run":
                assert code == 2 and f"{SHOWN}: [/red]{SHOWN}" in said, said
            elif args[0] in ("workloads", "history"):
                assert code == 1 and said == f"benchd: 503: {SHOWN}\n", said
            else:  # escaped, shown as it is (a table's column may fold it over lines)
                assert code == 0 and "\\x1b]0;pwned" in said and "[/]" in said, said
