"""Documents from outside are parsed within one bound (documents.DEPTH_MAX levels, NODES_MAX values): at the limit
they parse, past it the place is named, and nothing, however deep, reaches Python's recursion limit."""

import sys

import pytest

from benchd.spec.documents import (
    DEPTH_MAX,
    NODES_MAX,
    DocumentError,
    json_depth,
    load_yaml,
    nesting_problem,
    parse_json,
)


def nested(depth: int) -> str:
    """depth objects inside one another, the innermost holding a number: {"a": {"a": … 1 …}}."""
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize("load", [parse_json, load_yaml])
def test_at_the_limit_a_document_parses_and_past_it_the_place_is_named(load):
    value = load(nested(DEPTH_MAX))
    assert value["a"]["a"]["a"] is not None
    with pytest.raises(DocumentError) as past:
        load(nested(DEPTH_MAX + 1))
    assert past.value.loc == ("a",) * DEPTH_MAX and "more than 64 levels" in past.value.reason


@pytest.mark.parametrize("load", [parse_json, load_yaml])
def test_far_past_the_limit_nothing_recurses(load):
    limit = sys.getrecursionlimit()
    for depth in (limit, 10 * limit, 100_000):
        for text in (nested(depth), "[" * depth + "]" * depth, "[" * depth):
            with pytest.raises(DocumentError) as deep:  # never a RecursionError
                load(text)
            assert "nested too deeply" in str(deep.value)


def test_brackets_inside_strings_are_not_nesting():
    text = '{"a": "[[[[{{{{", "b": ["]]]}"], "c": "\\"[["}'
    assert json_depth(text) == 2
    assert parse_json('{"x": "' + "[" * 10_000 + '"}') == {"x": "[" * 10_000}


def test_yaml_aliases_that_nest_forever_or_blow_up_are_bounded():
    with pytest.raises(DocumentError, match="nested too deeply"):
        load_yaml("a: &a [*a]")  # a list that holds itself
    bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))
    with pytest.raises(DocumentError, match="more than 1,048,576 values"):
        load_yaml(bomb)  # ten to the ninth values through aliases
    assert NODES_MAX == 1 << 20


def test_json_constants_and_bad_text_are_refused_with_the_reason():
    with pytest.raises(DocumentError, match="NaN is not a number JSON allows"):
        parse_json('{"x": NaN}')
    with pytest.raises(DocumentError, match="not valid JSON"):
        parse_json("{")


def test_free_form_values_are_also_finite_when_asked():
    assert nesting_problem({"a": [1.5, float("inf")]}) is None
    problem = nesting_problem({"a": [1.5, float("inf")]}, finite=True)
    assert problem.loc == ("a", 1) and problem.reason == "must be a finite number"
