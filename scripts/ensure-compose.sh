#!/usr/bin/env bash
# Make sure the Docker Compose that SageMaker SDK local mode runs is Compose v2. On a root Debian-like
# machine without it, fetch the pinned Debian package and install its one binary as a Docker CLI plugin.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/ensure-compose.sh [--check] [--mirror URL]

Which Compose SageMaker SDK local mode runs:
  SDK v3 (sagemaker-train)  `docker compose` when `docker compose version` says version 2 or later,
                            else `docker-compose`;
  SDK v2 (sagemaker)        `docker compose` only when that output contains "v2" (Docker's builds print
                            "v2.x.y", Debian's "2.x.y"), else the first `docker-compose` on PATH.
So this makes sure that `docker compose` is Compose v2 and, unless its version says "v2", that the first
`docker-compose` on PATH is Compose v2 too. A Compose v1 (`docker-compose` 1.x, such as Debian
bookworm's package) is left installed; it only must not come first on PATH.

Exits 0 when that holds. Otherwise, as root with apt-get: where `docker compose` is not Compose v2,
downloads the Debian package pinned in container/pins/test-tools.txt (apt with a private source list
and state, so this machine's apt setup is not touched; apt checks the package against the suite's
signed index) and installs its binary as /usr/local/lib/docker/cli-plugins/docker-compose; links
/usr/local/bin/docker-compose to the plugin where no file of that name is there (or only such a link).
If a Compose v1 still comes first on PATH, says which one and exits 1.
  --check        only check: exit 0 when Compose is as above, else say what is wrong and exit 1
  --mirror URL   Debian mirror (default: on Debian the first one of this machine's apt sources, else
                 https://deb.debian.org/debian)
USAGE
}

check_only=0
mirror=""
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check_only=1; shift ;;
    --mirror) mirror=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "ensure-compose: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done

plugin=/usr/local/lib/docker/cli-plugins/docker-compose
link=/usr/local/bin/docker-compose
no_plugin="'docker compose' (Compose v2) is missing"

# What an SDK would run that is not Compose v2, as one sentence; nothing when both SDKs run Compose v2.
compose_problem() {
  local plugin_version plugin_major standalone standalone_version standalone_major
  plugin_version=$(docker compose version 2>/dev/null || true)
  # SDK v3's test: the first "version [v]N" in the output, N >= 2.
  plugin_major=$(sed -nE 's/.*version[[:space:]]+v?([0-9]+).*/\1/p' <<<"$plugin_version" | head -1)
  if [ "${plugin_major:-0}" -lt 2 ]; then
    echo "$no_plugin"
    return
  fi
  case $plugin_version in *v2*) return ;; esac  # SDK v2's test
  standalone=$(command -v docker-compose || true)
  if [ -z "$standalone" ]; then
    echo "'docker compose version' does not say \"v2\" ($plugin_version), so SDK v2 local mode runs" \
         "'docker-compose', and there is none on PATH"
    return
  fi
  standalone_version=$("$standalone" version --short 2>/dev/null || true)
  standalone_major=$(sed -nE 's/^v?([0-9]+).*/\1/p' <<<"$standalone_version" | head -1)
  if [ "${standalone_major:-0}" -lt 2 ]; then
    echo "'docker compose version' does not say \"v2\" ($plugin_version), so SDK v2 local mode runs the" \
         "first 'docker-compose' on PATH, $standalone, which is Compose ${standalone_version:-of no known version}"
  fi
}

# The `docker-compose` plugin binary the Docker CLI runs: the first in its plugin folders.
plugin_binary() {
  local folder
  for folder in "${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins" /usr/local/lib/docker/cli-plugins \
                /usr/local/libexec/docker/cli-plugins /usr/lib/docker/cli-plugins /usr/libexec/docker/cli-plugins; do
    if [ -x "$folder/docker-compose" ]; then
      echo "$folder/docker-compose"
      return
    fi
  done
}

install_plugin() {
  local repo pin where package version suite_component suite component work
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
  # shellcheck disable=SC2064  # expand now: $work is local to this function
  trap "rm -rf '$work'" EXIT
  mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/deb" "$work/none"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite $component" \
    >"$work/apt/sources.list"
  local apt_options=(-qq -o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=$work/none"
                     -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
                     -o "APT::Sandbox::User=root")
  echo "ensure-compose: installing $package $version from Debian $suite/$component as $plugin"
  apt-get "${apt_options[@]}" update
  (cd "$work/deb" && apt-get "${apt_options[@]}" download "$package=$version")
  dpkg-deb -x "$work"/deb/*.deb "$work/root"
  install -D -m 0755 "$work/root/usr/libexec/docker/cli-plugins/docker-compose" "$plugin"
}

# /usr/local/bin/docker-compose -> the plugin, unless a file of that name is there that is not such a link.
link_standalone() {
  local target
  target=$(plugin_binary)
  [ -n "$target" ] || return 0
  if [ -e "$link" ] || [ -L "$link" ]; then
    [ -L "$link" ] && [[ $(readlink "$link") == */cli-plugins/docker-compose ]] || return 0
  fi
  [ "$(readlink "$link" 2>/dev/null || true)" = "$target" ] && return 0
  echo "ensure-compose: linking $link to $target"
  ln -sfn "$target" "$link"
}

problem=$(compose_problem)
[ -z "$problem" ] && exit 0
if [ "$check_only" = 1 ]; then
  echo "ensure-compose: $problem" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-compose: $problem; as root with apt-get, this script installs Compose v2 (or says what" \
       "else is in the way)" >&2
  exit 1
fi

# What to change by hand when Compose v2 is in place and an SDK would still not run it.
advice() {
  local standalone
  standalone=$(command -v docker-compose || true)
  if [ "$1" = "$no_plugin" ]; then
    echo "the Docker CLI does not run $plugin; 'docker info' lists the plugins it finds"
  elif [ -z "$standalone" ]; then
    echo "add $(dirname "$link") to PATH"
  elif [ "$standalone" = "$link" ]; then
    echo "$link is a file of yours, so it is left alone: replace it by a link to $(plugin_binary)"
  else
    echo "put $(dirname "$link") (its 'docker-compose' is Compose v2) before $(dirname "$standalone") in PATH"
  fi
}

[ "$problem" = "$no_plugin" ] && install_plugin
link_standalone
hash -r
problem=$(compose_problem)
if [ -n "$problem" ]; then
  echo "ensure-compose: $problem; $(advice "$problem"), and retry" >&2
  exit 1
fi
echo "ensure-compose: $(docker compose version); docker-compose on PATH: $(command -v docker-compose || echo none)"
