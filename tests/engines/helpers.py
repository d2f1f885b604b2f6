"""What the engines' tests share: a sink that keeps every event, seeded prompts, plain generate(), requests run to
their end."""

import threading

import torch

# benchd's engines that load the model, whose own behaviour (greedy outputs, cancelling, their steps' exact work) the
# engines' tests check beyond the contracts every engine found keeps (tests/engines/test_contracts.py)
ENGINES = ["transformers", "static"]


class Sink:
    """A TokenSink that keeps every event."""

    def __init__(self, expected=1):
        self.admitted_at, self.token_ids, self.stamps, self.ends, self.logprobs = {}, {}, {}, {}, {}
        self.expected = expected
        self.all_done = threading.Event()

    def admitted(self, request_id, t):
        self.admitted_at[request_id] = t

    def tokens(self, request_id, t, n, token_ids=(), logprobs=()):
        self.token_ids.setdefault(request_id, []).extend(token_ids)
        self.stamps.setdefault(request_id, []).append(t)
        self.logprobs.setdefault(request_id, []).extend(logprobs)

    def stamped_tokens(self, request_id, stamps, token_ids, logprobs=()):
        assert len(stamps) == len(token_ids) > 0 and len(logprobs) in (0, len(token_ids))
        self.token_ids.setdefault(request_id, []).extend(token_ids)
        self.stamps.setdefault(request_id, []).extend(stamps)
        self.logprobs.setdefault(request_id, []).extend(logprobs)

    def finished(self, request_id, t, error=None):
        assert request_id not in self.ends, "finished twice"
        self.ends[request_id] = (t, error)
        if len(self.ends) == self.expected:
            self.all_done.set()


def prompts(n, seed=0, low=3, high=20):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 512, (int(torch.randint(low, high, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def plain_generate(loaded, prompt, max_new_tokens):
    ids = torch.tensor([prompt])
    out = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                max_new_tokens=max_new_tokens, eos_token_id=[], pad_token_id=0)
    return out[0, len(prompt):].tolist()


def run_requests(engine, requests):
    sink = Sink(len(requests))
    for request in requests:
        engine.submit(request, sink)
    assert sink.all_done.wait(120), "engine did not finish"
    return sink
