#!/usr/bin/env bash
# Make sure `docker compose` (Compose v2) works: SageMaker SDK local mode runs it. On a root Debian-like
# machine without it, fetch the pinned Debian package and install its one binary as a Docker CLI plugin.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/ensure-compose.sh [--mirror URL]

Exits 0 when a Compose v2 the SageMaker SDKs accept is there: `docker compose version` printing "v2",
or `docker-compose`. Otherwise, as root with apt-get, downloads the Debian package pinned in container/pins/test-tools.txt (apt with a private source
list and state, so this machine's apt setup is not touched; apt checks the package against the suite's
signed index), installs its binary as /usr/local/lib/docker/cli-plugins/docker-compose and links it as
/usr/local/bin/docker-compose: SDK v2 local mode runs `docker compose` only when its version says "v2",
which Debian's build does not print, and `docker-compose` otherwise.
  --mirror URL   Debian mirror (default: on Debian the first one of this machine's apt sources, else
                 https://deb.debian.org/debian)
USAGE
}

mirror=""
while [ $# -gt 0 ]; do
  case "$1" in
    --mirror) mirror=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "ensure-compose: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done

plugin=/usr/local/lib/docker/cli-plugins/docker-compose
if docker compose version 2>/dev/null | grep -q ' v2' || docker-compose version >/dev/null 2>&1; then
  exit 0
fi
if [ -x "$plugin" ] && [ "$(id -u)" = 0 ]; then
  ln -sf "$plugin" /usr/local/bin/docker-compose
  docker-compose version >/dev/null && exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-compose: 'docker compose' (Compose v2) is missing; install the Docker Compose plugin and retry" >&2
  exit 1
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
pin=$(grep -E '^debian:[^ ]+ +docker-compose +' "$repo/container/pins/test-tools.txt" || true)
[ -n "$pin" ] || { echo "ensure-compose: no docker-compose line in container/pins/test-tools.txt" >&2; exit 2; }
read -r where package version <<<"$pin"
suite_component=${where#debian:}
suite=${suite_component%/*}
component=${suite_component#*/}
if [ -z "$mirror" ]; then
  # deb822 sources (URIs: line) or one-line sources (deb [options] URI suite components).
  mirror=$( { awk '/^URIs:/ { print $2 }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
              awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' \
                /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } | head -1)
  grep -qx 'ID=debian' /etc/os-release 2>/dev/null && [ -n "$mirror" ] || mirror=https://deb.debian.org/debian
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/deb" "$work/none"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite $component" \
  >"$work/apt/sources.list"
apt_options=(-qq -o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=$work/none"
             -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
             -o "APT::Sandbox::User=root")
echo "ensure-compose: installing $package $version from Debian $suite/$component"
apt-get "${apt_options[@]}" update
(cd "$work/deb" && apt-get "${apt_options[@]}" download "$package=$version")
dpkg-deb -x "$work"/deb/*.deb "$work/root"
install -D -m 0755 "$work/root/usr/libexec/docker/cli-plugins/docker-compose" "$plugin"
ln -sf "$plugin" /usr/local/bin/docker-compose
echo "ensure-compose: $(docker compose version)"
