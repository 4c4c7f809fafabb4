"""The images under docker/ build offline from the locally imported base, and the server image
serves full episodes of two env families (Math, and Shop with its BM25/fuzzy-matching
dependencies) to the remote client and to OpenEnv's own client.

The server container shares the host's network namespace (the engine runs with
``--bridge=none``) but binds 127.0.0.1 on a free port, so nothing is reachable from outside.
"""

from __future__ import annotations

import re
import secrets
import socket
import time
import tomllib
from pathlib import Path

import httpx
import pytest

import turngym

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _episode(env, seed: int) -> list[tuple[str, float, bool, bool]]:
    obs, _ = env.reset(seed=seed)
    out = [(obs, 0.0, False, False)]
    for _ in range(12):
        obs, reward, term, trunc, info = env.step(env.oracle_action())
        assert not info.get("infra_error"), info.get("infra_error")
        out.append((obs, reward, term, trunc))
        if term or trunc:
            break
    return out


def _openenv_episode(base_url: str, token: str, env_id: str, seed: int) -> None:
    """OpenEnv's ``GenericEnvClient`` plays ``env_id`` to the end, turn for turn as a local env does."""
    generic = pytest.importorskip("openenv.core.generic_client", reason="openenv-core not installed")
    client = generic.GenericEnvClient(base_url=base_url)
    client._ws_url += f"?token={token}"  # OpenEnv's client sets no headers: the server's documented query form
    local = turngym.make(env_id)
    try:
        with client.sync() as env:
            obs, info = local.reset(seed=seed)
            result = env.reset(seed=seed, episode_id=f"ep-{seed}")
            assert result.observation["text"] == obs and result.observation["state_key"] == info["state_key"]
            for _ in range(12):
                action = local.oracle_action()
                o, r, term, trunc, i = local.step(action)
                result = env.step({"text": action})
                ob = result.observation
                assert (ob["text"], result.reward, result.done) == (o, r, term or trunc)
                assert ob["signals"] == i["signals"] and ob["state_key"] == i["state_key"]
                if result.done:
                    break
            assert result.done and ob["outcome"]["success"] is True and ob["outcome"] == i["outcome"]
    finally:
        local.close()


def test_server_requirements_pin_every_core_dependency():
    """The image installs only the pinned file: a core dependency missing there breaks whole env families."""
    pinned = {re.split(r"[=<>~!; ]", line, maxsplit=1)[0].lower().replace("_", "-")
              for line in (ROOT / "docker/requirements-server.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["server"]
    names = {re.split(r"[=<>~!; \[]", dep, maxsplit=1)[0].lower().replace("_", "-") for dep in wanted}
    assert not names - pinned, f"not pinned in docker/requirements-server.txt: {sorted(names - pinned)}"


@pytest.fixture(scope="module")
def server_image(images, docker_client, base_image) -> str:
    info = images.build("server", base=base_image, client=docker_client)
    return info["tag"]


def test_server_image_serves_a_full_episode_and_stops_cleanly(docker_client, server_image, monkeypatch):
    port, token = _free_port(), secrets.token_hex(16)
    container = docker_client.containers.run(
        server_image,
        ["turngym/Math-v0", "turngym/Shop-v0", "--max-sessions", "8"],
        entrypoint=["turngym", "serve", "--host", "127.0.0.1", "--port", str(port)],
        environment={"TURNGYM_TOKEN": token},
        network_mode="host",
        read_only=True,
        tmpfs={"/tmp": "size=64m"},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        detach=True,
        labels={"turngym.test": "server"},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                if health.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            container.reload()
            assert container.status == "running", container.logs().decode()[-2000:]
            assert time.monotonic() < deadline, "the server did not answer /health within 60 s"
            time.sleep(0.25)
        assert container.attrs["Config"]["User"] == "10001:10001"
        monkeypatch.setenv("TURNGYM_TOKEN", token)
        for env_id in ("turngym/Math-v0", "turngym/Shop-v0"):
            remote = turngym.make(env_id, remote=f"ws://127.0.0.1:{port}")
            local = turngym.make(env_id)
            try:
                got, want = _episode(remote, 5), _episode(local, 5)
            finally:
                remote.close()
                local.close()
            assert got == want and got[-1][2] and got[-1][1] > 0, env_id  # the same episode, solved
        for path, env_id in (("", "turngym/Math-v0"), ("/openenv/turngym/Shop-v0", "turngym/Shop-v0")):
            _openenv_episode(f"http://127.0.0.1:{port}{path}", token, env_id, seed=7)
        container.stop(timeout=15)
        assert container.wait(timeout=30)["StatusCode"] == 0, container.logs().decode()[-2000:]
    finally:
        container.remove(force=True)


def test_server_bwrap_image_runs_agent_code_in_bubblewrap(images, docker_client, server_image, base_image):
    tag = images.build("server-bwrap", base=base_image, client=docker_client)["tag"]
    api = docker_client.api
    # the documented flags: seccomp/apparmor/systempaths unconfined (no --privileged, no caps)
    host_config = api.create_host_config(security_opt=["seccomp=unconfined", "apparmor=unconfined"], network_mode="none")
    host_config["MaskedPaths"], host_config["ReadonlyPaths"] = [], []
    probe = (
        "from turngym.sandbox import make_sandbox\n"
        "r = make_sandbox('bubblewrap').run_python('import os; print(6 * 7, os.getuid(), sorted(os.listdir(\"/\")))')\n"
        "print(r.stdout, r.stderr)"
    )
    cid = api.create_container(tag, ["-c", probe], entrypoint=["python3"], host_config=host_config)["Id"]
    try:
        api.start(cid)
        assert api.wait(cid, timeout=120)["StatusCode"] == 0, api.logs(cid).decode()[-2000:]
        out = api.logs(cid, stderr=False).decode()  # stderr: the container has no cpu cgroup, and says so
        assert out.startswith("42 10001 ") and "'home'" not in out, out  # ran in bwrap's own root view
    finally:
        api.remove_container(cid, force=True)
