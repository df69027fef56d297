#!/usr/bin/env bash
# Builds the minibroker image for this tree, once: tagged minibroker:<hash of what goes into
# it> and minibroker:latest; skipped when that tag exists. Prints the tag on its last line.
#   docker/build-images.sh            local base (docker/build-base.sh) + host wheelhouse, no index
#   BASE=python:3.11-slim docker/build-images.sh     a registry's base; pip installs from the index
#   SPARK=1 docker/build-images.sh    also minibroker-spark:latest (docker/Dockerfile.spark: this image
#       plus pyspark and pyarrow, from the wheelhouse), for docker-compose.yml's `spark` profile
# PIP: the pip that builds the wheelhouse (default .venv/bin/pip, else python3 -m pip).
set -euo pipefail
cd "$(dirname "$0")/.."

sources=(pyproject.toml README.md .dockerignore docker/Dockerfile docker/server.properties
         docker/Dockerfile.spark protocol quotas fetcher broker pipeline)
hash=$(find "${sources[@]}" -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 \
         | sort -z | xargs -0 sha1sum | sha1sum | cut -c1-12)
tag=minibroker:$hash
spark=${SPARK:-}
spark_image() {
  # The Spark image on top of the broker image just built (or found); pyspark from the wheelhouse.
  [ -n "$spark" ] || return 0
  local spark_tag=minibroker-spark:$hash
  if ! docker image inspect "$spark_tag" >/dev/null 2>&1; then
    if [ "$pip_args" = "--no-index" ] && ! ls docker/wheelhouse/pyspark-*.whl >/dev/null 2>&1; then
      local pip=${PIP:-.venv/bin/pip}
      [ -x "$pip" ] || pip="python3 -m pip"
      echo "build-images: adding pyspark and pyarrow to the wheelhouse with $pip" >&2
      $pip wheel -q -w docker/wheelhouse 'pyspark>=4.0,<5' 'pyarrow>=15' >&2
    fi
    echo "build-images: building $spark_tag on $tag" >&2
    docker build -q -f docker/Dockerfile.spark --build-arg MINIBROKER_IMAGE="$tag" --build-arg PIP_ARGS="$pip_args" \
      --label minibroker.tree="$hash" -t "$spark_tag" . >&2
  fi
  docker tag "$spark_tag" minibroker-spark:latest
}

pip_args=""
[ -n "${BASE:-}" ] || pip_args="--no-index"
if docker image inspect "$tag" >/dev/null 2>&1; then
  docker tag "$tag" minibroker:latest
  spark_image
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
  # With SPARK=1 the wheelhouse also holds pyspark and pyarrow (the `spark` extra; ~400 MB).
  stamp=docker/wheelhouse/.stamp-$(sha1sum pyproject.toml | cut -c1-12)${spark:+-spark}
  if [ ! -f "$stamp" ]; then
    pip=${PIP:-.venv/bin/pip}
    [ -x "$pip" ] || pip="python3 -m pip"
    rm -f docker/wheelhouse/*.whl docker/wheelhouse/.stamp-*
    echo "build-images: building the wheelhouse with $pip" >&2
    project=.
    [ -z "$spark" ] || project='.[spark]'
    $pip wheel -q -w docker/wheelhouse "$project" 'setuptools>=68' wheel >&2
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
spark_image
echo "$tag"
