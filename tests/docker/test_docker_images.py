"""The images under docker/ build offline from the locally imported base, and the server image
serves a full episode to the remote client.

The server container shares the host's network namespace (the engine runs with
``--bridge=none``) but binds 127.0.0.1 on a free port, so nothing is reachable from outside.
"""

from __future__ import annotations

import secrets
import socket
import time

import httpx
import pytest

import turngym


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


@pytest.fixture(scope="module")
def server_image(images, docker_client, base_image) -> str:
    info = images.build("server", base=base_image, client=docker_client)
    return info["tag"]


def test_server_image_serves_a_full_episode_and_stops_cleanly(docker_client, server_image, monkeypatch):
    port, token = _free_port(), secrets.token_hex(16)
    container = docker_client.containers.run(
        server_image,
        ["turngym/Math-v0", "--max-sessions", "8"],
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
        remote = turngym.make("turngym/Math-v0", remote=f"ws://127.0.0.1:{port}")
        local = turngym.make("turngym/Math-v0")
        try:
            got, want = _episode(remote, 5), _episode(local, 5)
        finally:
            remote.close()
            local.close()
        assert got == want and got[-1][2] and got[-1][1] > 0  # the same episode, solved
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
        out = api.logs(cid).decode()
        assert out.startswith("42 10001 ") and "'home'" not in out, out  # ran in bwrap's own root view
    finally:
        api.remove_container(cid, force=True)
