"""What every engine must keep (engines/base.py states it on the `Engine` protocol), as code: a finished stage's
records and steps checked against each contract, every breach named. tests/engines/test_contracts.py runs every
engine found (spec/engines.py) on a tiny workload and checks it here."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchd.measure.records import RequestRecord
    from benchd.measure.roofline import StepLog
    from benchd.spec.engines import EngineRecord

SHOWN = 5  # breaches named in the error; the rest counted


class ContractBroken(AssertionError):
    """An engine broke a contract of engines/base.py: the message names each breach, by request and contract."""


def breaches(engine: EngineRecord, records: Sequence[RequestRecord], steps: StepLog | None,
             exact_output: bool) -> list[str]:
    """Each contract a stage's records and steps break, in words (none: kept). records: every request the stage
    gave the engine (perf_counter() stamps); steps: the forward steps the engine counted over the stage (None:
    none); exact_output: the workload ignored EOS, so a model in benchd's worker makes every token it was asked."""
    found = []
    for r in records:
        name = f"request {r.request_id}"
        if r.finished_s is None:
            found.append(f"{name}: never ended (every request ends with exactly one sink.finished)")
            continue
        stamps = r.arrival_s
        if not all(a <= b for a, b in itertools.pairwise(stamps)):
            found.append(f"{name}: its token stamps go back in time ({list(stamps)})")
        tokens = [("first token", stamps[0]), ("last token", stamps[-1])] if stamps else []
        marks = [("submitted", r.submitted_s), ("admitted", r.admitted_s), *tokens, ("finished", r.finished_s)]
        known = [(label, t) for label, t in marks if t is not None]
        for (before, a), (after, b) in itertools.pairwise(known):
            if a > b:
                found.append(f"{name}: {after} at {b!r} before {before} at {a!r} (submitted ≤ admitted ≤ tokens ≤ "
                             "finished)")
        if r.error is not None or not stamps:
            continue
        if engine.stamps == "engine":
            if r.finished_s != stamps[-1]:
                found.append(f"{name}: finished at {r.finished_s!r}, not at its last token's stamp {stamps[-1]!r} "
                             "(an engine that stamps its tokens ends a request at its last token)")
            if any(n != 1 for n in r.arrival_tokens) or len(r.token_ids) != r.output_tokens:
                found.append(f"{name}: {r.output_tokens} tokens in {len(stamps)} stamps with {len(r.token_ids)} ids "
                             "(an engine that stamps its tokens stamps each, with its id)")
        if engine.loads_model and exact_output and r.output_tokens != r.max_new_tokens:
            found.append(f"{name}: {r.output_tokens} tokens of {r.max_new_tokens} asked with EOS ignored")
    if engine.loads_model:
        made = sum(r.output_tokens for r in records)
        if steps is None or not len(steps):
            found.append(f"no forward steps counted for {made} tokens (an engine that loads the model counts its "
                         "steps: Engine.steps)")
        elif sum(steps.sampled) < made:
            found.append(f"{made} tokens out of {sum(steps.sampled)} sampled in the steps counted (each token is "
                         "sampled at a step the engine counts)")
        elif any(prefill + decode <= 0 for prefill, decode in zip(steps.prefill_tokens, steps.decode_tokens)):
            found.append("a step counted with no token in it")
    return found


def check_contracts(engine: EngineRecord, records: Sequence[RequestRecord], steps: StepLog | None,
                    exact_output: bool) -> None:
    """ContractBroken, naming every breach (breaches()), unless the stage kept each contract."""
    found = breaches(engine, records, steps, exact_output)
    if found:
        more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        raise ContractBroken(f"engine {engine.name!r} broke its contracts (engines/base.py): "
                             + "; ".join(found[:SHOWN]) + more)
