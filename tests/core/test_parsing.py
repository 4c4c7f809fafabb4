"""The shared action parsers: what must parse, and what must not."""

import time

import pytest

from turngym.core.parsing import MAX_JSON_DEPTH, ToolCall, parse_code_block, parse_tag, parse_tool_calls

TAGS = ("calc", "answer")


@pytest.mark.parametrize(
    ("text", "tag", "body"),
    [
        ("<answer>42</answer>", "answer", "42"),
        ("think first... <calc> 2 * 3 </calc> then more", "calc", "2 * 3"),
        ("<calc>1+1</calc><answer>2</answer>", "calc", "1+1"),  # first complete action wins
        ("<answer>multi\nline</answer>", "answer", "multi\nline"),
        ("<answer>x</answer >", "answer", "x"),
        ("<answer><b>7</b></answer>", "answer", "<b>7</b>"),
    ],
)
def test_parse_tag_accepts(text, tag, body):
    got = parse_tag(text, TAGS)
    assert got.ok, got.error
    assert (got.value.tag, got.value.body) == (tag, body)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("42", "no action found"),
        ("<answer>42", "unclosed <answer>"),
        ("<answer></answer>", "empty"),
        ("<answer>   </answer>", "empty"),
        ("<Answer>4</Answer>", "no action found"),  # tags are case-sensitive, like the grammar says
        ("<search>x</search>", "no action found"),
        ("</answer>42<answer>", "unclosed"),
    ],
)
def test_parse_tag_rejects_with_reason(text, needle):
    got = parse_tag(text, TAGS)
    assert not got.ok
    assert needle in got.error


def test_parse_tag_body_limit_and_non_string():
    assert "too long" in parse_tag("<answer>" + "9" * 50 + "</answer>", TAGS, max_body=10).error
    assert "must be a string" in parse_tag(None, TAGS).error  # type: ignore[arg-type]
    assert parse_tag("<answer></answer>", TAGS, allow_empty=True).value.body == ""


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ('{"name": "ls", "arguments": {"path": "/"}}', [("ls", {"path": "/"})]),
        ('Sure. {"name": "ls", "arguments": {}} done', [("ls", {})]),
        ('[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]', [("a", {"x": 1}), ("b", {})]),
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b", "arguments": {"y": [1, "}"]}}</tool_call>', [("a", {}), ("b", {"y": [1, "}"]})]),
        ('```json\n{"name": "f", "arguments": "{\\"k\\": 2}"}\n```', [("f", {"k": 2})]),
        ('{"function": {"name": "g", "arguments": "{}"}}', [("g", {})]),
        ('{"name": "h", "parameters": {"z": true}}', [("h", {"z": True})]),
        ('{"name": "s", "arguments": {"text": "a { b"}}', [("s", {"text": "a { b"})]),
    ],
)
def test_parse_tool_calls_accepts(text, calls):
    got = parse_tool_calls(text)
    assert got.ok, got.error
    assert got.value == tuple(ToolCall(n, a) for n, a in calls)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("call ls please", "no tool call found"),
        ('{"name": "ls", "arguments": {', "no tool call found"),  # unbalanced: nothing complete
        ('<tool_call>{"name": "ls",}</tool_call>', "not valid JSON"),
        ('{"arguments": {}}', '"name"'),
        ('{"name": "f", "arguments": [1]}', "must be a JSON object"),
        ('{"name": "f", "arguments": "{oops"}', "arguments are not valid JSON"),
        ("[]", "empty list"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_parse_tool_calls_rejects_with_reason(text, needle):
    got = parse_tool_calls(text)
    assert not got.ok
    assert needle in got.error


def test_parse_tool_calls_limit():
    text = "[" + ",".join('{"name": "f"}' for _ in range(5)) + "]"
    assert "too many" in parse_tool_calls(text, max_calls=4).error


def test_parse_code_block():
    text = "draft:\n```python\nx = 1\n```\nfinal:\n```py\nx = 2\n```"
    assert parse_code_block(text).value == "x = 2\n"
    assert parse_code_block(text, which="first").value == "x = 1\n"
    assert parse_code_block("```\nplain\n```").value == "plain\n"
    assert not parse_code_block("```python\n   \n```").ok
    assert not parse_code_block("```python\nunterminated").ok
    assert not parse_code_block("no code").ok


# -- hostile inputs: linear time, bounded depth, never an exception ---------------------------


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (lambda t: parse_tag(t, TAGS), "<calc>" * 200_000),
        (lambda t: parse_tag(t, TAGS), "<answer>" + "</answer    " * 100_000),
        (parse_tool_calls, "<tool_call>" * 100_000),
        (parse_tool_calls, "```" * 300_000),
        (parse_tool_calls, '{"' + '\\"' * 500_000),
        (parse_code_block, "```" * 300_000),
        (parse_code_block, "```python\n" + "x" * 1_000_000),
    ],
    ids=["open-tags", "near-miss-closes", "tool-call-tags", "fences-json", "escaped-quotes", "fences-code", "unclosed-fence"],
)
def test_adversarial_megabyte_parses_in_linear_time(parse, text):
    # The backtracking patterns took tens of seconds at a tenth of this size; linear scans take
    # milliseconds. The bound only has to separate the two on a loaded machine.
    t0 = time.perf_counter()
    got = parse(text)
    assert time.perf_counter() - t0 < 1.0
    assert not got.ok


def test_deep_json_is_an_error_not_a_recursion_error():
    for text in ("[" * 100_000 + "]" * 100_000, '{"name": "f", "arguments": "' + "[" * 100_000 + '"}', "{" * 100_000):
        got = parse_tool_calls(text)
        assert not got.ok and "nested too deeply" in got.error
    deep_ok = '{"name": "f", "arguments": {"x": ' + "[" * (MAX_JSON_DEPTH - 2) + "]" * (MAX_JSON_DEPTH - 2) + "}}"
    assert parse_tool_calls(deep_ok).ok
    too_deep = '{"name": "f", "arguments": {"x": ' + "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH + "}}"
    assert "nested too deeply" in parse_tool_calls(too_deep).error
    # brackets inside strings are not nesting
    assert parse_tool_calls('{"name": "f", "arguments": {"s": "' + "[" * 1000 + '"}}').ok


def test_integer_past_the_digit_limit_is_an_error_not_a_value_error():
    got = parse_tool_calls('{"name": "f", "arguments": {"x": ' + "9" * 5000 + "}}")
    assert not got.ok and "integer string conversion" in got.error
    got = parse_tool_calls('{"name": "f", "arguments": "{\\"x\\": ' + "9" * 5000 + '}"}')
    assert not got.ok and "arguments are not valid JSON" in got.error


def test_too_many_calls_are_refused_before_they_are_built():
    got = parse_tool_calls("[" + ",".join(['{"name": "a"}'] * 10_000) + "]", max_calls=16)
    assert "too many tool calls" in got.error
    got = parse_tool_calls('<tool_call>{"name": "a"}</tool_call>' * 100, max_calls=16)
    assert "too many tool calls" in got.error


@pytest.mark.parametrize("source", [
    "x = " + "1+" * 20_000 + "1",  # RecursionError inside compile() (Code-v0's <run>, issue 28)
    "x = " + "-" * 40_000 + "1",  # MemoryError from the parser
    "x = " + "(" * 100_000 + "1" + ")" * 100_000,
    "x = '\ud800'",  # a lone surrogate: UnicodeEncodeError
    "x = 1\x00",
    "x = a" + ".a" * 50_000,
], ids=["binary-chain", "unary-chain", "deep-parens", "lone-surrogate", "nul", "attribute-chain"])
def test_python_source_the_compiler_cannot_take_is_a_complaint_not_an_exception(source):
    from turngym.core.parsing import parse_python, python_syntax_error
    from turngym.envs.code.verifier import syntax_error
    from turngym.envs.swe.verifier import function_span

    assert python_syntax_error(source).startswith(("SyntaxError", "ValueError"))
    assert parse_python(source).error and parse_python(source).value is None
    assert syntax_error(source) == python_syntax_error(source, filename="solution.py")
    assert function_span(source, "f") is None
