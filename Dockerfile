# Production image: the package and its patterns, run as an unprivileged user.
FROM python:3.11-slim AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    GENAI_PATTERN_DIR=/srv/genai/patterns \
    GENAI_DATA_DIR=/var/lib/genai

WORKDIR /srv/genai
COPY pyproject.toml README.md ./
COPY app ./app
COPY patterns ./patterns
RUN pip install . \
 && useradd --system --uid 10001 --home-dir /srv/genai genai \
 && mkdir -p /var/lib/genai && chown genai /var/lib/genai

USER genai
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"
CMD ["genai", "serve", "--host", "0.0.0.0", "--port", "8000"]
