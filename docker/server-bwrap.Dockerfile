# syntax=docker/dockerfile:1.7
# turngym sandbox image: python slim + bubblewrap, for envs that execute agent code
# (turngym.sandbox runs each program in a bwrap namespace with rlimits, no network).
# It is the env server image plus bwrap, so sandboxed envs are served the same way.
#
#   docker build -f docker/server-bwrap.Dockerfile -t turngym-server-bwrap:0.1.0 .
#   docker run --rm -p 127.0.0.1:8001:8000 \
#     --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#     turngym-server-bwrap:0.1.0 turngym/Math-v0
#
# bwrap needs unprivileged user namespaces inside the container; Docker's default seccomp and
# AppArmor profiles forbid them, hence the two --security-opt flags (no --privileged, no added
# capabilities). Check with: docker run --rm --entrypoint bwrap ... --ro-bind / / true
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY docker/requirements-server.txt ./
RUN pip wheel --wheel-dir /wheels -r requirements-server.txt
COPY pyproject.toml README.md ./
COPY turngym ./turngym
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# bubblewrap from the base image's Debian release (pinned by the base tag/digest above);
# --no-install-recommends keeps the layer to bwrap and its two libraries.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap \
 && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels /wheels/*.whl \
 && useradd --create-home --uid 10001 turngym
USER turngym
WORKDIR /home/turngym
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD python -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status != 200)"
STOPSIGNAL SIGTERM
ENTRYPOINT ["turngym", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["turngym/Math-v0"]
