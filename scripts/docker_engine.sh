#!/usr/bin/env bash
# A Docker engine for turngym's container backend and images, on a machine with no registry
# access and no service manager (CI, dev containers). Every step is idempotent.
#
#   scripts/docker_engine.sh up       # install (apt) if missing, start dockerd, load/build the base image
#                                     # (apt: docker.io, debootstrap, docker-compose when no compose is there)
#   scripts/docker_engine.sh stop     # stop the dockerd this script started (no-op otherwise)
#   scripts/docker_engine.sh status   # is an engine answering, which base image is loaded
#   scripts/docker_engine.sh base     # only the base image (load from cache, else debootstrap + cache)
#
# dockerd is started with --iptables=false --ip-masq=false --bridge=none: it never touches the
# host's firewall or interfaces, and containers get no network (what a sandbox wants; a server
# test uses --network host bound to 127.0.0.1).
#
# The base image (turngym-base:bookworm, Debian minbase + python3 + python3-venv, ~170 MB) is
# built without any registry: debootstrap from the Debian mirror apt already uses, then
# `docker import`. It is cached with `docker save` under $TURNGYM_CACHE (default
# /var/cache/turngym, else ~/.cache/turngym) and loaded from there on the next run.
#
# Environment: TURNGYM_CACHE, TURNGYM_DEBIAN_MIRROR (else read from apt's sources),
# TURNGYM_DEBIAN_SUITE (default bookworm), TURNGYM_BASE_IMAGE (default turngym-base:bookworm).
set -euo pipefail

BASE_IMAGE="${TURNGYM_BASE_IMAGE:-turngym-base:bookworm}"
SUITE="${TURNGYM_DEBIAN_SUITE:-bookworm}"
INCLUDE="python3,python3-venv,ca-certificates"
STATE_DIR="${TURNGYM_ENGINE_STATE:-/run/turngym-dockerd}"
PIDFILE="$STATE_DIR/dockerd.pid"
LOG="$STATE_DIR/dockerd.log"

log() { echo "[docker_engine] $*" >&2; }

cache_dir() {
  local d="${TURNGYM_CACHE:-/var/cache/turngym}"
  if mkdir -p "$d" 2>/dev/null && [ -w "$d" ]; then echo "$d"; return; fi
  d="${HOME:-/root}/.cache/turngym"
  mkdir -p "$d" && echo "$d"
}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

engine_up() { timeout 10 docker info >/dev/null 2>&1; }

install() {
  local need=()
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
  command -v docker >/dev/null 2>&1 || need+=(docker.io)
  # compose (docker/compose.yaml): the plugin if the engine has it, else Debian's docker-compose (v1)
  if ! { docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1; }; then
    need+=(docker-compose)
  fi
  if [ "${#need[@]}" -gt 0 ]; then
    log "installing ${need[*]} (apt)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
}

start() {
  if engine_up; then
    log "an engine already answers; not starting another"
    return
  fi
  as_root mkdir -p "$STATE_DIR"
  log "starting dockerd (log: $LOG)"
  # setsid: the daemon must not get the caller's terminal signals; its pid goes to $PIDFILE
  as_root sh -c "setsid dockerd --iptables=false --ip-masq=false --bridge=none >'$LOG' 2>&1 & echo \$! >'$PIDFILE'"
  local i
  for i in $(seq 1 120); do
    if engine_up; then log "engine up after ~$((i / 4)) s"; return; fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then break; fi
    sleep 0.25
  done
  log "dockerd did not come up; last lines of $LOG:"
  tail -n 20 "$LOG" >&2 || true
  return 1
}

stop() {
  if [ ! -f "$PIDFILE" ]; then
    log "no dockerd started by this script"
    return 0
  fi
  local pid
  pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    # containers first (the daemon would otherwise wait for their stop timeouts)
    timeout 30 sh -c 'ids=$(docker ps -q); [ -z "$ids" ] || docker rm -f $ids >/dev/null' || true
    as_root kill -TERM "$pid" || true
    local i
    for i in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "dockerd did not stop in 15 s; killing it"
      as_root kill -KILL "$pid" || true
    fi
  fi
  as_root rm -f "$PIDFILE"
  log "dockerd stopped"
}

# The first http(s) URI of a Debian archive that apt is configured with (one-line or deb822).
debian_mirror() {
  if [ -n "${TURNGYM_DEBIAN_MIRROR:-}" ]; then echo "$TURNGYM_DEBIAN_MIRROR"; return; fi
  local f uri
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri="$(awk '
      /^[[:space:]]*#/ {next}
      $1 == "deb" { u = ($2 ~ /^\[/) ? $3 : $2; if (u ~ /^https?:/ && u !~ /security/) { print u; exit } }
      tolower($1) == "uris:" { if ($2 ~ /^https?:/ && $2 !~ /security/) { print $2; exit } }
    ' "$f")"
    if [ -n "$uri" ]; then echo "${uri%/}"; return; fi
  done
  log "cannot find a Debian mirror in apt's sources; set TURNGYM_DEBIAN_MIRROR=http://<mirror>/debian"
  return 1
}

base() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    log "base image $BASE_IMAGE already loaded"
    return
  fi
  local cache key tarball t0
  cache="$(cache_dir)"
  key="$(printf '%s %s %s' "$SUITE" "$INCLUDE" "$(uname -m)" | sha256sum | cut -c1-12)"
  tarball="$cache/${BASE_IMAGE//[:\/]/_}-$key.tar"
  if [ -s "$tarball" ]; then
    t0=$SECONDS
    docker load -i "$tarball" >/dev/null
    log "base image $BASE_IMAGE loaded from $tarball in $((SECONDS - t0)) s"
    return
  fi
  install
  local mirror rootfs
  mirror="$(debian_mirror)"
  rootfs="$(mktemp -d /var/tmp/turngym-rootfs.XXXXXX)"
  t0=$SECONDS
  log "building $BASE_IMAGE: debootstrap $SUITE from $mirror (about a minute or two)"
  if ! as_root debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    tail -n 20 "$cache/debootstrap.log" >&2
    as_root rm -rf "$rootfs"
    return 1
  fi
  as_root rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  as_root tar -C "$rootfs" -c . | docker import -c 'ENV LANG=C.UTF-8' - "$BASE_IMAGE" >/dev/null
  as_root rm -rf "$rootfs"
  docker save -o "$tarball.tmp" "$BASE_IMAGE" && mv "$tarball.tmp" "$tarball"
  log "base image $BASE_IMAGE built in $((SECONDS - t0)) s, cached at $tarball"
}

status() {
  if engine_up; then
    echo "engine: up ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
  else
    echo "engine: down"
  fi
  if engine_up && docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then echo "base image: $BASE_IMAGE"; else echo "base image: missing"; fi
}

case "${1:-}" in
  up) install; start; base ;;
  start) install; start ;;
  stop) stop ;;
  base) base ;;
  status) status ;;
  mirror) debian_mirror ;;
  *) echo "usage: $0 up|start|stop|base|status|mirror" >&2; exit 2 ;;
esac
