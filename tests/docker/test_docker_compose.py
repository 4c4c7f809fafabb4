"""``docker/compose.yaml`` brings up N env servers and a remote rollout spreads over them.

Runs the compose file as a user would (``up --scale env=N``), with the server image built
offline, finds each replica's published port with ``compose port --index``, plays a lockstep
rollout whose envs are spread round-robin over the replicas, checks every replica served
sessions and the episodes are the in-process ones, then ``down`` leaves nothing behind.
Needs ``docker compose`` (the plugin) or ``docker-compose``; ``scripts/docker_engine.sh up``
installs one.
"""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import subprocess
import time

import httpx
import pytest

import turngym
from tests.docker.conftest import ROOT, _unavailable
from turngym.agents import OracleAgent
from turngym.rollout import run_episodes

REPLICAS = 3
ENV_ID = "turngym/Math-v0"


def _compose_cmd() -> list[str]:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    _unavailable("neither `docker compose` nor `docker-compose` is installed; scripts/docker_engine.sh up installs it")
    return []


@pytest.fixture(scope="module")
def server_image(images, docker_client, base_image) -> str:
    return images.build("server", base=base_image, client=docker_client, if_missing=True)["tag"]


def _healthy(port: int) -> dict | None:
    try:
        res = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    except httpx.HTTPError:
        return None
    return res.json() if res.status_code == 200 else None


def test_compose_brings_up_n_servers_a_remote_rollout_spreads_over(server_image, docker_client, monkeypatch):
    project = f"turngymtest{secrets.token_hex(4)}"
    token = secrets.token_hex(16)
    compose = [*_compose_cmd(), "-p", project, "-f", str(ROOT / "docker/compose.yaml")]
    env = {**os.environ, "ENV_IDS": ENV_ID, "TURNGYM_TOKEN": token, "MAX_SESSIONS": "16"}

    def run(*args: str) -> str:
        res = subprocess.run([*compose, *args], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"compose {' '.join(args)}:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        return res.stdout

    try:
        t0 = time.perf_counter()
        run("up", "-d", "--no-build", "--scale", f"env={REPLICAS}", "env")
        ports = []
        for i in range(1, REPLICAS + 1):
            out = run("port", "--index", str(i), "env", "8000").strip()  # "127.0.0.1:8101"
            ports.append(int(out.rsplit(":", 1)[1]))
        assert len(set(ports)) == REPLICAS, ports
        deadline = time.monotonic() + 60
        while not all(_healthy(p) for p in ports):
            assert time.monotonic() < deadline, f"not every replica answered /health within 60 s: {ports}"
            time.sleep(0.25)
        up_s = time.perf_counter() - t0
        monkeypatch.setenv("TURNGYM_TOKEN", token)
        urls = itertools.cycle(f"ws://127.0.0.1:{p}" for p in ports)
        made: list = []

        def make_remote():
            made.append(turngym.make(ENV_ID, remote=next(urls)))
            return made[-1]

        seeds = list(range(2 * REPLICAS))
        try:
            remote_eps = run_episodes(make_remote, OracleAgent(), seeds, batch_size=2 * REPLICAS)
        finally:
            for e in made:
                e.close()
        local_eps = run_episodes(lambda: turngym.make(ENV_ID), OracleAgent(), seeds, batch_size=2 * REPLICAS)
        assert [(ep.seed, ep.success, ep.total_reward) for ep in remote_eps] == [
            (ep.seed, ep.success, ep.total_reward) for ep in local_eps
        ]
        assert all(ep.success for ep in remote_eps)
        opened = [(_healthy(p) or {}).get("stats", {}).get("opened", 0) for p in ports]
        assert opened == [2] * REPLICAS, opened  # round-robin: every replica served its share
        print(f"compose up of {REPLICAS} replicas to all healthy: {up_s:.1f} s")
    finally:
        subprocess.run([*compose, "down", "-v", "--timeout", "15"], env=env, capture_output=True, timeout=120)
    left = docker_client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})
    assert not left, [c.name for c in left]
