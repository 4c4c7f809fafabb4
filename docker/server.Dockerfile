# syntax=docker/dockerfile:1.7
# turngym env server: `turngym serve` on port 8000, non-root, no compilers in the final image.
#
#   docker build -f docker/server.Dockerfile -t turngym-server:0.1.0 .
#   docker run --rm -p 127.0.0.1:8000:8000 turngym-server:0.1.0 turngym/Math-v0 --max-sessions 2048
#
# Pin the base by digest for bit-for-bit rebuilds:
#   docker build --build-arg PYTHON_IMAGE=python:3.11.7-slim-bookworm@sha256:<digest> ...
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
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels /wheels/*.whl \
 && useradd --create-home --uid 10001 turngym
USER turngym
WORKDIR /home/turngym
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD python -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status != 200)"
# SIGTERM -> uvicorn's graceful shutdown: open sessions are told, every env is closed.
STOPSIGNAL SIGTERM
ENTRYPOINT ["turngym", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["turngym/Math-v0"]
