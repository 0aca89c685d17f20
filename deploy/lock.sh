#!/usr/bin/env bash
# Regenerates requirements.lock (the image's runtime dependencies) and requirements-build.lock
# (the build backend), hash-pinned, for the image's platform: Python 3.11 on Linux. Run it from
# the repository root after changing pyproject.toml's dependencies; tests/test_deploy.py fails
# until the lock covers them. Versions already installed in .venv (the ones the test suite ran
# against) are kept where pyproject.toml allows them, so the image runs what was tested.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=.venv/bin/uv
target=(--generate-hashes --python-version 3.11 --python-platform x86_64-unknown-linux-gnu)
tested=$(mktemp)
trap 'rm -f "$tested"' EXIT
.venv/bin/pip freeze --exclude-editable | grep -E '^[A-Za-z0-9][A-Za-z0-9._-]*==' >"$tested" || true
"$uv" pip compile pyproject.toml "${target[@]}" --constraint "$tested" --no-annotate \
  --custom-compile-command "deploy/lock.sh" --output-file requirements.lock
printf 'setuptools>=69\nwheel\n' |
  "$uv" pip compile - "${target[@]}" --no-annotate \
    --custom-compile-command "deploy/lock.sh  # pyproject.toml's [build-system] requires" \
    --output-file requirements-build.lock
