"""Red team: fuzzed agent actions against every action parser and every env's ``step()``.

The agent writes the action, so every byte of it is hostile input. The parsers must be total
(a value or a reason, never an exception) and linear in time (an env steps inside a server that
holds the GIL while it parses); ``step()`` must turn whatever it is given into a step of the
episode: no exception, no infra error, signals within their declared ranges, and done within a
generous bound. Hypothesis draws the actions: random text over the grammars' tokens,
mutations of the env's own oracle and sample actions, and huge or deeply nested inputs.

The run is bounded for CI (``max_examples`` per test, and a per-env time budget after which
examples are discarded); ``benchmarks/bench_fuzz.py`` runs the long, random fuzz and reports
actions / exceptions / max step time per env.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turngym
from turngym.core.checker import step_problems
from turngym.core.parsing import MAX_JSON_DEPTH, parse_code_block, parse_tag, parse_tool_calls
from turngym.envs.household.parsing import normalize, split_command
from turngym.envs.math.calculator import calculate
from turngym.envs.math.verifier import check_answer
from turngym.envs.shop.parsing import parse_action
from turngym.envs.tools.parsing import parse_message

ENV_IDS = sorted(turngym.list_envs())
#: Steps that run code in a sandbox: fewer examples and a wider bound.
SLOW_ENVS = {"turngym/Code-v0", "turngym/SWE-v0"}
STEP_BOUND_S = {"fast": 2.0, "slow": 30.0}
BUDGET_S = {"fast": 4.0, "slow": 12.0}
EXAMPLES = {"fast": 200, "slow": 25}

TOKENS = (
    "<calc>", "</calc>", "</calc >", "<answer>", "</answer>", "<search>", "</search>", "<action>", "</action>",
    "<ACTION>", "<tool_call>", "</tool_call>", "<run>", "</run>", "<submit/>", "```", "```python\n", "```json\n",
    "\n", " ", "\t", "search[", "click[", "]", "[", "{", "}", '"', "\\", '\\"', '"name"', '"arguments"', ":", ",",
    "null", "1e999", "[TOOL_CALLS]", "<|python_tag|>", "go to ", "take ", " from ", "put ", " in/on ", "buy now",
    "\x00", "\u2028", "İ", "\U0001f642", "**", "^", "!", "\\frac{", "9" * 40, "10**10**10", "(", ")", "/", "0",
)
HOSTILE_MATH = (
    "10**10**10", "10^10^10", "$10^{10^{10}}$", "\\boxed{2^{2^{40}}}", "9^{9999999}", "(10^{10})!",
    "\\binom{1000000}{500000}", "$\\prod_{k=1}^{10^7} k$", "1e999999999", "1.5\\times 10^{99999999}",
    "9" * 5000, "(10**400)**0.5", "1.5**1000000.5", "sqrt(10**400+1)", "(" * 150 + "1" + ")" * 150,
)
HOSTILE_JSON = (10**4000, -(2**64), 1e308, 2**63, -1, "", "x" * 50_000, None, True, [], {}, "/etc/passwd")

token_text = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=6)), max_size=40).map("".join)


def _huge(kind: int, tok: str, size: int) -> str:
    if kind == 0:
        return tok * max(1, size // len(tok))
    if kind == 1:
        return "[" * size
    if kind == 2:
        return '{"a":' * (size // 5)
    if kind == 3:
        return '{"name": "x", "arguments": ' + "[" * size
    if kind == 4:
        return '{"name": "x", "arguments": "' + "[" * size + '"}'
    if kind == 5:
        return "```\n" + "x" * size
    return "<tool_call>" + '{"name": "' + "\\" * size + '"}' + "</tool_call>"


#: Code-v0's own ``<run>`` scan is still quadratic (test_code_run_tag_parse_is_linear): not repeated here yet.
HUGE_TOKENS = ("<calc>", "<run>", "<answer>", "<tool_call>", "<action>", "<search>", "```", "search[", "click[", "{", "[", '\\"', "</calc ")
huge_text = st.builds(
    _huge, st.integers(0, 6), st.sampled_from(HUGE_TOKENS), st.sampled_from([1_000, 50_000, 300_000, 1_000_000])
)
hostile_tagged = st.builds(lambda tag, body: f"<{tag}>{body}</{tag}>", st.sampled_from(["answer", "calc"]), st.sampled_from(HOSTILE_MATH))
mutation = st.tuples(
    st.integers(0, 7), st.floats(0, 1), st.floats(0, 1), st.sampled_from(TOKENS + HOSTILE_MATH), st.sampled_from([2, 10, 1000])
)


def _replace_leaf(obj, pick: float, value):  # noqa: ANN001, ANN202
    if isinstance(obj, dict) and obj:
        keys = list(obj)
        k = keys[int(pick * len(keys)) % len(keys)]
        return {**obj, k: _replace_leaf(obj[k], (pick * 7.3) % 1, value)}
    if isinstance(obj, list) and obj:
        i = int(pick * len(obj)) % len(obj)
        return obj[:i] + [_replace_leaf(obj[i], (pick * 7.3) % 1, value)] + obj[i + 1 :]
    return value


def mutate(base: str, ops: list[tuple[int, float, float, str, int]], cap: int = 1_000_000) -> str:
    """Apply drawn mutation ops to a valid action: insert/cut/repeat spans, wrap, repeat the
    whole, replace a JSON leaf with a hostile value, change case or whitespace."""
    text = base
    for op, a, b, tok, times in ops:
        text = text[:cap]
        n = len(text)
        i, j = sorted((int(a * n), int(b * n)))
        if op == 0:
            text = text[:i] + tok + text[i:]
        elif op == 1:
            text = text[:i] + text[j:]
        elif op == 2:
            text = text[:j] + text[i:j] * times + text[j:]
        elif op == 3:
            text = text[:i]
        elif op == 4:
            text = tok + text + tok
        elif op == 5:
            text = text * min(times, 50)
        elif op == 6:
            try:
                value = HOSTILE_JSON[int(a * len(HOSTILE_JSON)) % len(HOSTILE_JSON)]
                value = json.loads("[" * 60 + "1" + "]" * 60) if times == 1000 else value
                text = json.dumps(_replace_leaf(json.loads(text), b, value))
            except (ValueError, RecursionError):
                text = text[:i] + tok + text[j:]
        else:
            text = text.upper() if a < 0.5 else text.replace(" ", "\n")
    return text[:cap]


def _plans():  # noqa: ANN202
    return st.lists(
        st.one_of(
            st.tuples(st.just("text"), token_text),
            st.tuples(st.just("oracle"), st.lists(mutation, min_size=1, max_size=3)),
            st.tuples(st.just("sample"), st.lists(mutation, min_size=1, max_size=3)),
            st.tuples(st.just("huge"), huge_text),
            st.tuples(st.just("math"), hostile_tagged),
        ),
        min_size=1,
        max_size=4,
    )


def _action(env, plan) -> str:  # noqa: ANN001
    kind, arg = plan
    if kind == "oracle":
        return mutate(env.oracle_action(), arg)
    if kind == "sample":
        return mutate(env.sample_action(np.random.default_rng(len(arg))), arg)
    return arg


def _step_problems(env, result, dt: float, bound: float) -> list[str]:  # noqa: ANN001
    problems = step_problems(env, result)
    if dt > bound:
        problems.append(f"step took {dt:.2f} s (bound {bound} s)")
    return problems


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_step_survives_fuzzed_actions(env_id):
    speed = "slow" if env_id in SLOW_ENVS else "fast"
    env = turngym.make(env_id)
    env.reset(seed=0)  # the budget is for stepping: an env's first reset may start a server (MCP)
    deadline = time.monotonic() + BUDGET_S[speed]
    stepped = []

    @settings(
        max_examples=EXAMPLES[speed],
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(seed=st.integers(0, 10_000), plans=_plans())
    def run(seed, plans):  # noqa: ANN001, ANN202
        # The CI budget: later examples pass without stepping (the first always steps, so a loaded
        # machine cannot leave the test with nothing fuzzed). Not ``assume``: Hypothesis may
        # replay an example, and one valid before the deadline but discarded after it is "flaky".
        if stepped and time.monotonic() >= deadline:
            return
        env.reset(seed=seed)
        for plan in plans:
            action = _action(env, plan)
            t0 = time.perf_counter()
            result = env.step(action)  # an exception here fails the test, with the action shrunk
            dt = time.perf_counter() - t0
            problems = _step_problems(env, result, dt, STEP_BOUND_S[speed])
            assert not problems, (problems, action[:300])
            stepped.append(dt)
            if result[2] or result[3]:
                break

    try:
        run()
    finally:
        env.close()
    assert stepped, "no action was fuzzed"


#: The attack classes found by hand, played on every env first: a deterministic floor under
#: the random search (each builder gets the env's oracle action).
KNOWN_ATTACKS = {
    "deep JSON in a tool call": lambda o: '{"name": "x", "arguments": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}",
    "deep JSON in string arguments": lambda o: '<tool_call>{"name": "x", "arguments": "' + "[" * 100_000 + '"}</tool_call>',
    "deep JSON list of calls": lambda o: "[" * 100_000 + "]" * 100_000,
    "integers past the digit limit in the oracle's call": lambda o: re.sub(r"\d+", "9" * 5000, o),
    "integers past 64 bits in the oracle's call": lambda o: re.sub(r"\d+", "9" * 300, o),
    "repeated <calc>": lambda o: "<calc>" * 170_000,
    "repeated <tool_call>": lambda o: "<tool_call>" * 90_000,
    "repeated <action>": lambda o: "<action>" * 125_000,
    "repeated ```": lambda o: "```" * 330_000,
    "repeated search[": lambda o: "search[" * 140_000,
    "oracle action repeated": lambda o: (o + "\n") * max(1, 200_000 // max(1, len(o))),
    "power tower answer": lambda o: "<answer>10**10**10</answer>",
    "latex power tower answer": lambda o: "<answer>$10^{10^{10}}$</answer>",
    "huge binomial answer": lambda o: "<answer>$\\binom{1000000}{500000}$</answer>",
    "float overflow in the calculator": lambda o: "<calc>(10**400)**0.5</calc>",
}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_step_survives_known_attacks(env_id):
    speed = "slow" if env_id in SLOW_ENVS else "fast"
    env = turngym.make(env_id)
    failures = {}
    try:
        for name, build in KNOWN_ATTACKS.items():
            env.reset(seed=0)
            action = build(env.oracle_action())
            t0 = time.perf_counter()
            try:
                result = env.step(action)
            except Exception as exc:  # noqa: BLE001 - collected, so one run reports every attack
                failures[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
                continue
            problems = _step_problems(env, result, time.perf_counter() - t0, STEP_BOUND_S[speed])
            if problems:
                failures[name] = problems
    finally:
        env.close()
    assert not failures, failures


# ----------------------------------------------------------------------------- the parsers
PARSERS = {
    "parse_tag": lambda t: parse_tag(t, ("calc", "answer", "search")),
    "parse_tool_calls": parse_tool_calls,
    "parse_code_block": parse_code_block,
    "tools.parse_message": parse_message,
    "household.normalize": lambda t: split_command(normalize(t)),
    "shop.parse_action": parse_action,
    "math.calculate": lambda t: calculate(t[:300]),
    "math.check_answer": lambda t: check_answer(t[:1000], "17"),
}


@pytest.mark.parametrize("name", sorted(PARSERS))
@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(text=st.one_of(token_text, st.text(max_size=200), hostile_tagged, st.sampled_from(HOSTILE_MATH)))
def test_parsers_are_total(name, text):
    PARSERS[name](text)  # returns a value or a reason; raising fails


# Reference semantics: the regexes the linear scanners replaced. On small inputs their
# backtracking is harmless, so they pin down what the scanners must find.
_REF_TAG = re.compile(r"<(calc|answer)>(.*?)</\1\s*>", re.DOTALL)
_REF_OPEN = re.compile(r"<(calc|answer)>")
_REF_TOOL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_REF_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)


@settings(max_examples=1500, deadline=None, database=None, derandomize=True)
@given(text=token_text)
def test_linear_scanners_find_what_the_reference_regexes_find(text):
    got = parse_tag(text, ("calc", "answer"), allow_empty=True)
    m = _REF_TAG.search(text)
    if m is None:
        opened = _REF_OPEN.search(text)
        assert not got.ok and (opened is None or f"<{opened.group(1)}>" in got.error)
    else:
        assert got.ok and (got.value.tag, got.value.body) == (m.group(1), m.group(2).strip())

    fences = _REF_FENCE.findall(text)
    bodies = [b for lang, b in fences if lang.lower() in ("python", "py", "python3", "")]
    block = parse_code_block(text)
    assert (block.value if block.ok else None) == (bodies[-1] if bodies and bodies[-1].strip() else None)

    calls = parse_tool_calls(text)
    if _REF_TOOL.search(text) is None and not fences and "{" not in text and "[" not in text:
        assert calls.error.startswith("no tool call found")


ADVERSARIAL = {
    "repeated <calc>": "<calc>" * 170_000,
    "repeated </calc + spaces": "<calc>" + "</calc    " * 100_000,
    "repeated <tool_call>": "<tool_call>" * 90_000,
    "repeated <action>": "<action>" * 125_000,
    "repeated ```": "```" * 330_000,
    "unclosed fence": "```python\n" + "x" * 1_000_000,
    "nested [": "[" * 1_000_000,
    "nested objects": '{"a":' * 200_000,
    "escaped quotes": '{"' + '\\"' * 500_000,
    "flat brackets": "[" + "[]," * 330_000,
    "repeated search[": "search[" * 140_000,
    "spaces then text": "1" + " " * 1_000_000 + "x",
}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parsers_take_linear_time_on_a_megabyte_of_adversarial_text(name):
    """A megabyte of repeated opening tags took minutes with the backtracking patterns; a linear
    scan takes milliseconds. The bound is generous (a loaded CI machine), not a benchmark."""
    parse = PARSERS[name]
    parse("\\frac{1}{2}")  # warm: imports, and the math-verify worker's start-up is not parsing
    slow = {}
    for label, text in ADVERSARIAL.items():
        t0 = time.perf_counter()
        parse(text)
        dt = time.perf_counter() - t0
        if dt > 1.5:
            slow[label] = round(dt, 2)
    assert not slow, slow


def test_deep_json_is_an_invalid_action_with_a_reason_not_a_recursion_error():
    for text in ("[" * 100_000 + "]" * 100_000, '{"name": "f", "arguments": "' + "[" * 100_000 + '"}',
                 "<tool_call>" + '{"a":' * 50_000 + "</tool_call>"):
        got = parse_tool_calls(text)
        assert not got.ok and "nested too deeply" in got.error
    ok = parse_tool_calls('{"name": "f", "arguments": {"x": ' + "[" * (MAX_JSON_DEPTH - 2) + "]" * (MAX_JSON_DEPTH - 2) + "}}")
    assert ok.ok, ok.error
    assert "integer string conversion" in parse_tool_calls('{"name": "f", "arguments": {"x": ' + "9" * 5000 + "}}").error


@pytest.mark.parametrize("env_id", [e for e in ENV_IDS if "Tools" in e or "SWE" in e])
def test_deep_json_through_step_is_the_agents_invalid_action(env_id):
    env = turngym.make(env_id)
    try:
        env.reset(seed=0)
        for action in ("<tool_call>" + "[" * 100_000 + "</tool_call>", '[{"name": "x", "arguments": ' + "[" * 100_000 + "]" * 100_000 + "}]"):
            *_, info = env.step(action)
            assert not info["action_valid"] and "nested too deeply" in info["invalid_reason"], info
            if env.done:
                env.reset(seed=0)
    finally:
        env.close()


def _runs_within(code: str, seconds: float) -> bool:
    try:
        subprocess.run([sys.executable, "-c", code], timeout=seconds, check=True, capture_output=True)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_code_run_tag_parse_is_linear():
    assert _runs_within("from turngym.envs.code.parsing import parse_code_action; parse_code_action('<run>' * 40000)", 3.0)


def test_swe_search_with_a_catastrophic_regex_is_bounded():
    code = (
        "import json, turngym\n"
        "env = turngym.make('turngym/SWE-v0'); env.reset(seed=0)\n"
        "env.step(json.dumps({'name': 'search', 'arguments': {'pattern': '(.*.*)*#', 'regex': True}}))\n"
    )
    assert _runs_within(code, 30.0)  # a backtracking engine ran past 60 s
