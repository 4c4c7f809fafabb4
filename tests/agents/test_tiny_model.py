"""The embedded default model: built offline in seconds, an ordinary HF directory, cached, seeded."""

from __future__ import annotations

import json
import os

from turngym.agents.tiny import TinyModelConfig, build_tiny_model, task_corpus

SMALL = TinyModelConfig(
    vocab_size=600,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    episodes_per_env=16,
)


def test_builds_a_loadable_hf_model_directory(tmp_path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = build_tiny_model(tmp_path / "m", config=SMALL, env_ids=["turngym/Math-v0"])
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.vocab_size == len(tok) <= 600
    text = "Ava has 12 marbles. <calc>12 * 7 - 5</calc>"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text  # byte-level: lossless
    assert len(tok.encode("<calc>", add_special_tokens=False)) <= 3  # trained on the task grammar
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and model.generation_config.eos_token_id == tok.eos_token_id
    provenance = json.loads((path / "turngym_tiny.json").read_text())
    assert provenance["env_ids"] == ["turngym/Math-v0"] and provenance["parameters"] == sum(
        p.numel() for p in model.parameters()
    )


def test_build_is_deterministic_and_cached(tmp_path) -> None:
    a = build_tiny_model(tmp_path / "a", config=SMALL, env_ids=["turngym/Math-v0"])
    b = build_tiny_model(tmp_path / "b", config=SMALL, env_ids=["turngym/Math-v0"])
    for name in ("tokenizer.json", "model.safetensors"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    stamp = os.stat(a / "model.safetensors").st_mtime_ns
    assert build_tiny_model(tmp_path / "a", config=SMALL, env_ids=["turngym/Math-v0"]) == a
    assert os.stat(a / "model.safetensors").st_mtime_ns == stamp  # a cache hit does not rebuild


def test_default_model_size_is_in_the_few_million_range() -> None:
    path = build_tiny_model()
    params = json.loads((path / "turngym_tiny.json").read_text())["parameters"]
    assert 1_000_000 <= params <= 8_000_000


def test_corpus_holds_prompts_observations_and_actions() -> None:
    texts = list(task_corpus(["turngym/Math-v0"], episodes_per_env=4))
    assert any("<calc>" in t for t in texts) and any(t.startswith("<result>") for t in texts)
    assert any("Solve the math word problem" in t for t in texts)


def test_the_cache_key_names_the_envs_this_environment_can_play(tmp_path, monkeypatch) -> None:
    """Issue 38: README line 1's venv (no optional extras) built the default model without the
    optional envs' text, and a full install on the same cache reused it. Here an env needs a
    package that is missing in the first "venv" and installed in the second: the two builds must
    land in different model directories, each naming the envs it actually played."""
    import importlib
    import sys

    from turngym.core.registry import register, unregister

    monkeypatch.setenv("TURNGYM_CACHE", str(tmp_path / "cache"))
    site = tmp_path / "site"
    site.mkdir()
    (site / "tiny_extra_env.py").write_text(
        "import tiny_extra_dep  # noqa: F401  (the optional extra)\nfrom turngym.envs.math.env import MathEnv as ExtraEnv\n")
    monkeypatch.syspath_prepend(str(site))
    register("turngym/TinyKeyExtra-v0", "tiny_extra_env:ExtraEnv", description="test double: Math behind an extra",
             max_turns=10, family="math")
    ids = ["turngym/Math-v0", "turngym/TinyKeyExtra-v0"]
    small = TinyModelConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                            num_attention_heads=2, episodes_per_env=4)
    try:
        without = build_tiny_model(config=small, env_ids=ids)
        assert build_tiny_model(config=small, env_ids=ids) == without  # same environment: the cached one
        (site / "tiny_extra_dep.py").write_text("")  # "pip install" the extra
        importlib.invalidate_caches()
        with_extra = build_tiny_model(config=small, env_ids=ids)
        wider = build_tiny_model(config=TinyModelConfig(**{**small.__dict__, "hidden_size": 64}), env_ids=ids)
    finally:
        unregister("turngym/TinyKeyExtra-v0")
        for name in ("tiny_extra_env", "tiny_extra_dep"):
            sys.modules.pop(name, None)
    assert with_extra != without
    first = json.loads((without / "turngym_tiny.json").read_text())
    second = json.loads((with_extra / "turngym_tiny.json").read_text())
    assert first["env_ids_played"] == ["turngym/Math-v0"] and first["env_ids_skipped"] == ["turngym/TinyKeyExtra-v0"]
    assert second["env_ids_played"] == ids and second["env_ids_skipped"] == []
    assert first["corpus_sha256"] != second["corpus_sha256"]
    models = tmp_path / "cache" / "models"
    assert len(list((models / "index").glob("*.json"))) == 3  # one lookup per environment and config
    assert len(list((models / "corpus").glob("*.json.gz"))) == 2  # one corpus per environment: the shapes share it
    third = json.loads((wider / "turngym_tiny.json").read_text())
    assert wider != with_extra and third["corpus_sha256"] == second["corpus_sha256"]


def test_the_corpus_is_played_in_a_child_process(tmp_path, monkeypatch) -> None:
    """A cold build plays every env; their modules (Search pulls numba/llvmlite) must stay out of the
    building process, whose later vLLM start scans ``sys.modules`` and fails on llvmlite's objects.
    An env registered at run time (with a module only this process's ``sys.path`` finds) is played too."""
    import sys

    from turngym.core.registry import register, unregister

    monkeypatch.setenv("TURNGYM_CACHE", str(tmp_path / "cache"))
    site = tmp_path / "site"
    site.mkdir()
    (site / "tiny_child_env.py").write_text("from turngym.envs.math.env import MathEnv as ChildEnv\n")
    monkeypatch.syspath_prepend(str(site))
    register("turngym/TinyChildOnly-v0", "tiny_child_env:ChildEnv", description="test double: Math in another module",
             max_turns=10, family="math")
    small = TinyModelConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                            num_attention_heads=2, episodes_per_env=2)
    try:
        out = build_tiny_model(config=small, env_ids=["turngym/TinyChildOnly-v0"])
    finally:
        unregister("turngym/TinyChildOnly-v0")
    assert "tiny_child_env" not in sys.modules
    assert json.loads((out / "turngym_tiny.json").read_text())["env_ids_played"] == ["turngym/TinyChildOnly-v0"]


def test_a_family_that_ends_in_an_infra_error_is_skipped_whole() -> None:
    """README line 1's venv has no pytest, so SWE's grader answered with an infra error, whose text
    became part of the default model's corpus (and changed it when the error's wording did)."""
    import warnings

    from turngym.core.errors import InfraError
    from turngym.core.registry import register, unregister
    from turngym.envs.math.env import MathEnv

    class BrokenGraderMath(MathEnv):  # test double: Math whose grader is missing from this environment
        def _step(self, action):  # noqa: ANN001, ANN202
            raise InfraError("the grader cannot start here: SENTINEL-TEXT")

    import sys

    sys.modules[__name__].BrokenGraderMath = BrokenGraderMath
    register("turngym/TinyBrokenGrader-v0", f"{__name__}:BrokenGraderMath", description="test double", max_turns=10, family="math")
    played: list[str] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            texts = list(task_corpus(["turngym/TinyBrokenGrader-v0", "turngym/Math-v0"], episodes_per_env=2, played=played))
    finally:
        unregister("turngym/TinyBrokenGrader-v0")
    assert played == ["turngym/Math-v0"]
    assert not any("SENTINEL" in t for t in texts) and texts  # not even the error's own text, and Math's text is all there
    assert any("skipped turngym/TinyBrokenGrader-v0" in str(w.message) and "SENTINEL" in str(w.message) for w in caught)
