"""The daily tasks from the command line against a live daemon (issue 53): cancel a run, list, add and remove
schedules, list matrices, change points and workloads, save a stored run's report and requests; "did you mean" for
a filter or an enum value misspelt; every table within COLUMNS (120 piped); an empty answer in one line; the daemon's
own reason for a refusal or a time-out; and a run label that is a terminal's escape, rich's markup and a reversal,
shown as text by every command that prints it (issue 48)."""

from __future__ import annotations

import csv
import io

import pytest

from benchd.cli.main import main
from tests.cli.test_hostile import HOSTILE, SHOWN
from tests.helpers import daemon, spec, submit, wait_for

WIDTHS = ("80", "")  # a narrow terminal, and piped (120)


def run(capsys, monkeypatch, *args: str, columns: str = "") -> tuple[int, str, str]:
    """The command in this process (a subprocess's start costs seconds), COLUMNS set, or unset as when piped."""
    if columns:
        monkeypatch.setenv("COLUMNS", columns)
    else:
        monkeypatch.delenv("COLUMNS", raising=False)
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def within(text: str, columns: str) -> None:
    widest = max(map(len, text.splitlines()), default=0)
    assert widest <= int(columns or 120), (columns, widest, text)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """Two runs of nightly (one labelled hostile), a matrix over the label (hostile values), a cancelled long run;
    comparisons given a millionth of a second, so that the daemon refuses every one with its reason."""
    with daemon(tmp_path_factory.mktemp("daily"), reads={"compare_timeout_s": 1e-6}) as server:
        server.wait_ready()
        nightly = [submit(server, {**spec(requests=6, output=4, name="nightly"), "label": label})
                   for label in ("v1", HOSTILE)]
        matrix = server.http.post("/matrices", json={**spec(requests=4, output=4, name="ab"), "repeats": 1,
                                                     "matrix": {"label": ["plain", HOSTILE]}})
        assert matrix.status_code == 202, matrix.text
        long = submit(server, spec(duration=60, output=64, name="long"))
        for run_id in (*nightly, *matrix.json()["runs"]):
            server.wait_status(run_id, "succeeded")
        server.wait_status(long, "running")
        server.ids = {"nightly": nightly, "matrix": matrix.json()["id"], "long": long}
        yield server


def test_a_running_run_is_cancelled_and_what_it_had_in_flight_is_cut_not_failed(live, capsys, monkeypatch):
    long = live.ids["long"]
    with live.http.stream("GET", f"/runs/{long}/events", timeout=60) as events:  # until requests are under way
        next(line for line in events.iter_lines() if line == "event: progress")
    code, out, err = run(capsys, monkeypatch, "runs", "cancel", long, "nope", "--server", live.url)
    assert code == 1 and out.startswith(f"run {long}: cancelling (it stops at its next request")
    assert err == "benchd: run nope: 404: no run nope\n"
    stopped = live.wait_status(long, "cancelled")
    (stage,) = stopped["summary"]
    assert stage["errors"] == 0 and stage["cut"] >= 1 and stage["requests"] >= 0, stage  # concurrency 2: in flight
    code, out, err = run(capsys, monkeypatch, "runs", "show", long, "--server", live.url)
    assert code == 0 and f"{stage['requests']} / 0 / 0, {stage['cut']} cut" in out
    code, out, err = run(capsys, monkeypatch, "runs", "cancel", long, "--server", live.url)
    assert code == 1 and err == f"benchd: run {long}: 409: run {long} has already ended (cancelled)\n"


def test_a_stored_runs_report_and_requests_are_saved(live, capsys, monkeypatch, tmp_path):
    run_id = live.ids["nightly"][0]
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, monkeypatch, "runs", "report", run_id, "--server", live.url)
    assert code == 0 and err.startswith(f"wrote {run_id}.html (")
    assert (tmp_path / f"{run_id}.html").read_text() == live.http.get(f"/runs/{run_id}/report").text
    code, _, err = run(capsys, monkeypatch, "runs", "report", run_id, "--csv", "--out", "r.csv", "--server", live.url)
    assert code == 0 and err.startswith("wrote r.csv (")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "r.csv").read_text())))
    assert len(rows) == 6 and all(int(r["output_tokens"]) == 4 for r in rows)
    code, _, err = run(capsys, monkeypatch, "runs", "report", "nope", "--server", live.url)
    assert code == 1 and err == "benchd: 404: no run nope\n" and not (tmp_path / "nope.html").exists()


@pytest.mark.parametrize("columns", WIDTHS)
def test_listings_fit_the_terminal_and_a_hostile_label_is_shown_as_text(live, capsys, monkeypatch, columns):
    """runs list, runs show, history, workloads, matrices list and show: within COLUMNS (120 piped); the label
    "\\x1b]0;pwned\\x07…[/]\\u202e…" shown escaped (it set the window's title, cleared the screen, reversed the line,
    and made `benchd history` exit with rich's MarkupError for everyone)."""
    hostile = live.ids["nightly"][1]
    for args in (("runs", "list"), ("runs", "show", hostile), ("history", "nightly"), ("workloads",),
                 ("matrices", "list"), ("matrices", "show", live.ids["matrix"])):
        code, out, err = run(capsys, monkeypatch, *args, "--server", live.url, columns=columns)
        assert code == 0 and err == "", (args, err)
        within(out, columns)
        for raw in ("\x1b", "\x07", "\u202e", "\x9b"):
            assert raw not in out, (args, raw)
        if args[0] in ("runs", "matrices") and args[1] == "show":
            assert SHOWN.split()[0] in out, (args, out)  # up to its space: a table may fold it there
    code, out, _ = run(capsys, monkeypatch, "workloads", "--server", live.url, columns=columns)
    assert "nightly" in out and "long" in out and "ab" in out


def test_a_misspelt_filter_or_value_gets_the_nearest_and_an_empty_answer_one_line(live, capsys, monkeypatch):
    url = ("--server", live.url)
    for args, says in (
            (("runs", "list", "--workload", "nightyl"), f"no runs with workload nightyl on {live.url}; did you mean "
                                                        "'nightly'?\n"),
            (("runs", "list", "--model", "tinny"), f"no runs with model tinny on {live.url}; did you mean 'tiny'?\n"),
            (("runs", "list", "--workload", "zzz"), f"no runs with workload zzz on {live.url} (benchd workloads lists "
                                                    "them)\n"),
            (("changes",), f"no change points on {live.url}\n"),
            (("changes", "--workload", "nihgtly"), f"no change points with workload nihgtly on {live.url}; did you "
                                                   "mean 'nightly'?\n"),
            (("matrices", "list", "--workload", "zzz"), f"no matrices with workload zzz on {live.url}\n")):
        code, out, err = run(capsys, monkeypatch, *args, *url)
        assert (code, out, err) == (0, says, ""), args
    code, out, err = run(capsys, monkeypatch, "history", "nightlx", *url)
    assert code == 1 and err == "benchd: 404: no succeeded run of nightlx; did you mean 'nightly'?\n"
    for args, says in ((("runs", "list", "--status", "succeded"), "did you mean 'succeeded'?"),
                       (("changes", "--figure", "itl_p50"), "did you mean 'itl_s.p50'")):
        with pytest.raises(SystemExit) as exited:
            main([*args, *url])
        assert exited.value.code == 2 and says in capsys.readouterr().err


def test_schedules_are_added_listed_and_removed(live, capsys, monkeypatch, tmp_path):
    url = ("--server", live.url)
    code, out, _ = run(capsys, monkeypatch, "schedules", "list", *url)
    assert (code, out) == (0, f"no schedules on {live.url} (benchd schedules add NAME SPEC --every 1h adds one)\n")
    path = tmp_path / "hourly.yaml"
    path.write_text("name: hourly\ntransformers: {block_size: 16, num_blocks: 64, max_batch_tokens: 128}\n"
                    "workload: {stop: {requests: 2}, output_tokens: {dist: fixed, value: 2}}\n")
    code, out, _ = run(capsys, monkeypatch, "schedules", "add", "hourly", str(path), "--every", "1h", *url)
    assert (code, out) == (0, "schedule hourly: hourly every 1 h; its first run is due now\n")
    wait_for(lambda: live.http.get("/schedules").json()[0]["last_run_id"], 30, "the schedule's first run")
    code, out, _ = run(capsys, monkeypatch, "runs", "list", "--schedule", "hourli", *url)
    assert (code, out) == (0, f"no runs with schedule hourli on {live.url}; did you mean 'hourly'?\n")
    for columns in WIDTHS:
        code, out, _ = run(capsys, monkeypatch, "schedules", "list", *url, columns=columns)
        assert code == 0 and "hourly" in out and "1 h" in out and "in 60 min" in out
        within(out, columns)
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: {stop: {requests: -1}}\n")
    code, out, err = run(capsys, monkeypatch, "schedules", "add", "bad", str(bad), "--every", "90", *url)
    assert code == 2 and err.startswith("benchd: invalid schedule\nspec.workload.stop.requests: ")
    code, out, err = run(capsys, monkeypatch, "schedules", "remove", "hourli", *url)
    assert code == 1 and err == "benchd: 404: no schedule hourli; did you mean 'hourly'?\n"
    code, out, _ = run(capsys, monkeypatch, "schedules", "remove", "hourly", *url)
    assert (code, out) == (0, "schedule hourly removed (its runs stay stored)\n")
    assert live.http.get("/schedules").json() == []


def test_the_daemons_own_reason_for_a_refusal_or_a_time_out_is_printed(live, capsys, monkeypatch):
    """A comparison past BENCHD_READS__COMPARE_TIMEOUT_S: the CLI said "the daemon did not answer in time" (its own
    30 s ran out with the daemon's) and lost the reason."""
    from benchd.cli.client import DEADLINE_S
    from benchd.daemon.settings import Reads

    assert 2 * Reads().compare_timeout_s < DEADLINE_S  # the daemon's bound ends first, and its answer comes back
    a, b = live.ids["nightly"]
    code, _, err = run(capsys, monkeypatch, "compare", a, b, "--server", live.url)
    assert code == 1 and err.startswith("benchd: 503: the comparison took more than 1e-06 s "
                                        "(BENCHD_READS__COMPARE_TIMEOUT_S): ") and "compare fewer runs" in err
    assert err.rstrip().endswith("(try again in 5 s)") and err.count("\n") == 1
