# turngym env server: `turngym serve` on port 8000, non-root, no compilers in the final image.
#
#   docker build -f docker/server.Dockerfile -t turngym-server:0.1.0 .
#   docker run --rm -p 127.0.0.1:8000:8000 turngym-server:0.1.0 turngym/Math-v0 --max-sessions 2048
#
# Offline (no registry, no network inside the build): a locally imported base image and the
# wheels in docker/wheelhouse, filled on the host by scripts/docker_images.py:
#   docker build -f docker/server.Dockerfile -t turngym-server:0.1.0 --network none \
#     --build-arg BASE_IMAGE=turngym-base:bookworm --build-arg PIP_ARGS=--no-index .
# Pin the base by digest for bit-for-bit rebuilds:
#   --build-arg BASE_IMAGE=python:3.11.7-slim-bookworm@sha256:<digest>
# The base needs python3 with the venv module (python:*-slim, or Debian + python3-venv).
# Works with BuildKit and the classic builder (no RUN --mount, no syntax directive to pull).
ARG BASE_IMAGE=python:3.11.7-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG PIP_ARGS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY docker/wheelhouse/ /wheels/
COPY docker/requirements-server.txt pyproject.toml README.md /src/
COPY turngym /src/turngym
# the checkout's own wheel when the host built one (offline), else built from /src
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install $PIP_ARGS --find-links /wheels -r /src/requirements-server.txt \
 && if ls /wheels/turngym-*.whl >/dev/null 2>&1; then /opt/venv/bin/pip install --no-deps /wheels/turngym-*.whl; \
    else /opt/venv/bin/pip install $PIP_ARGS --no-deps /src; fi

FROM ${BASE_IMAGE}
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8
# the user by hand: minimal bases have no useradd
RUN echo 'turngym:x:10001:10001::/home/turngym:/bin/sh' >> /etc/passwd \
 && echo 'turngym:x:10001:' >> /etc/group \
 && mkdir -p /home/turngym && chown 10001:10001 /home/turngym
USER 10001:10001
WORKDIR /home/turngym
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD python3 -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status != 200)"
# SIGTERM -> uvicorn's graceful shutdown: open sessions are told, every env is closed.
STOPSIGNAL SIGTERM
ENTRYPOINT ["turngym", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["turngym/Math-v0"]
