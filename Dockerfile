# The router's container image: `router daemon` (the container side of the
# container protocol) as its entry point. docs/containers.md, "The image".
#
#   docker build -t router .                                   # on the public Python image
#   docker build --build-arg BASE=router-base:bookworm -t router .   # on a local base (no registry)
#   docker run --rm -e CF_HARNESS_TOKEN=... -e CF_HARNESS_RUNTIME_ID=r1 \
#     -p 127.0.0.1:8080:8080 router --adapter echo
#
# BASE must hold Python 3.11 or later with pip, installing into its own
# interpreter (the public images do; the local base has PEP 668's marker
# removed). Builds with BuildKit and with the legacy builder alike.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# Dependencies first, in a layer of their own: only pyproject.toml goes in,
# with empty packages standing in for the code, so a change to the code
# reuses this layer and rebuilds in seconds without the package index. The
# build backend is installed too, so the code's install below needs no
# network (--no-build-isolation).
COPY pyproject.toml README.md /tmp/src/
RUN cd /tmp/src \
 && mkdir -p router wire \
 && touch router/__init__.py wire/__init__.py \
 && pip install "setuptools>=68" . \
 && pip uninstall -y router \
 && cd / && rm -rf /tmp/src

# The code, installed as a regular (not editable) package.
# (Copied to /tmp/src and removed in the same step: no WORKDIR, which the
# legacy builder would leave behind as an empty directory.)
COPY pyproject.toml README.md /tmp/src/
COPY wire /tmp/src/wire
COPY router /tmp/src/router
RUN cd /tmp/src \
 && pip install --no-deps --no-build-isolation . \
 && cd / && rm -rf /tmp/src \
 && router daemon --help >/dev/null \
 && mkdir -p /workspace/home

# The daemon reads CF_HARNESS_TOKEN and CF_HARNESS_RUNTIME_ID (set by whoever
# starts the container) and listens on CF_HARNESS_PORT. The session's
# workspace volume is mounted at /workspace; HOME lives in it, so an agent's
# own state (Claude Code's ~/.claude) survives a replacement container (a
# fresh volume starts as a copy of the image's /workspace, HOME included).
ENV CF_HARNESS_PORT=8080 \
    HOME=/workspace/home
WORKDIR /workspace
EXPOSE 8080
# Every interface inside the container: the port is published on the
# host's loopback only (the docker launcher's -p 127.0.0.1::8080).
ENTRYPOINT ["router", "daemon", "--host", "0.0.0.0"]
CMD ["--adapter", "echo"]
