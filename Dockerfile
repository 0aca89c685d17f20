# syntax=docker/dockerfile:1
# The gateway's production image. Two stages: `build` installs the hash-locked dependencies and
# the package into a virtual environment; `runtime` copies only that environment and the
# patterns, and runs as an unprivileged user. Build from the repository root:
#   docker build -t genai-service:0.1.0 .
# Both stages use the same base so the copied environment's interpreter path stays valid.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv /opt/build-tools
WORKDIR /src
# Dependencies first, in their own layer: it is rebuilt only when the lock changes. Every
# distribution is pinned by hash (--require-hashes), so an image built later installs the same
# bytes; --no-deps because the lock already lists the whole tree.
COPY requirements.lock requirements-build.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock \
 && /opt/build-tools/bin/pip install --require-hashes --no-deps -r requirements-build.lock
COPY pyproject.toml README.md ./
COPY app ./app
# The package itself, built with the locked build backend (no unpinned download) and installed
# without resolving anything: its dependencies are the locked ones above.
RUN /opt/build-tools/bin/pip wheel --no-build-isolation --no-deps --wheel-dir /tmp/wheel . \
 && pip install --no-deps /tmp/wheel/*.whl \
 && pip check

FROM ${PYTHON_IMAGE} AS runtime
# Settings read by the service (see deploy/.env.example): patterns baked into the image, and the
# data directory (generated keys when none are configured, the audit spool, the first admin key)
# on a volume. Mount your own patterns over /srv/genai/patterns, or prepend a root:
# GENAI_PATTERN_DIR=/mine:/srv/... GENAI_LOG_JSON=true also marks the console as a log stream,
# even under `docker run -t`: the first admin key then goes to
# /var/lib/genai/keys/first-admin-key (0600), never to `docker logs` (docs/deployment.md).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GENAI_PATTERN_DIR=/srv/genai/patterns \
    GENAI_DATA_DIR=/var/lib/genai \
    GENAI_LOG_JSON=true
# A fixed numeric uid/gid, so Kubernetes' runAsNonRoot can verify it and volumes can be chowned.
RUN groupadd --system --gid 10001 genai \
 && useradd --system --uid 10001 --gid 10001 --home-dir /srv/genai --no-create-home genai \
 && mkdir -p /var/lib/genai \
 && chown 10001:10001 /var/lib/genai \
 && chmod 0700 /var/lib/genai
COPY --from=build /opt/venv /opt/venv
# Owned by root: the service reads its patterns, never writes them.
COPY patterns /srv/genai/patterns
WORKDIR /srv/genai
VOLUME ["/var/lib/genai"]
USER 10001:10001
EXPOSE 8000
# The slim image has no curl: urllib raises on a non-2xx answer, so a 503 from /readyz (store
# unreachable, schema behind, no provider, stuck audit backlog) marks the container unhealthy.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=4)"]
# `docker run IMAGE db upgrade` (or any other genai command) replaces the default `serve`.
ENTRYPOINT ["genai"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
