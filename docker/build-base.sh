#!/usr/bin/env bash
# Builds the local base image (a minimal Debian bookworm with Python 3.11) where no image
# registry is reachable, so `FROM python:3.11-slim` cannot be pulled. Debian's packages come
# from Debian's mirror over plain HTTP (apt verifies them with its keyring, not TLS).
# Skips the work when the image already exists. Needs root, debootstrap and a running dockerd.
#   docker/build-base.sh [IMAGE]        (default minibroker-base:bookworm)
set -euo pipefail
image=${1:-minibroker-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "build-base: $image exists"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "build-base: debootstrap is missing (apt-get install -y debootstrap)" >&2; exit 1; }

rootfs=$(mktemp -d /tmp/minibroker-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "build-base: debootstrap bookworm from $mirror into $rootfs"
# python3-venv: the image installs the project into a venv (bookworm's python is "externally
# managed"); the JRE and zookeeper are installed again by the Dockerfile, a no-op here, so the
# same Dockerfile works on python:3.x-slim.
debootstrap --variant=minbase \
  --include=python3,python3-venv,ca-certificates,default-jre-headless,zookeeper,iproute2 \
  bookworm "$rootfs" "$mirror" >/tmp/minibroker-debootstrap.log 2>&1 \
  || { tail -20 /tmp/minibroker-debootstrap.log >&2; exit 1; }
cat > "$rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
SOURCES
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
tar -C "$rootfs" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["bash"]' \
  - "$image" >/dev/null
echo "build-base: built $image"
