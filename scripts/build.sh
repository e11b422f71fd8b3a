#!/usr/bin/env bash
# Build one variant of the training image with BuildKit and tag it sagemaker-tf-horovod:<variant>
# plus a version tag (<tensorflow>-<variant>-py<python>), then print its size; or start that build in
# the background (--background), for a caller that has other work to do meanwhile.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/build.sh [cpu|gpu] [--ca-certs FILE] [--tag NAME:TAG] [--base-image IMAGE]
                      [--cache-from IMAGE] [--inline-cache] [--third-party DIR] [--no-cache]
                      [--background LOG [--after LOG]]
  cpu|gpu           variant to build (default gpu, as the Dockerfile)
  --ca-certs FILE   extra CA certificates (PEM) trusted while downloading (TLS-inspecting proxies);
                    passed as a BuildKit secret, so it stays out of every image layer (default: none)
  --tag NAME:TAG    an extra tag for the image (repeatable)
  --base-image IMG  base image (default debian:bookworm-slim); bootstrapped with debootstrap by
                    scripts/bootstrap-base-image.sh when neither present nor pullable
  --cache-from REF  an image whose layers may be reused (e.g. the registry's last <tf>-<device>)
  --inline-cache    write cache metadata into the image, so a pushed image can be --cache-from later
  --third-party DIR a folder with the source archives the GPU image compiles, for builds without
                    internet (default: $SAGETRAIN_THIRD_PARTY_DIR; without either, the GPU build clones
                    aws-ofi-nccl's pinned tag from GitHub). Its aws-ofi-nccl-<version>.tar.gz (version as
                    in container/pins/sources.txt) is copied to container/third-party/ and given to the
                    build; the build checks its sha256
  --no-cache        rebuild every layer (what a machine without Docker's layer cache does; downloads
                    may still come from BuildKit's pip cache)
  --background LOG  return at once and build in the background, the build's output going to LOG. LOG
                    stays locked (flock) while the build runs and ends with the line
                    `build.sh: exit CODE`: a waiter takes a shared lock on LOG, then reads that line
  --after LOG       (with --background) begin once the background build writing that LOG has ended,
                    whatever its outcome: two builds on a few cores finish one after the other sooner
                    than side by side
Environment: SAGETRAIN_IMAGE_NAME  the image's name (default sagemaker-tf-horovod), so that two work
                    trees can build and test side by side on one Docker engine
Needs BuildKit: `docker buildx` if installed, else a Docker client older than 23 with built-in
BuildKit (DOCKER_BUILDKIT=1, e.g. Debian's /usr/bin/docker). The legacy builder is refused: it
would build the GPU stages for a CPU image.
USAGE
}

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
variant=gpu
ca_certs=""
base_image=debian:bookworm-slim
extra_tags=()
cache_from=()
inline_cache=false
third_party=${SAGETRAIN_THIRD_PARTY_DIR:-}
no_cache=false
background_log=""
after_log=""
given_args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    cpu|gpu) variant=$1; shift ;;
    --ca-certs) ca_certs=$2; shift 2 ;;
    --tag) extra_tags+=("$2"); shift 2 ;;
    --base-image) base_image=$2; shift 2 ;;
    --cache-from) cache_from+=("$2"); shift 2 ;;
    --inline-cache) inline_cache=true; shift ;;
    --third-party) third_party=$2; shift 2 ;;
    --no-cache) no_cache=true; shift ;;
    --background) background_log=$2; shift 2 ;;
    --after) after_log=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build.sh: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done
if [ -n "$ca_certs" ] && [ ! -r "$ca_certs" ]; then
  echo "build.sh: --ca-certs $ca_certs is not a readable file" >&2
  exit 2
fi

if [ -n "$after_log" ] && [ -z "$background_log" ]; then
  echo "build.sh: --after needs --background" >&2
  exit 2
fi
if [ -n "$background_log" ]; then
  mkdir -p "$(dirname "$background_log")"
  # The lock is taken before this script returns, so a waiter that starts after it cannot find the log
  # unlocked before the build began. The background build inherits the descriptor, and with it the lock,
  # which the kernel releases when the build's last process ends, however it ends.
  exec {log_fd}>"$background_log"
  flock --exclusive "$log_fd"
  build_args=()  # the arguments given, less --background LOG and --after LOG
  for ((i = 0; i < ${#given_args[@]}; i++)); do
    case "${given_args[i]}" in
      --background|--after) i=$((i + 1)) ;;
      *) build_args+=("${given_args[i]}") ;;
    esac
  done
  (
    status=0
    if [ -n "$after_log" ]; then
      echo "build.sh: waiting (at most 90 minutes) for the build writing $after_log to end"
      flock --shared --wait 5400 "$after_log" true || status=$?
    fi
    if [ "$status" = 0 ]; then
      "$repo_root/scripts/build.sh" "${build_args[@]}" || status=$?
    fi
    echo "build.sh: exit $status"
  ) >&"$log_fd" 2>&1 </dev/null &
  echo "build.sh: building the $variant image in the background (process $!); output: $background_log"
  exit 0
fi

# The build command: buildx when present, else a classic client whose built-in BuildKit still works
# (Docker 23+ clients demand buildx for BuildKit).
client_major() { "$1" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1; }
build_cmd=()
if docker buildx version >/dev/null 2>&1; then
  build_cmd=(docker buildx build --load)
else
  for client in docker /usr/bin/docker /usr/local/bin/docker; do
    command -v "$client" >/dev/null 2>&1 || continue
    major=$(client_major "$client" || true)
    if [[ "$major" =~ ^[0-9]+$ ]] && [ "$major" -lt 23 ]; then
      build_cmd=(env DOCKER_BUILDKIT=1 "$client" build)
      break
    fi
  done
fi
if [ ${#build_cmd[@]} -eq 0 ]; then
  echo "build.sh: no BuildKit-capable Docker client found; install docker-buildx (Debian: apt-get install docker-buildx, or the buildx plugin) or a Docker client < 23" >&2
  exit 1
fi

if ! docker image inspect "$base_image" >/dev/null 2>&1; then
  "$repo_root/scripts/bootstrap-base-image.sh" --image "$base_image"
fi

pins=$repo_root/container/pins/python.txt
tf_version=$(sed -n 's/^tensorflow==\([^[:space:]#]*\).*/\1/p' "$pins")
py_version=$(awk '$1 == "runtime" && $2 == "python3" { split($3, v, "."); print v[1] v[2] }' \
  "$repo_root/container/pins/debian.txt")
[ -n "$tf_version" ] && [ -n "$py_version" ] || {
  echo "build.sh: cannot read the tensorflow pin from $pins or python3 from container/pins/debian.txt" >&2; exit 1; }

image=${SAGETRAIN_IMAGE_NAME:-sagemaker-tf-horovod}
tags=("$image:$variant" "$image:$tf_version-$variant-py$py_version" "${extra_tags[@]}")
args=(--network host --build-arg "DEVICE=$variant" --build-arg "BASE_IMAGE=$base_image")
for tag in "${tags[@]}"; do args+=(--tag "$tag"); done
for ref in "${cache_from[@]}"; do args+=(--cache-from "$ref"); done
# The classic BuildKit client and buildx both honour this build argument for inline cache.
if [ "$inline_cache" = true ]; then args+=(--build-arg BUILDKIT_INLINE_CACHE=1); fi
if [ "$no_cache" = true ]; then args+=(--no-cache); fi
if [ -n "$ca_certs" ]; then args+=(--secret "id=extra_ca_certs,src=$ca_certs"); fi
# aws-ofi-nccl's source archive, for a GPU build without internet: copied into the build context (a
# context holds only the Dockerfile, container/ and entrypoints/), then named to the Dockerfile.
if [ "$variant" = gpu ] && [ -n "$third_party" ]; then
  ofi_version=$(awk '$1 == "aws-ofi-nccl" { print $2 }' "$repo_root/container/pins/sources.txt")
  archive=aws-ofi-nccl-$ofi_version.tar.gz
  [ -f "$third_party/$archive" ] || {
    echo "build.sh: --third-party $third_party has no $archive (container/pins/sources.txt pins aws-ofi-nccl $ofi_version)" >&2
    exit 2; }
  cp "$third_party/$archive" "$repo_root/container/third-party/$archive"
  args+=(--build-arg "AWS_OFI_NCCL_ARCHIVE=$archive")
fi

echo "build.sh: ${build_cmd[*]} ${args[*]} $repo_root"
started=$SECONDS
"${build_cmd[@]}" "${args[@]}" "$repo_root"
size=$(docker image inspect -f '{{.Size}}' "$image:$variant")
printf 'build.sh: built %s in %ds, size %.2f GB (%s bytes)\n' "${tags[*]}" $((SECONDS - started)) \
  "$(awk -v s="$size" 'BEGIN { print s / 1e9 }')" "$size"
