# The image of turngym's Docker sandbox backend (turngym.sandbox.DockerSandbox).
#   docker build -t turngym-sandbox:latest -f docker/sandbox.Dockerfile docker/
# Commands run as uid 65534 in a read-only container with tmpfs /work and /tmp, no network.
FROM python:3.11-slim
RUN pip install --no-cache-dir numpy \
 && mkdir -p /work && chown 65534:65534 /work
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONHASHSEED=0
WORKDIR /work
CMD ["sleep", "infinity"]
