"""Math env: calculator safety, answer checking, signals, tasks, loader, oracle vs random."""

import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest

import turngym
from turngym.agents import OracleAgent, RandomAgent
from turngym.core.errors import ConfigError, TaskError
from turngym.envs.math.calculator import CalcError, calculate, evaluate, format_number
from turngym.envs.math.env import MathEnv
from turngym.envs.math.latex_check import VerifyWorker, check_latex, screen
from turngym.envs.math.tasks import MathTask, generate_task, generate_tasks, load_gsm8k
from turngym.envs.math.verifier import answers_match, check_answer, to_number
from turngym.rollout import run_episodes, summarize

FIXTURE = Path(__file__).parent.parent / "fixtures" / "gsm8k_tiny.jsonl"


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("1 + 2 * 3", Fraction(7)),
        ("(1 + 2) * 3", Fraction(9)),
        ("7 / 2", Fraction(7, 2)),
        ("7 // 2", Fraction(3)),
        ("-7 % 3", Fraction(2)),
        ("2 ** 10", Fraction(1024)),
        ("2^3", Fraction(8)),
        ("0.1 + 0.2", Fraction(3, 10)),  # exact, unlike floats
        ("sqrt(16) + abs(-2)", Fraction(6)),
        ("round(2.567, 2)", Fraction(257, 100)),
        ("max(3, 9, 4) - min(2, 5)", Fraction(7)),
        ("12 × 3 ÷ 4", Fraction(9)),
        ("5 * 4 =", Fraction(20)),
    ],
)
def test_calculator_values(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("__import__('os').system('true')", "only plain calls"),
        ("__import__('os')", "unknown function"),
        ("open('/etc/passwd')", "unknown function"),
        ("x + 1", "unknown name"),
        ("(1).__class__", "not allowed"),
        ("[1, 2]", "not allowed"),
        ("'a' * 3", "only numbers"),
        ("lambda: 1", "not allowed"),
        ("1 / 0", "division by zero"),
        ("9 ** 9 ** 9", "too large"),
        ("2 ** 100000", "too large"),
        ("(-8) ** 0.5", "negative"),
        ("1 +", "cannot parse"),
        ("1" * 400, "too long"),
        ("True + 1", "only numbers"),
    ],
)
def test_calculator_rejects(expr, needle):
    with pytest.raises(CalcError, match=needle):
        evaluate(expr)
    value, error = calculate(expr)
    assert value is None and needle in error


def test_format_number():
    assert format_number(Fraction(72)) == "72"
    assert format_number(Fraction(1, 4)) == "0.25"
    assert format_number(Fraction(2, 3)) == "0.6666666667"


@pytest.mark.parametrize(
    ("pred", "gold", "ok"),
    [
        ("72", "72", True),
        ("72.0", "72", True),
        ("$72", "72", True),
        ("72 clips", "72", True),
        ("1,000", "1000", True),
        ("0.75", "3/4", True),
        (r"\frac{3}{4}", "3/4", True),
        (r"\boxed{72}", "72", True),
        ("73", "72", False),
        ("72 or 73", "72", False),
        ("", "72", False),
        ("seventy-two", "72", False),
    ],
)
def test_answers_match(pred, gold, ok):
    assert answers_match(pred, gold) is ok


@pytest.mark.parametrize("junk", ["", "1/0", "..", "1e99999", "🙂", "2 or 3", "1e4000000", "-", "$", "1/2/3/"])
def test_to_number_reads_junk_as_no_number(junk):
    assert to_number(junk) is None


@pytest.mark.parametrize(("text", "value"), [("--5", -5), ("1e3", 1000), ("-2.5", Fraction(-5, 2)), ("1,000.", 1000)])
def test_to_number_reads_the_one_number_in_the_text(text, value):
    assert to_number(text) == value


def test_generated_tasks_are_reproducible_and_consistent():
    a, b = generate_task(42, 4), generate_task(42, 4)
    assert a == b and a.id == "math/gen/4/42"
    assert generate_task(43, 4) != a
    for t in generate_tasks(300, seed=1):
        assert 1 <= len(t.chain) == t.meta["steps"] <= 6
        assert len(t.exprs) == len(t.chain)
        for expr, value in zip(t.exprs, t.chain):
            assert evaluate(expr) == Fraction(value), (t.id, expr, value)
        assert t.gold == t.chain[-1]
        assert int(t.gold) > 0


def test_task_id_round_trips_through_reset():
    env = MathEnv()
    obs, info = env.reset(seed=3)
    obs2, info2 = MathEnv().reset(options={"task": info["task_id"]})
    assert obs == obs2 and info["state_key"] == info2["state_key"]
    with pytest.raises(TaskError):
        env.reset(options={"task": "math/nope"})


def test_signals_on_a_known_task():
    task = MathTask(id="t", prompt="Ann has 3 boxes of 4 pens and buys 5 more.", gold="17", chain=("12", "17"), exprs=("3 * 4", "12 + 5"))
    env = MathEnv()
    env.reset(options={"task": task})
    _, r, term, _, info = env.step("<calc>3*4</calc>")
    assert info["signals"] == {"tool_ok": 1.0, "new_intermediate": 1.0, "progress": 0.5, "repeat_call": 0.0, "answer_correct": 0.0}
    _, _, _, _, info = env.step("<calc>3*4</calc>")  # the same value again: no new evidence, a repeat
    assert info["signals"]["new_intermediate"] == 0.0 and info["signals"]["repeat_call"] == 1.0
    key_before = info["state_key"]
    _, _, _, _, info = env.step("<calc>1/0</calc>")
    assert info["signals"]["tool_ok"] == 0.0 and info["action_valid"] is True
    assert info["state_key"] == key_before  # failed call: same state
    obs, _, _, _, info = env.step("the answer is 17")
    assert info["action_valid"] is False and "no action found" in info["invalid_reason"]
    obs, r, term, _, info = env.step("<answer>17</answer>")
    assert (r, term) == (1.0, True)
    assert info["signals"]["answer_correct"] == 1.0 and info["signals"]["progress"] == 1.0
    assert info["outcome"] == {"reward": 1.0, "success": True, "answer": "17", "gold": "17"}


def test_wrong_answer_scores_zero():
    env = MathEnv()
    env.reset(seed=0)
    *_, r, term, trunc, info = env.step("<answer>-1</answer>")
    assert (r, term, info["outcome"]["success"]) == (0.0, True, False)


def test_gsm8k_loader(tmp_path):
    tasks = load_gsm8k(FIXTURE)
    assert [t.gold for t in tasks] == ["72", "10", "1000"]
    assert tasks[0].chain == ("24", "72") and tasks[0].exprs == ("48/2", "48+24")
    assert tasks[1].chain == ("1/5", "10")
    assert tasks[2].chain == ("1000",)
    env = MathEnv(tasks=str(FIXTURE))
    eps = run_episodes(lambda: env, OracleAgent(), [0, 1, 2, 3], batch_size=1)
    assert all(ep.success for ep in eps)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "no final line"}\n')
    with pytest.raises(TaskError, match="####"):
        load_gsm8k(bad)
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(TaskError, match="'answer'"):
        load_gsm8k(bad)
    bad.write_text("not json\n")
    with pytest.raises(TaskError, match="bad.jsonl:1"):
        load_gsm8k(bad)


def test_config_errors():
    with pytest.raises(ConfigError):
        MathEnv(min_steps=4, max_steps=2)
    with pytest.raises(ConfigError):
        MathEnv(tasks=[])


def test_oracle_solves_all_and_random_does_not():
    seeds = list(range(200))
    oracle = summarize(run_episodes(lambda: turngym.make("turngym/Math-v0"), OracleAgent(), seeds))
    random = summarize(run_episodes(lambda: turngym.make("turngym/Math-v0"), RandomAgent(seed=1), seeds))
    assert oracle.success_rate == 1.0
    assert random.success_rate < 0.2
    assert oracle.signal_means["new_intermediate"] > 5 * random.signal_means["new_intermediate"]


def test_oracle_recovers_after_random_turns():
    import numpy as np

    env = MathEnv()
    rng = np.random.default_rng(0)
    for seed in range(30):
        env.reset(seed=seed)
        for _ in range(2):
            *_, term, trunc, _ = env.step(env.sample_action(rng))
            if term:
                break
        if term:
            continue
        while True:
            *_, term, trunc, info = env.step(env.oracle_action())
            if term or trunc:
                break
        assert info["outcome"]["success"] or trunc


# -- hostile answers and expressions: bounded, and the agent's failure ----------------------------
HOSTILE_ANSWERS = [
    "10**10**10",
    "10^10^10",
    "$10^{10^{10}}$",
    r"\boxed{2^{2^{40}}}",
    "9^{9999999}",
    "$(10^{10})!$",
    r"$\binom{1000000}{500000}$",
    r"$\prod_{k=1}^{10^7} k$",
    r"$1.5\times 10^{99999999}$",
    "$(10^{999})^{999}$",
    "1e999999999",
]


@pytest.mark.parametrize("answer", HOSTILE_ANSWERS)
def test_hostile_answers_score_zero_quickly(answer):
    env = MathEnv()
    env.reset(seed=0)
    # The checker's worker starts on first use (seconds on a busy machine), in whichever test
    # comes first: start it here, so the bound times the answer, whatever ran before.
    check_latex("1", "1")
    t0 = time.perf_counter()
    obs, reward, terminated, _, info = env.step(f"<answer>{answer}</answer>")
    assert time.perf_counter() - t0 < 2.0
    assert terminated and reward == 0.0 and info["infra_error"] is None
    assert not info["outcome"]["success"]


def test_refused_answers_say_why():
    env = MathEnv()
    env.reset(seed=0)
    obs, *_, info = env.step("<answer>10**10**10</answer>")
    assert "not checked: power tower" in obs and "power tower" in info["outcome"]["reason"]


@pytest.mark.parametrize("pred", ["17", "17.0", r"\frac{34}{2}", r"\boxed{17}", "$17$", r"$\dfrac{51}{3}$", "2^4+1", "17!/16!"])
def test_gold_still_verifies_in_every_notation(pred):
    assert check_answer(pred, "17").equal, check_answer(pred, "17")


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("x^2 + 2x + 1", None),
        (r"6.02 \times 10^{23}", None),
        ("2^{999}", None),
        (r"\binom{10}{3}", None),
        ("10**10**10", "power tower"),
        ("(2^{100})^{100}", "exponent too large"),
        ("9^{99999}", "exponent too large"),
        ("100000!", "factorial with a large operand"),
        (r"\sum_{k=1}^{10^9} k", "power tower"),
    ],
)
def test_screen(text, refused):
    assert screen(text) == refused


def test_math_verify_worker_is_killed_at_its_deadline_and_replaced():
    worker = VerifyWorker()
    try:
        assert worker.check("\\frac{34}{2}", "17") is True  # started and warm
        pid = worker._proc.pid
        t0 = time.perf_counter()
        # The screen would refuse this; straight to the worker, it builds a 10-billion-digit number.
        assert worker.check("10**10**10", "17", timeout_s=0.5) is None
        assert time.perf_counter() - t0 < 2.0
        assert worker._proc is None  # killed, not left computing
        assert worker.check("\\frac{34}{2}", "17") is True  # a fresh one answers
        assert worker._proc.pid != pid
    finally:
        worker.close()


def test_a_slow_answer_check_does_not_hold_the_gil():
    worker = VerifyWorker()
    gaps: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            time.sleep(0.01)
            gaps.append(time.perf_counter() - t)

    try:
        worker.check("1/2", "0.5")
        thread = threading.Thread(target=tick)
        thread.start()
        worker.check("10**10**10", "17", timeout_s=1.0)
        stop.set()
        thread.join()
        assert max(gaps) < 0.5
    finally:
        stop.set()
        worker.close()


@pytest.mark.parametrize("expr", ["(10**400)**0.5", "sqrt(10**400 + 1)", "1.5**1000000.5", "1e308 * 10.0**10 ** 0.5"])
def test_calculator_float_overflow_is_a_calc_error(expr):
    value, error = calculate(expr)
    assert value is None and error


def test_huge_rationals_format_without_float_overflow():
    assert format_number(Fraction(10**400, 3)) == "3.333333333E+399"
    assert format_number(Fraction(1, 10**400)) == "1E-400"


def test_to_number_is_bounded():
    t0 = time.perf_counter()
    assert to_number("1e999999999") is None  # not built: ten billion digits
    assert to_number("1" + " " * 200_000 + "x") == 1  # one number in text; no backtracking over the run
    assert time.perf_counter() - t0 < 1.0
    assert to_number("1e400") == 10**400 and to_number("2.5e-3") == Fraction(1, 400)
