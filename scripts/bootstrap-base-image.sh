#!/usr/bin/env bash
# Make debian:bookworm-slim available to the Docker engine when it is neither present nor pullable
# (machines with no container registry). Builds a minimal Debian root with debootstrap from Debian's
# package mirror and imports it under the same name, so the Dockerfile stays unchanged.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/bootstrap-base-image.sh [--image NAME] [--mirror URL] [--force]

Ensures the base image (default debian:bookworm-slim) exists locally:
  1. present already       -> nothing to do
  2. `docker pull` works   -> pulled
  3. otherwise             -> built with `debootstrap --variant=minbase bookworm` and imported
Step 3 needs root and debootstrap (installed with apt-get when missing and possible).
  --image NAME   image to provide (default debian:bookworm-slim)
  --mirror URL   Debian mirror for debootstrap (default http://deb.debian.org/debian)
  --force        rebuild with debootstrap even if the image exists
USAGE
}

image=debian:bookworm-slim
mirror=http://deb.debian.org/debian
force=false
while [ $# -gt 0 ]; do
  case "$1" in
    --image) image=$2; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    --force) force=true; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bootstrap-base-image: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done

if [ "$force" = false ] && docker image inspect "$image" >/dev/null 2>&1; then
  echo "base image $image: present"
  exit 0
fi
if [ "$force" = false ] && timeout 60 docker pull "$image" >/dev/null 2>&1; then
  echo "base image $image: pulled"
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "base image $image: installing debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  else
    echo "base image $image is not available and debootstrap is missing; run: apt-get install -y debootstrap" >&2
    exit 1
  fi
fi

suite=${image#*:}
suite=${suite%-slim}
rootfs=$(mktemp -d /tmp/base-rootfs.XXXXXX)
log_file=$rootfs.log
trap 'rm -rf "$rootfs" "$log_file"' EXIT
echo "base image $image: building with debootstrap ($suite from $mirror)"
debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$log_file" 2>&1 || {
  tail -20 "$log_file" >&2; exit 1; }
# Match the slim image: no apt lists or caches, and the same sources as the published image.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' - "$image" >/dev/null
echo "base image $image: imported ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))"
