#!/usr/bin/env bash
# Builds the minibroker image for this tree, once: tagged minibroker:<hash of what goes into
# it> and minibroker:latest; skipped when that tag exists. Prints the tag on its last line.
#   docker/build-images.sh            local base (docker/build-base.sh) + host wheelhouse, no index
#   BASE=python:3.11-slim docker/build-images.sh     a registry's base; pip installs from the index
# PIP: the pip that builds the wheelhouse (default .venv/bin/pip, else python3 -m pip).
set -euo pipefail
cd "$(dirname "$0")/.."

sources=(pyproject.toml README.md .dockerignore docker/Dockerfile docker/server.properties
         protocol quotas fetcher broker pipeline)
hash=$(find "${sources[@]}" -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 \
         | sort -z | xargs -0 sha1sum | sha1sum | cut -c1-12)
tag=minibroker:$hash
if docker image inspect "$tag" >/dev/null 2>&1; then
  docker tag "$tag" minibroker:latest
  echo "$tag"
  exit 0
fi

if [ -n "${BASE:-}" ]; then
  pip_args=""
else
  BASE=minibroker-base:bookworm
  docker/build-base.sh "$BASE" >&2
  # Wheels of every dependency, built on the host: the build installs them with --no-index
  # (HTTPS from inside a container may fail certificate checks where a proxy re-signs TLS).
  stamp=docker/wheelhouse/.stamp-$(sha1sum pyproject.toml | cut -c1-12)
  if [ ! -f "$stamp" ]; then
    pip=${PIP:-.venv/bin/pip}
    [ -x "$pip" ] || pip="python3 -m pip"
    rm -f docker/wheelhouse/*.whl docker/wheelhouse/.stamp-*
    echo "build-images: building the wheelhouse with $pip" >&2
    $pip wheel -q -w docker/wheelhouse . 'setuptools>=68' wheel >&2
    rm -f docker/wheelhouse/minibroker-*.whl  # the image builds the project's own wheel
    touch "$stamp"
  fi
  pip_args="--no-index"
fi

echo "build-images: building $tag on $BASE" >&2
docker build -q -f docker/Dockerfile --build-arg BASE="$BASE" --build-arg PIP_ARGS="$pip_args" \
  --label minibroker.tree="$hash" -t "$tag" -t minibroker:latest . >&2
# Earlier trees' images are not needed again (each is a few hundred MB): keep this one only.
docker images --format '{{.Repository}}:{{.Tag}}' minibroker | grep -v -x -e "$tag" -e minibroker:latest \
  | xargs -r docker rmi >/dev/null 2>&1 || true
docker image prune -f --filter label=minibroker.tree >/dev/null 2>&1 || true
echo "$tag"
