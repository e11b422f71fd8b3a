#!/usr/bin/env bash
# Make sure a Docker engine answers. On a fresh Debian/Ubuntu machine where we are root, install
# Debian's docker.io and start dockerd in the background; elsewhere say what is missing.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/ensure-docker.sh [--wait SECONDS]

Exits 0 when `docker info` works. If it does not and this is a root shell on a Debian-like system,
installs docker.io (apt-get) when dockerd is missing, starts dockerd in the background (log:
/var/log/sagetrain-dockerd.log) and waits up to SECONDS (default 60) for it to answer.
USAGE
}

wait_seconds=60
while [ $# -gt 0 ]; do
  case "$1" in
    --wait) wait_seconds=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "ensure-docker: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done

if docker info >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "ensure-docker: no Docker engine answers and this is not root; start Docker (or join the docker group) and retry" >&2
  exit 1
fi
if ! command -v dockerd >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || {
    echo "ensure-docker: dockerd is missing and apt-get is not available; install Docker and retry" >&2; exit 1; }
  echo "ensure-docker: installing docker.io"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
if ! command -v docker >/dev/null 2>&1; then
  echo "ensure-docker: the docker client is missing; install docker.io or docker-ce-cli" >&2
  exit 1
fi
echo "ensure-docker: starting dockerd (log: /var/log/sagetrain-dockerd.log)"
nohup dockerd >/var/log/sagetrain-dockerd.log 2>&1 &
dockerd_pid=$!
deadline=$((SECONDS + wait_seconds))
# dockerd offers no readiness notification that works without systemd, so poll its API with a short
# interval, bounded by the deadline and abandoned at once if the daemon dies.
until docker info >/dev/null 2>&1; do
  if ! kill -0 "$dockerd_pid" 2>/dev/null; then
    echo "ensure-docker: dockerd exited during start-up; last lines of its log:" >&2
    tail -5 /var/log/sagetrain-dockerd.log >&2
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "ensure-docker: dockerd did not answer within ${wait_seconds}s; see /var/log/sagetrain-dockerd.log" >&2
    exit 1
  fi
  sleep 0.5
done
echo "ensure-docker: engine ready ($(docker version -f '{{.Server.Version}}'))"
