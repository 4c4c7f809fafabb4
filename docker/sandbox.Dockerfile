# The image of turngym's Docker sandbox backend (turngym.sandbox.DockerSandbox).
#   docker build -t turngym-sandbox:latest -f docker/sandbox.Dockerfile .
# Offline, from a locally imported base and wheels in docker/wheelhouse (scripts/docker_images.py):
#   docker build -t turngym-sandbox:latest -f docker/sandbox.Dockerfile \
#     --build-arg BASE_IMAGE=turngym-base:bookworm --build-arg PIP_ARGS=--no-index .
# Sessions run it read-only, as uid 65534, with no network; /work is a volume, /tmp a tmpfs.
# Agent code gets the base image's python3 plus numpy (a venv on PATH at /opt/venv); pytest and
# its dependencies are there for the SWE grader. PACKAGES mirrors docker/requirements-sandbox.txt.
# Works with BuildKit and the classic builder (no RUN --mount, no syntax directive to pull).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
ARG PIP_ARGS=""
ARG PACKAGES="numpy==2.4.6 pytest==9.0.3 pluggy==1.6.0 iniconfig==2.3.0 packaging==26.2 pygments==2.20.0"
COPY docker/wheelhouse/ /wheels/
RUN python3 -m venv /opt/venv \
 && if [ -n "$PACKAGES" ]; then /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check $PIP_ARGS --find-links /wheels $PACKAGES; fi \
 && rm -rf /wheels \
 && mkdir -p /work && chown 65534:65534 /work
ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 PYTHONHASHSEED=0 LANG=C.UTF-8
WORKDIR /work
CMD ["sleep", "infinity"]
