"""The tools env on BFCL v4 multi-turn: gold replay, agreement with BFCL's own checker.

Needs ``pip install --no-deps "bfcl-eval==2026.3.23" mpmath``; skipped without it. The fast
tests use every 40th task (20 of 800, all four categories); ``-m slow`` runs all 800.
"""

import copy
import json

import numpy as np
import pytest

pytest.importorskip("bfcl_eval")
pytest.importorskip("mpmath")

import turngym  # noqa: E402
from turngym.envs.tools.agreement import (  # noqa: E402
    agreement,
    gold_trajectory,
    perturb,
    play_bfcl,
    play_ours,
    render_call,
)
from turngym.envs.tools.bfcl import (  # noqa: E402
    BFCL_CATEGORIES,
    MISSED_FUNCTION_PROMPT,
    BfclBackend,
    bfcl_task,
    bfcl_tools,
    load_bfcl_tasks,
    parse_call_string,
)

BFCL_IDS = [
    "turngym/Tools-v0",
    "turngym/Tools-BFCL-v0",
    "turngym/Tools-BFCL-Base-v0",
    "turngym/Tools-BFCL-LongContext-v0",
    "turngym/Tools-BFCL-MissFunc-v0",
    "turngym/Tools-BFCL-MissParam-v0",
]
ALL = load_bfcl_tasks()
SAMPLE = ALL[::40]


@pytest.fixture(scope="module")
def env():
    return turngym.make("turngym/Tools-BFCL-v0")


def test_800_tasks_in_four_categories():
    assert len(ALL) == 800
    assert {c: sum(t.category == c for t in ALL) for c in BFCL_CATEGORIES} == dict.fromkeys(BFCL_CATEGORIES, 200)
    assert {t.category for t in SAMPLE} == set(BFCL_CATEGORIES)


@pytest.mark.parametrize("env_id", BFCL_IDS)
def test_check_env_bfcl_variants(env_id):
    turngym.check_env(turngym.make(env_id), n_garbage=100)


def test_gold_replay_passes_ours_and_bfcl_checker_on_sample(env):
    for task in SAMPLE:
        ours, verdicts = play_ours(env, task, gold_trajectory(task))
        assert ours.passed and all(verdicts), task.id
        assert play_bfcl(task, gold_trajectory(task)).passed, task.id


def test_perturbed_verdicts_agree_with_bfcl_on_sample(env):
    report = agreement(env, SAMPLE, seed=1)
    assert report["disagreements"] == []
    assert report["gold_pass_ours"] == report["gold_pass_bfcl"] == len(SAMPLE)
    assert report["perturbed_fail_bfcl"] > 0  # the perturbations do break tasks


@pytest.mark.slow
def test_all_800_gold_and_perturbations_agree_with_bfcl(env):
    report = agreement(env, ALL, seed=0)
    print({k: v for k, v in report.items() if k != "disagreements"})
    assert report["gold_pass_ours"] == report["gold_pass_bfcl"] == 800
    assert report["episode_agreement"] == 1.0 and report["first_failed_turn_agreement"] == 1.0


def test_dropped_state_changing_call_fails_that_turn(env):
    task = bfcl_task("multi_turn_base_0")
    traj = gold_trajectory(task)
    traj[0][0] = [c for c in traj[0][0] if c["name"] != "mkdir"]
    ours, verdicts = play_ours(env, task, traj)
    assert verdicts[0] is False and ours.first_failed == 0
    assert play_bfcl(task, traj).first_failed == 0


def test_perturb_kinds_change_the_trajectory():
    rng = np.random.default_rng(0)
    task = bfcl_task("multi_turn_base_0")
    gold = gold_trajectory(task)
    for kind in ("drop", "swap", "alter"):
        traj = perturb(task, kind, rng)
        assert traj is not None and traj != gold


def test_positional_gold_arguments_are_named_without_eval():
    assert parse_call_string("sort('final_report.pdf')", ["GorillaFileSystem"]) == {
        "name": "sort",
        "arguments": {"file_name": "final_report.pdf"},
    }
    with pytest.raises(turngym.core.errors.TaskError, match="non-literal"):
        parse_call_string("cd(folder=__import__('os').getcwd())", ["GorillaFileSystem"])


def test_model_text_is_never_evaluated(env):
    env.reset(options={"task": bfcl_task("multi_turn_base_0")})
    payload = "__import__('os').system('touch /tmp/turngym_pwned')"
    obs, *_, info = env.step(json.dumps({"name": "cd", "arguments": {"folder": payload}}))
    assert "No such directory" in obs or "error" in obs.lower()
    assert info["signals"]["exec_ok"] == 0.0


def test_render_call_round_trips_through_parser():
    call = {"name": "mv", "arguments": {"source": "a b.txt", "destination": "x'y"}}
    assert parse_call_string(render_call(call), ["GorillaFileSystem"]) == call


def test_tools_are_json_schema_and_excluded_functions_never_offered(env):
    task = next(t for t in ALL if t.excluded)
    obs, _ = env.reset(options={"task": task})
    offered = {t["function"]["name"] for t in env.tools}
    assert not offered & set(task.excluded)
    for tool in env.tools:
        params = tool["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert not _bfcl_type_names(params), tool["function"]["name"]
    assert all(f'"name": "{n}"' not in obs for n in task.excluded)


def _bfcl_type_names(node):
    """BFCL-dialect type names ("dict", "float", "tuple", "any") left anywhere in a schema."""
    if isinstance(node, dict):
        found = {node["type"]} & {"dict", "float", "tuple", "any"} if isinstance(node.get("type"), str) else set()
        return found.union(*(_bfcl_type_names(v) for k, v in node.items() if k != "description"))
    if isinstance(node, list):
        return set().union(*(_bfcl_type_names(v) for v in node))
    return set()


def test_missed_function_is_revealed_at_its_turn(env):
    task = next(t for t in ALL if t.category == "miss_func")
    ((turn, names),) = task.missed.items()
    env.reset(options={"task": task})
    assert not set(names) & {t["function"]["name"] for t in env.tools}
    while env.state.turn < int(turn):
        obs, *_ = env.step(env.oracle_action())
    assert obs.startswith("<tools>") and MISSED_FUNCTION_PROMPT in obs
    assert set(names) <= {t["function"]["name"] for t in env.tools}


def test_hidden_function_call_is_flagged_and_strict_mode_refuses():
    task = next(t for t in ALL if t.category == "miss_func")
    name = next(iter(task.missed.values()))[0]
    tool = bfcl_tools(task)[name]["function"]
    args = {p: "x" for p in tool["parameters"]["required"]}
    lenient = turngym.make("turngym/Tools-BFCL-v0")
    lenient.reset(options={"task": task})
    *_, info = lenient.step(json.dumps({"name": name, "arguments": args}))
    assert info["action_valid"] and info["signals"]["forbidden_action"] == 1.0 and info["signals"]["call_valid"] == 0.0
    strict = turngym.make("turngym/Tools-BFCL-v0", strict_types=True)
    strict.reset(options={"task": task})
    obs, *_, info = strict.step(json.dumps({"name": name, "arguments": args}))
    assert not info["action_valid"] and "not available" in obs and info["signals"]["forbidden_action"] == 1.0


def test_type_mismatch_runs_like_bfcl_but_is_not_call_valid(env):
    task = bfcl_task("multi_turn_base_173")  # its gold calls close_ticket(ticket_id='ticket_001'), doc says integer
    _, verdicts = play_ours(env, task, gold_trajectory(task))
    assert all(verdicts)


def test_cd_changes_state_key_but_not_compared_state(env):
    task = bfcl_task("multi_turn_base_0")
    _, info0 = env.reset(options={"task": task})
    backend0 = env.state.backend.copy()
    *_, info1 = env.step(json.dumps({"name": "cd", "arguments": {"folder": "document"}}))
    assert info1["state_key"] != info0["state_key"]  # the working directory is state
    assert env.state.backend.same_state(backend0)  # BFCL does not compare it


def test_progress_potential_reaches_one_with_the_gold(env):
    task = bfcl_task("multi_turn_base_0")
    env.reset(options={"task": task})
    seen = []
    while True:
        *_, term, trunc, info = env.step(env.oracle_action())
        seen.append(info["signals"]["progress"])
        if term or trunc:
            break
    assert seen[-1] == 1.0 and min(seen) < 1.0


def test_backend_copies_do_not_share_argument_objects():
    task = bfcl_task("multi_turn_base_90")  # post_tweet stores the mentions list it is given
    backend = BfclBackend.create(task)
    mentions = ["@a"]
    backend.call("authenticate_twitter", {"username": "wanderlust_emma", "password": "x"})
    backend.call("post_tweet", {"content": "hi", "tags": [], "mentions": mentions})
    mentions.append("@b")
    assert all("@b" not in t["mentions"] for t in backend.instances["TwitterAPI"].tweets.values())


def test_random_agent_near_zero_on_bfcl():
    env = turngym.make("turngym/Tools-BFCL-v0")
    rng = np.random.default_rng(0)
    wins = 0
    for seed in range(40):
        env.reset(seed=seed)
        while True:
            *_, term, trunc, info = env.step(env.sample_action(rng))
            if term or trunc:
                break
        wins += info["outcome"]["success"]
    assert wins / 40 < 0.1


def test_runaway_math_arguments_are_refused_not_computed():
    task = next(t for t in ALL if "MathAPI" in t.classes)
    backend = BfclBackend.create(task)
    res = backend.call("power", {"base": 9, "exponent": 10**9})
    assert res.error and "too large" in res.content
    assert backend.call("power", {"base": 2, "exponent": 10}).content == '{"result": 1024}'


def test_a_result_too_large_to_print_is_an_execution_error_not_an_exception():
    task = next(t for t in ALL if "MathAPI" in t.classes)
    backend = BfclBackend.create(task)
    res = backend.call("power", {"base": 2**62, "exponent": 9000})  # 558k bits: more digits than str() allows
    assert res.error and "cannot be printed" in res.content


def test_integers_past_64_bits_are_refused_before_any_call(env):
    task = next(t for t in ALL if "MathAPI" in t.classes)
    env.reset(options={"task": task})
    key = env.state_key()
    action = json.dumps({"name": "multiply", "arguments": {"a": 10**4000, "b": 10**4000}})
    obs, reward, term, trunc, info = env.step(action)  # a 4000-digit literal: BFCL's multiply would build 8000
    assert info["action_valid"] is False and "fit in 64 bits" in info["invalid_reason"]
    assert env.state_key() == key and info["infra_error"] is None


def _process_state() -> dict:
    """Everything process-wide a BFCL call could change: the data globals of every backend
    module, every public method's defaults, mpmath's precision and the decimal context."""
    import decimal
    import inspect
    import sys

    import mpmath

    from turngym.envs.tools.bfcl import _backend_class, _public_methods

    state: dict = {"mpmath.mp.prec": mpmath.mp.prec, "decimal": repr(decimal.getcontext())}
    for name in sorted({c for t in ALL for c in t.classes}):
        cls = _backend_class(name)
        for method in _public_methods(name):
            params = inspect.signature(getattr(cls, method)).parameters.values()
            state[f"{name}.{method} defaults"] = copy.deepcopy([p.default for p in params])
    package = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
    for modname, module in sorted(sys.modules.items()):
        if modname.startswith(package):
            for key, value in vars(module).items():
                if not key.startswith("__") and isinstance(value, (dict, list, set, tuple, str, int, float)):
                    state[f"{modname}.{key}"] = copy.deepcopy(value)
    return state


def test_bfcl_calls_leave_no_process_state():
    """Calls that wrote process-wide state (issue 31) and a random fuzz of every backend, base
    and long-context, with optional arguments omitted: nothing outside the episode changes."""
    before = _process_state()
    long_context = [t for t in ALL if t.category == "long_context"]
    task = bfcl_task("multi_turn_base_5")  # its gold posts a tweet without mentions
    login = next(c for turn in task.gold for c in turn if c["name"] == "authenticate_twitter")
    twitter = BfclBackend.create(task)
    twitter.call("authenticate_twitter", login["arguments"])
    tweet = json.loads(twitter.call("post_tweet", {"content": "no mentions given"}).content)
    twitter.call("mention", {"tweet_id": tweet["id"], "mentioned_usernames": ["@alice"]})
    assert twitter.instances["TwitterAPI"].tweets[tweet["id"]]["mentions"] == ["@alice"]
    math = BfclBackend.create(next(t for t in ALL if "MathAPI" in t.classes))
    assert not math.call("logarithm", {"value": 10.0, "base": 2.0, "precision": 50}).error
    assert not math.call("square_root", {"number": 2.0, "precision": 60}).error
    vehicle = BfclBackend.create(next(t for t in long_context if "VehicleControlAPI" in t.classes))
    assert "outsideTemperature" in vehicle.call("get_outside_temperature_from_google", {}).content
    travel = BfclBackend.create(next(t for t in long_context if "TravelAPI" in t.classes))
    token = travel.instances["TravelAPI"].access_token
    cancelled = travel.call("cancel_booking", {"access_token": token, "booking_id": "booking_901"})
    assert json.loads(cancelled.content) == {"cancel_status": True}  # refunds a long-context card
    # BFCL's own checker (the agreement measure) runs the same calls through its harness
    steps = [[login, {"name": "post_tweet", "arguments": {"content": "x"}},
              {"name": "mention", "arguments": {"tweet_id": tweet["id"], "mentioned_usernames": ["@bob"]}}]]
    play_bfcl(task, [steps] + [[] for _ in task.gold[1:]])
    env = turngym.make("turngym/Tools-BFCL-v0")
    rng = np.random.default_rng(0)
    for cls in sorted({c for t in ALL for c in t.classes}):
        for pool in (ALL, long_context):
            env.reset(options={"task": next(t for t in pool if cls in t.classes)})
            for _ in range(40):
                *_, term, trunc, _ = env.step(env.sample_action(rng))
                if term or trunc:
                    break
    after = _process_state()
    changed = [k.rsplit(".", 2)[-2:] for k in before if before[k] != after[k]]
    assert changed == [], f"process-wide state changed by BFCL calls: {changed}"
