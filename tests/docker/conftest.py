"""Fixtures of the container tests: a reachable engine, the offline base image, the sandbox image.

Every test here needs a running Docker engine. Without one they skip with the reason (a plain
``pytest`` on a laptop without Docker still passes); CI starts an engine with
``scripts/docker_engine.sh up`` and sets ``TURNGYM_REQUIRE_DOCKER=1``, which turns that skip
into a failure so a broken engine set-up cannot pass silently.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = os.environ.get("TURNGYM_BASE_IMAGE", "turngym-base:bookworm")


def load_path(name: str, path: Path) -> ModuleType:
    """Import a file that is not on ``sys.path`` (the shared test cases, the build helper)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _unavailable(reason: str) -> None:
    if os.environ.get("TURNGYM_REQUIRE_DOCKER") == "1":
        pytest.fail(f"TURNGYM_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client():
    try:
        import docker
    except ImportError:
        _unavailable("the docker SDK is not installed (pip install docker)")
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure to reach the engine means: skip
        _unavailable(f"no Docker engine reachable ({type(exc).__name__}); start one with scripts/docker_engine.sh up")
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    try:
        docker_client.images.get(BASE_IMAGE)
    except Exception:  # noqa: BLE001
        _unavailable(f"base image {BASE_IMAGE} is not loaded; build it with scripts/docker_engine.sh base")
    return BASE_IMAGE


@pytest.fixture(scope="session")
def images(docker_client, base_image) -> ModuleType:
    """``scripts/docker_images.py``: builds the images offline from ``base_image``."""
    return load_path("turngym_docker_images", ROOT / "scripts" / "docker_images.py")


@pytest.fixture(scope="session")
def sandbox_image(images, docker_client, base_image) -> str:
    info = images.build("sandbox", base=base_image, client=docker_client, if_missing=True)
    return info["tag"]


@pytest.fixture
def no_leaks(docker_client):
    """Every container and volume a test's sandboxes created is gone once they are closed."""
    label = {"label": "turngym.sandbox"}
    before_c = {c.id for c in docker_client.containers.list(all=True, filters=label)}
    before_v = {v.name for v in docker_client.volumes.list(filters=label)}
    yield
    left_c = {c.id for c in docker_client.containers.list(all=True, filters=label)} - before_c
    left_v = {v.name for v in docker_client.volumes.list(filters=label)} - before_v
    assert not left_c and not left_v, f"left behind: containers {left_c}, volumes {left_v}"


@pytest.fixture(scope="module")
def docker_sb(docker_client, sandbox_image):
    """A container sandbox on the sandbox image, shared by a module's tests."""
    from turngym.sandbox.docker import DockerSandbox

    sb = DockerSandbox(image=sandbox_image, client=docker_client)
    yield sb
    sb.close()


@pytest.fixture(scope="module")
def bwrap_sb():
    """The bubblewrap backend, to compare the container's results with."""
    from turngym.sandbox import SandboxUnavailable, make_sandbox

    try:
        sb = make_sandbox("bubblewrap")
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")
    yield sb
    sb.close()


def play_traces(env, seeds, sampled: int, oracle: int) -> list[list]:
    """Per seed: ``sampled`` random actions, then the oracle's until the episode ends (at most
    ``oracle`` of them); the whole trace, to compare one backend's episodes with another's."""
    import numpy as np

    out = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        trace: list = [obs]
        for i in range(sampled + oracle):
            action = env.sample_action(rng) if i < sampled else env.oracle_action()
            o, r, te, tr, info = env.step(action)
            assert not info.get("infra_error"), info.get("infra_error")
            trace.append((o, r, te, tr, info["signals"], info["state_key"], info.get("outcome")))
            if te or tr:
                break
        out.append(trace)
    return out
