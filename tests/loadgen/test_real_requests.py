"""Real requests: the bundled user turns and passages rendered with the model's chat template, each prompt exactly
its sampled length, composed as random ids are (a group's shared prefix shared); for a server, the user turn's text;
and the quality probe's sequences."""

import pytest

from benchd.loadgen.contents import real_contents, real_text_contents
from benchd.models.loading import local_tokenizer
from benchd.models.texts import ChatText, bundle, encode, probe_sequences
from benchd.spec import Workload


@pytest.fixture(scope="module")
def chat(real_model):
    return ChatText(local_tokenizer(str(real_model)))


def take(stream, n):
    return [next(stream) for _ in range(n)]


def test_each_prompt_is_a_chat_turn_of_exactly_its_sampled_length(chat):
    workload = Workload.model_validate({"prompt_tokens": {"dist": "uniform", "min": 1, "max": 400},
                                        "output_tokens": {"dist": "fixed", "value": 8}})
    made = take(real_contents(workload, 3, chat), 40)
    lengths = take(real_contents(Workload.model_validate(workload.model_dump()), 3, chat), 40)
    assert [c.prompt_ids for c in made] == [c.prompt_ids for c in lengths]  # a pure function of the seed
    from benchd.loadgen.contents import contents

    sampled = [c.prompt_tokens for c in take(contents(workload, 3, 49_152), 40)]
    assert [len(c.prompt_ids) for c in made] == sampled  # the random ids' lengths, exactly
    tokenizer = chat.tokenizer
    questions = set(bundle().chats)
    for content in made:
        ids = content.prompt_ids
        if len(ids) < len(chat.head) + len(chat.tail) + 20:
            continue
        text = tokenizer.decode(ids)
        assert ids[:len(chat.head)] == chat.head and ids[-len(chat.tail):] == chat.tail  # the assistant's turn next
        assert any(text.removesuffix(tokenizer.decode(chat.tail)).endswith(q) for q in questions)
    assert len({tuple(c.prompt_ids) for c in made}) == 40
    assert take(real_contents(workload, 4, chat), 1)[0].prompt_ids != made[0].prompt_ids


def test_a_shared_prefix_is_shared_in_real_text_too(chat):
    workload = Workload.model_validate({"prompt_tokens": {"dist": "fixed", "value": 200},
                                        "prefix": {"fraction": 0.5, "groups": 2}})
    a, b, c = take(real_contents(workload, 0, chat), 3)
    head = len(chat.head)
    assert a.prompt_ids[:head + 100] == c.prompt_ids[:head + 100] != b.prompt_ids[:head + 100]


def test_a_servers_real_requests_are_the_user_turns_text_counted_in_its_tokens(chat):
    workload = Workload.model_validate({"prompt_tokens": {"dist": "uniform", "min": 4, "max": 120}})
    for content in take(real_text_contents(workload, 1, chat), 20):
        assert content.prompt_tokens == len(encode(chat.tokenizer, content.prompt_text))
        assert any(content.prompt_text.endswith(q[-8:]) for q in bundle().chats)
        assert "<|im_start|>" not in content.prompt_text  # the server renders its own template


def test_the_probe_scores_each_written_answer_after_its_question_and_the_reference_text(chat):
    sequences = probe_sequences(chat.tokenizer)
    assert [name for name, *_ in sequences] == [f"answer-{i}" for i in range(len(bundle().answers))] + ["text"]
    for (_, ids, first), (question, answer) in zip(sequences, bundle().answers):
        assert chat.tokenizer.decode(ids[first:]).startswith(answer) and question in chat.tokenizer.decode(ids[:first])
    _, ids, first = sequences[-1]
    assert first == 1 and chat.tokenizer.decode(ids) == bundle().text
