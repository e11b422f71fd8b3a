#!/usr/bin/env bash
# Make debian:bookworm-slim available to the Docker engine when it is neither present nor pullable
# (machines with no container registry). Builds a minimal Debian root with debootstrap from Debian's
# package mirror and imports it under the same name, so the Dockerfile stays unchanged.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/bootstrap-base-image.sh [--image NAME] [--suite NAME] [--mirror URL]
                                      [--security-mirror URL] [--force]

Ensures the base image (default debian:bookworm-slim) exists locally:
  1. present already       -> nothing to do
  2. `docker pull` works   -> pulled
  3. otherwise             -> built with `debootstrap --variant=minbase SUITE` and imported, with the
                              apt sources of Debian's published image: SUITE and SUITE-updates from
                              the mirror, SUITE-security from the security mirror
Step 3 needs root and debootstrap (installed with apt-get when missing and possible).
  --image NAME            image to provide (default debian:bookworm-slim)
  --suite NAME            Debian release to build: bullseye, bookworm or trixie (default: the image
                          tag, e.g. bookworm of debian:bookworm-slim; any other tag needs --suite)
  --mirror URL            Debian mirror (default http://deb.debian.org/debian)
  --security-mirror URL   Debian security mirror (default http://deb.debian.org/debian-security)
  --force                 rebuild with debootstrap even if the image exists
USAGE
}

image=debian:bookworm-slim
suite=
mirror=http://deb.debian.org/debian
security_mirror=http://deb.debian.org/debian-security
force=false
while [ $# -gt 0 ]; do
  case "$1" in
    --image|--suite|--mirror|--security-mirror)
      if [ $# -lt 2 ]; then
        echo "bootstrap-base-image: $1 needs a value; see --help" >&2; exit 2
      fi
      case "$1" in
        --image) image=$2 ;;
        --suite) suite=$2 ;;
        --mirror) mirror=$2 ;;
        --security-mirror) security_mirror=$2 ;;
      esac
      shift 2 ;;
    --force) force=true; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bootstrap-base-image: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done
# The Debian releases this script builds; anything else is an error, not a guess.
check_suite() {  # SUITE WHERE-IT-CAME-FROM
  case "$1" in
    bullseye|bookworm|trixie) ;;
    *) echo "bootstrap-base-image: $2 is not a Debian release this script builds;" \
         "pass --suite bookworm (or bullseye, trixie)" >&2
       exit 2 ;;
  esac
}
[ -z "$suite" ] || check_suite "$suite" "--suite '$suite'"

if [ "$force" = false ] && docker image inspect "$image" >/dev/null 2>&1; then
  echo "base image $image: present"
  exit 0
fi
if [ "$force" = false ] && timeout 60 docker pull "$image" >/dev/null 2>&1; then
  echo "base image $image: pulled"
  exit 0
fi
# Building: the Debian release comes from --suite, else from the image's tag (debian:bookworm-slim ->
# bookworm); a tag that is no Debian release name (latest, 12) is an error, not a guess.
if [ -z "$suite" ]; then
  name=${image##*/}  # a registry host may carry a port: localhost:5000/debian:bookworm
  case "$name" in
    *:*) tag=${name##*:} ;;
    *) tag=latest ;;
  esac
  suite=${tag%-slim}
  check_suite "$suite" "the tag '$tag' of image $image"
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

rootfs=$(mktemp -d /tmp/base-rootfs.XXXXXX)
log_file=$rootfs.log
trap 'rm -rf "$rootfs" "$log_file"' EXIT
echo "base image $image: building with debootstrap ($suite from $mirror)"
debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$log_file" 2>&1 || {
  tail -20 "$log_file" >&2; exit 1; }
# Match the slim image: no apt lists or caches, and the same sources as the published image (debootstrap
# writes only "deb MIRROR SUITE main"; without -updates and -security, apt-get in the Dockerfile would
# install other package versions than on the published image).
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
rm -f "$rootfs"/etc/apt/sources.list
mkdir -p "$rootfs"/etc/apt/sources.list.d
cat >"$rootfs"/etc/apt/sources.list.d/debian.sources <<SOURCES
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security_mirror
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
if [ ! -f "$rootfs"/usr/share/keyrings/debian-archive-keyring.gpg ]; then
  echo "base image $image: the built root has no /usr/share/keyrings/debian-archive-keyring.gpg;" \
    "apt could not check the sources" >&2
  exit 1
fi
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' - "$image" >/dev/null
echo "base image $image: imported ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))"
