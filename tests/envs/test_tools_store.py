"""The tools env on the generated online store: tools, policies, turn mechanics, signals."""

import json
import sys

import numpy as np
import pytest

import turngym
from turngym.core.errors import ConfigError, TaskError
from turngym.envs.tools.schema import validate_arguments
from turngym.envs.tools.store import STORE_TOOLS, StoreBackend
from turngym.envs.tools.tasks import ToolsTask, generate_store_task


def make():
    return turngym.make("turngym/Tools-Store-v0")


def play_oracle(env, task):
    env.reset(options={"task": task})
    while True:
        *_, term, trunc, info = env.step(env.oracle_action())
        if term or trunc:
            return info


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


def find_task(pred, limit=500):
    for seed in range(limit):
        t = generate_store_task(seed)
        if pred(t):
            return t
    raise AssertionError("no generated task matches")


def customer_of(task):
    return task.initial["customers"][task.meta["customer_id"]]


def order_with_status(task, status):
    cid = task.meta["customer_id"]
    return next(
        (oid for oid, o in sorted(task.initial["orders"].items()) if o["customer_id"] == cid and o["status"] == status),
        None,
    )


def test_check_env_store():
    turngym.check_env(make())


def test_oracle_solves_every_generated_task():
    env = make()
    for seed in range(60):
        info = play_oracle(env, generate_store_task(seed))
        assert info["outcome"]["success"], (seed, info["outcome"])
        assert info["outcome"]["turn_verdicts"] == [True] * generate_store_task(seed).n_turns


def test_random_agent_near_zero_with_signals_in_range():
    env = make()
    rng = np.random.default_rng(0)
    wins = 0
    for seed in range(60):
        env.reset(seed=seed)
        while True:
            *_, term, trunc, info = env.step(env.sample_action(rng))
            assert env.reward_spec.violations(info["signals"]) == []
            if term or trunc:
                break
        wins += info["outcome"]["success"]
    assert wins / 60 < 0.05


def test_generation_is_deterministic_and_regenerable_from_id():
    a, b = generate_store_task(11), generate_store_task(11)
    assert a == b
    env = make()
    obs, info = env.reset(options={"task": "tools/store/11"})
    assert info["task_id"] == "tools/store/11" and env.task == a
    assert generate_store_task(12) != a


def test_task_round_trips_through_dict():
    t = generate_store_task(5)
    back = ToolsTask.from_dict(json.loads(json.dumps(t.to_dict())))
    assert play_oracle(make(), back)["outcome"]["success"]


def test_reply_without_calls_ends_the_turn_and_shows_next_user_message():
    t = find_task(lambda t: t.n_turns >= 2)
    env = make()
    env.reset(options={"task": t})
    env.step(env.oracle_action())
    obs, reward, term, trunc, info = env.step("All done! " + " ".join(t.answers[0]))
    assert not term and obs == f"User: {t.turns[1]}"
    assert info["signals"]["turn_passed"] == 1.0 and info["signals"]["state_match"] == 1.0


def test_missing_answer_fails_the_turn():
    t = find_task(lambda t: bool(t.answers[0]))
    env = make()
    env.reset(options={"task": t})
    env.step(env.oracle_action())
    *_, info = env.step("Done, anything else?")
    s = info["signals"]
    assert s["state_match"] == 1.0 and s["answers_given"] < 1.0 and s["turn_passed"] == 0.0


def test_refund_of_undelivered_order_is_refused_and_flagged_forbidden():
    t = find_task(lambda t: order_with_status(t, "shipped") is not None)
    oid = order_with_status(t, "shipped")
    env = make()
    env.reset(options={"task": t})
    env.step(call("identify_customer", email=customer_of(t)["email"]))
    before = env.state.backend.db["orders"][oid]["status"]
    obs, *_, info = env.step(call("refund_order", order_id=oid, reason="damaged"))
    assert "policy violation" in obs and "delivered" in obs
    assert info["signals"]["forbidden_action"] == 1.0 and info["signals"]["exec_ok"] == 0.0
    assert env.state.backend.db["orders"][oid]["status"] == before == "shipped"


def test_account_actions_need_identification_and_own_orders():
    t = generate_store_task(3)
    env = make()
    env.reset(options={"task": t})
    mine = order_with_status(t, "pending") or sorted(t.initial["orders"])[0]
    obs, *_, info = env.step(call("get_order", order_id=mine))
    assert "identify the customer" in obs and info["signals"]["forbidden_action"] == 1.0
    env.step(call("identify_customer", email=customer_of(t)["email"]))
    other = next(oid for oid, o in t.initial["orders"].items() if o["customer_id"] != t.meta["customer_id"])
    obs, *_, info = env.step(call("get_order", order_id=other))
    assert "another customer" in obs and info["signals"]["forbidden_action"] == 1.0


def test_cancel_pending_order_restocks_and_moves_progress():
    t = find_task(lambda t: any(c["name"] == "cancel_order" for c in t.gold[0]))
    env = make()
    obs, info = env.reset(options={"task": t})
    oid = next(c["arguments"]["order_id"] for c in t.gold[0] if c["name"] == "cancel_order")
    stock_before = {it["sku"]: t.initial["products"][it["sku"]]["stock"] for it in t.initial["orders"][oid]["items"]}
    _, _, _, _, info = env.step(env.oracle_action())
    assert info["signals"]["progress"] > 0.0
    db = env.state.backend.db
    assert db["orders"][oid]["status"] == "cancelled"
    for it in t.initial["orders"][oid]["items"]:
        assert db["products"][it["sku"]]["stock"] == stock_before[it["sku"]] + it["qty"]


def test_broken_call_is_invalid_and_executes_nothing():
    env = make()
    env.reset(seed=0)
    key = env.state_key()
    obs, reward, term, trunc, info = env.step('{"name": "cancel_order", "arguments": {"order_id": ')
    assert info["action_valid"] is False and "not complete JSON" in info["invalid_reason"]
    assert not term and env.state_key() == key and reward < 0


def test_schema_violation_names_the_argument():
    env = make()
    env.reset(seed=0)
    obs, *_, info = env.step(call("cancel_order", order_id="O1000", reason="because"))
    assert info["action_valid"] is False and "reason must be one of" in obs
    obs, *_, info = env.step(call("get_order", order_id=1000))
    assert "order_id must be string, got integer" in obs
    obs, *_, info = env.step(call("get_order", id="O1000"))
    assert "unknown argument(s) ['id']" in obs
    obs, *_, info = env.step(call("teleport", to="moon"))
    assert "unknown tool 'teleport'" in obs and info["signals"]["forbidden_action"] == 0.0


def test_unneeded_call_and_needed_call():
    t = generate_store_task(4)
    env = make()
    env.reset(options={"task": t})
    *_, info = env.step(call("search_products", query="zzz nothing"))
    assert info["signals"]["unneeded_call"] == 1.0 and info["signals"]["exec_ok"] == 1.0
    *_, info = env.step(call("identify_customer", email=customer_of(t)["email"]))
    assert info["signals"]["unneeded_call"] == 0.0


def test_several_calls_run_in_order_in_one_message():
    t = generate_store_task(2)
    env = make()
    env.reset(options={"task": t})
    email = customer_of(t)["email"]
    text = f"<tool_call>{call('identify_customer', email=email)}</tool_call>\n<tool_call>{call('get_customer', customer_id=t.meta['customer_id'])}</tool_call>"
    obs, *_, info = env.step(text)
    assert obs.count("<tool_response>") == 2 and info["signals"]["exec_ok"] == 1.0


def test_state_key_tracks_session_and_turn():
    t = generate_store_task(8)
    env = make()
    _, info0 = env.reset(options={"task": t})
    *_, info1 = env.step(call("identify_customer", email=customer_of(t)["email"]))
    assert info1["state_key"] != info0["state_key"]  # the session is state, though not compared to gold
    env.reset(options={"task": t})
    *_, again = env.step(call("identify_customer", email=customer_of(t)["email"]))
    assert again["state_key"] == info1["state_key"]


def test_store_tools_are_valid_json_schema_and_gold_calls_validate():
    tools = {tl["function"]["name"]: tl for tl in STORE_TOOLS}
    for seed in range(40):
        for turn in generate_store_task(seed).gold:
            for c in turn:
                assert validate_arguments(c["arguments"], tools[c["name"]]["function"]["parameters"]) is None


def test_backend_copy_is_independent():
    t = generate_store_task(1)
    a = StoreBackend(t.initial)
    b = a.copy()
    a.call("identify_customer", {"email": customer_of(t)["email"]})
    a.call("update_customer_address", {"address": "1 New St"})
    assert not a.same_state(b) and b.db == dict(t.initial)


def test_bad_config_and_ids_raise():
    with pytest.raises(ConfigError):
        turngym.make("turngym/Tools-Store-v0", sources=("nope",))
    env = make()
    with pytest.raises(TaskError):
        env.reset(options={"task": "tools/unknown/1"})


def test_bfcl_missing_gives_install_command(monkeypatch):
    from turngym.envs.tools import bfcl

    caches = (bfcl._package, bfcl._load_category)  # warm caches would skip the import
    for c in caches:
        c.cache_clear()
    monkeypatch.setitem(sys.modules, "bfcl_eval", None)
    try:
        with pytest.raises(ImportError, match="pip install --no-deps"):
            turngym.make("turngym/Tools-BFCL-v0")
        assert turngym.make("turngym/Tools-Store-v0").reset(seed=0)  # the store needs no bfcl-eval
    finally:
        for c in caches:
            c.cache_clear()


@pytest.mark.parametrize(
    "template",
    [
        '{"name": "identify_customer", "arguments": {"email": "EMAIL"}}',  # plain JSON
        '<tool_call>\n{"name": "identify_customer", "arguments": {"email": "EMAIL"}}\n</tool_call>',  # Hermes / Qwen
        '<|python_tag|>{"name": "identify_customer", "parameters": {"email": "EMAIL"}}',  # Llama 3.1
        '[TOOL_CALLS][{"name": "identify_customer", "arguments": {"email": "EMAIL"}}]',  # Mistral
        '{"type": "function", "function": {"name": "identify_customer", "arguments": "{\\"email\\": \\"EMAIL\\"}"}}',  # OpenAI
        'Let me look you up.\n```json\n{"name": "identify_customer", "arguments": {"email": "EMAIL"}}\n```',
    ],
)
def test_native_tool_call_formats_are_understood(template):
    t = generate_store_task(0)
    env = make()
    env.reset(options={"task": t})
    obs, *_, info = env.step(template.replace("EMAIL", customer_of(t)["email"]))
    assert info["action_valid"] and info["signals"]["exec_ok"] == 1.0, obs
    assert env.state.backend._session == t.meta["customer_id"]


def test_env_tools_are_openai_format():
    env = make()
    env.reset(seed=0)
    assert [tl["function"]["name"] for tl in env.tools] == [tl["function"]["name"] for tl in STORE_TOOLS]
    assert all(tl["type"] == "function" and tl["function"]["parameters"]["type"] == "object" for tl in env.tools)


def test_hostile_json_is_an_invalid_action_with_a_reason():
    env = make()
    env.reset(seed=0)
    key = env.state_key()
    for action, reason in [
        ('{"name": "get_order", "arguments": {"order_id": ' + "[" * 100_000 + "]" * 100_000 + "}}", "nested too deeply"),
        ('{"name": "get_order", "arguments": "' + "[" * 100_000 + '"}', "nested too deeply"),
        ('{"name": "get_order", "arguments": {"order_id": ' + "9" * 5000 + "}}", "integer string conversion"),
        ('{"name": "get_order", "arguments": {"order_id": ' + "9" * 300 + "}}", "fit in 64 bits"),
    ]:
        *_, info = env.step(action)
        assert info["action_valid"] is False and reason in info["invalid_reason"], info["invalid_reason"]
        assert env.state_key() == key
