#!/usr/bin/env bash
# The test command: set up what the suite needs on this machine, start the CPU image's build (layer
# cache makes a rebuild fast), and run the whole test suite (unit, host integration, container): the
# tiers that need no image run while the image builds, and the container tests wait for it.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/test.sh [PYTEST ARGS...]

Sets up, where it can (root on Debian/Ubuntu): the Docker engine (scripts/ensure-docker.sh), Docker
Compose v2 for the SageMaker SDK's local mode (scripts/ensure-compose.sh), Open MPI from apt, a test
virtualenv (.venv-test, pinned by container/pins/python.txt and python-added.txt), and starts the CPU
image's build in the background (scripts/build.sh cpu --background build/test-logs/cpu-image.log);
then runs `python -m pytest tests -n WORKERS --dist loadgroup` (pytest-xdist) with any extra arguments.
The unit and host integration tests run first, while the image builds; the container tests wait for it.
Environment:
  SAGETRAIN_TEST_VENV      virtualenv to use (default: .venv-test in the repository)
  SAGETRAIN_SDK_VENVS      folder of the SageMaker SDKs' own virtualenvs, made by the tests (default: .venv-sdk)
  SAGETRAIN_CA_CERTS       extra CA bundle for image builds (default: /etc/ssl/certs/ca-certificates.crt if present)
  SAGETRAIN_SKIP_BUILD     set to 1 to reuse the existing sagemaker-tf-horovod:cpu image as is
  SAGETRAIN_CPU_BUILD_LOG  the log of a CPU build that a caller started (build.sh --background): the
                           tests wait for that one rather than start another
  SAGETRAIN_COLD_BUILD     set to 1 to build without Docker's layer cache (build.sh --no-cache), as on a
                           fresh machine: to measure a first run
  SAGETRAIN_TEST_WORKERS   pytest-xdist workers (default 3: most container tests wait on containers)
  SAGETRAIN_IMAGE_NAME     the image's name (default sagemaker-tf-horovod; see scripts/build.sh --help)
USAGE
}
case "${1:-}" in -h|--help) usage; exit 0 ;; esac

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
venv=${SAGETRAIN_TEST_VENV:-$repo/.venv-test}
ca_certs=${SAGETRAIN_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}

missing_debs=()
command -v mpirun >/dev/null 2>&1 || missing_debs+=(openmpi-bin libopenmpi-dev)
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing_debs+=(openssh-server openssh-client)
if [ ${#missing_debs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing ${missing_debs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_debs[@]}" >/dev/null
  else
    echo "test.sh: missing ${missing_debs[*]}; install them and retry" >&2
    exit 1
  fi
fi

scripts/ensure-docker.sh
# The build starts first and goes on while the rest is set up and the first tiers run.
if [ "${SAGETRAIN_SKIP_BUILD:-0}" = 1 ]; then
  unset SAGETRAIN_CPU_BUILD_LOG
elif [ -z "${SAGETRAIN_CPU_BUILD_LOG:-}" ]; then
  build_log=$repo/build/test-logs/cpu-image.log
  build_args=(cpu --background "$build_log")
  [ -f "$ca_certs" ] && build_args+=(--ca-certs "$ca_certs")
  [ "${SAGETRAIN_COLD_BUILD:-0}" = 1 ] && build_args+=(--no-cache)
  scripts/build.sh "${build_args[@]}"
  export SAGETRAIN_CPU_BUILD_LOG=$build_log
fi
scripts/ensure-compose.sh

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check -c container/pins/python.txt \
  -c container/pins/python-added.txt -r tests/requirements.txt ./container

# The slowest tests listed at the end: what a change to the suite's schedule should look at first.
exec "$venv/bin/python" -m pytest tests -n "${SAGETRAIN_TEST_WORKERS:-3}" --dist loadgroup --durations=40 "$@"
