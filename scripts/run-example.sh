#!/usr/bin/env bash
# The main job: build the CPU image if needed, then train the bundled Keras example (scikit-learn's
# digits, as TFRecord channels) on a simulated 2-host SageMaker cluster with Horovod over MPI.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/run-example.sh [--hosts N] [--epochs E] [--output DIR]

Ensures a Docker engine (scripts/ensure-docker.sh), builds sagemaker-tf-horovod:cpu if it does not
exist (scripts/build.sh cpu), then runs examples/keras_digits on N simulated hosts (default 2) named
algo-1..N on an internal Docker network, through scripts/local-cluster, and prints where the trained
model is (default ./sagetrain-output/keras-digits). The job's hosts prove membership with a random
secret made for this run, given as a channel file (see the README's Security section).
Environment: SAGETRAIN_CA_CERTS  extra CA bundle for the image build
             (default: /etc/ssl/certs/ca-certificates.crt if present)
USAGE
}

hosts=2
epochs=5
output=
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --output) output=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run-example: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
image=sagemaker-tf-horovod:cpu
output=${output:-$repo/sagetrain-output/keras-digits}
ca_certs=${SAGETRAIN_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}

scripts/ensure-docker.sh
if ! docker image inspect "$image" >/dev/null 2>&1; then
  build_args=(cpu)
  [ -f "$ca_certs" ] && build_args+=(--ca-certs "$ca_certs")
  scripts/build.sh "${build_args[@]}"
fi

# The job's secret as the README recommends it: a random value in a file of its own channel, named by
# the hyperparameter sagetrain_job_secret_channel (on SageMaker, an S3 object the job's role can read).
secret_dir=$(mktemp -d)
trap 'rm -rf "$secret_dir"' EXIT
head -c 32 /dev/urandom | base64 >"$secret_dir/job-secret"

example=examples/keras_digits
scripts/local-cluster \
  --image "$image" \
  --hosts "$hosts" \
  --code "$example" \
  --program model.py \
  --channel "train=$example/data/train" \
  --channel "validation=$example/data/validation" \
  --channel "test=$example/data/test" \
  --channel "job-secret=$secret_dir" \
  --hp sagetrain_job_secret_channel=job-secret \
  --hp "epochs=$epochs" \
  --hp batch_size=64 \
  --hp seed=7 \
  --output "$output"
