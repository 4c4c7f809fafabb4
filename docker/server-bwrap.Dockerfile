# turngym env server plus bubblewrap, for envs that execute agent code (turngym.sandbox runs
# each program in a bwrap namespace with rlimits, no network). It is the server image plus
# bwrap, so build docker/server.Dockerfile first:
#
#   docker build -f docker/server.Dockerfile -t turngym-server:0.1.0 .
#   docker build -f docker/server-bwrap.Dockerfile -t turngym-server-bwrap:0.1.0 .
#   docker run --rm -p 127.0.0.1:8001:8000 \
#     --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#     --security-opt systempaths=unconfined turngym-server-bwrap:0.1.0 turngym/Code-v0
#
# bubblewrap comes from the base's Debian release (apt), or offline from .deb files in
# docker/wheelhouse (`apt-get download bubblewrap libcap2` on a matching host; done by
# scripts/docker_images.py) with --build-arg PIP_ARGS=--no-index.
# bwrap needs unprivileged user namespaces inside the container; Docker's default seccomp and
# AppArmor profiles forbid them, and Docker's masked /proc paths stop bwrap mounting a fresh
# /proc, hence the three --security-opt flags (no --privileged, no added capabilities).
# Check with: docker run --rm --entrypoint bwrap <those flags> turngym-server-bwrap:0.1.0 --ro-bind / / true
ARG SERVER_IMAGE=turngym-server:0.1.0
FROM ${SERVER_IMAGE}
USER root
COPY docker/wheelhouse/ /wheels/
RUN export PATH=/usr/local/sbin:/usr/sbin:/sbin:$PATH \
 && if ls /wheels/*.deb >/dev/null 2>&1; then dpkg -i /wheels/*.deb; \
    else apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*; fi \
 && rm -rf /wheels \
 && bwrap --version
USER 10001:10001
