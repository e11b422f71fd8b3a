#!/usr/bin/env bash
# Check that the GPU image works on this machine's NVIDIA GPUs, end to end, and say so in one verdict
# line. On a machine without a GPU it says that in one line and exits 0: there is nothing to check.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/gpu-check.sh [--image IMAGE] [--epochs N] [--instance-type TYPE]

On a machine with NVIDIA GPUs, the NVIDIA driver and the NVIDIA container toolkit, checks in order
(stopping at the first failure):
  1. the driver version against the oldest that runs CUDA 12 code (what the image's TensorFlow and
     Horovod kernels are built with; the number comes from the image)
  2. TensorFlow in `docker run --gpus all IMAGE` sees every GPU nvidia-smi lists
  3. Horovod's NCCL allreduce, op=Sum and op=Average (single and grouped tensors, float32 and
     float16), with `mpirun -np <GPUs>` inside `docker run --gpus all`, gives the exact values
  4. NCCL's network (2 GPUs or more): with the EFA devices of this host given to the container and the
     settings the image's plan makes for them, which network NCCL uses (Libfabric: the image's
     aws-ofi-nccl plugin, over EFA; Socket: TCP) and an all-reduce's bus bandwidth (256 MiB float32,
     nccl-tests' definition: 2(n-1)/n x size / time); on an EFA host also with NCCL's shared-memory and
     peer-to-peer paths off, so the bandwidth is EFA's. An EFA host where NCCL does not use the plugin fails
  5. the managed trainer trains examples/keras_digits on all GPUs (scripts/local-cluster --gpus all)
  6. a synthetic images/s figure: benchmarks/payload/synthetic.py, one Horovod rank per GPU
and ends with one line: "gpu-check: PASS ..." (exit 0) or "gpu-check: FAIL ..." (exit 1), which
names the log folder of the step that failed.
Without nvidia-smi, or when it lists no GPU: one line saying so, exit 0.
  --image IMAGE          image to check (default sagemaker-tf-horovod:gpu; build it: scripts/build.sh gpu)
  --epochs N             epochs of the example's training (default 2)
  --instance-type TYPE   this host's instance type (e.g. p4d.24xlarge): whether its EFA does RDMA read
                         decides FI_EFA_USE_DEVICE_RDMA, as on SageMaker (default: not known, so not set)
  --nccl-summary LOG     print what a step 4 log says, as "network=… plugin=… provider=… busbw=…", and exit
USAGE
}

# What a step 4 log says (NCCL's INFO lines and the all-reduce's BUSBW line), on one line. The lines
# read: NCCL's "Using network <name>" (the network its communicators use), aws-ofi-nccl's
# "NET/OFI Initializing aws-ofi-nccl <version>" and "NET/OFI Selected provider is <p>, … (found <n> nics)".
nccl_summary() {
  local log=$1 network plugin provider busbw
  network=$(sed -n 's/.*NCCL INFO Using network \([^[:space:]][^[:space:]]*\).*/\1/p' "$log" | head -1)
  plugin=$(sed -n 's/.*NET\/OFI Initializing aws-ofi-nccl \([^[:space:]]*\).*/aws-ofi-nccl-\1/p' "$log" | head -1)
  provider=$(sed -n 's/.*NET\/OFI Selected provider is \([^,]*\),.*(found \([0-9]*\) nics).*/\1:\2/p' "$log" |
    head -1)
  busbw=$(sed -n 's/.*BUSBW .*busbw_gbps=\([0-9.]*\).*/\1/p' "$log" | head -1)
  echo "network=${network:-unknown} plugin=${plugin:-none} provider=${provider:-none} busbw=${busbw:-none}"
}

image=sagemaker-tf-horovod:gpu
epochs=2
instance_type=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nccl-summary)
      [ $# -ge 2 ] && [ -r "$2" ] || { echo "gpu-check: --nccl-summary needs a readable log file" >&2; exit 2; }
      nccl_summary "$2"
      exit 0 ;;
    --image|--epochs|--instance-type)
      [ $# -ge 2 ] || { echo "gpu-check: $1 needs a value; see --help" >&2; exit 2; }
      case "$1" in --image) image=$2 ;; --epochs) epochs=$2 ;; --instance-type) instance_type=$2 ;; esac
      shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done
[[ "$epochs" =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: --epochs must be a positive integer, got '$epochs'" >&2; exit 2; }

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU on this machine (no nvidia-smi): nothing checked"
  exit 0
fi
gpus=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU ' || true)
if [ "$gpus" -eq 0 ]; then
  echo "gpu-check: no NVIDIA GPU on this machine (nvidia-smi lists none): nothing checked"
  exit 0
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
logs=$(mktemp -d /tmp/gpu-check.XXXXXX)
passed=()

fail() {
  echo "gpu-check: FAIL: $1 (logs: $logs)"
  exit 1
}

# Runs a step's command with its output in $logs/<step>.log; the step fails with the log's last lines.
run_step() {
  local step=$1
  shift
  if ! "$@" >"$logs/$step.log" 2>&1; then
    tail -20 "$logs/$step.log" >&2
    return 1
  fi
}

docker image inspect "$image" >/dev/null 2>&1 || fail "image $image is not on this machine; build it with scripts/build.sh gpu"

# 1. Driver. The minimum is the image's own (sagetrain.config.devices), so the check and the warning
# the image logs at start agree.
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 | tr -d '[:space:]')
run_step minimum docker run --rm "$image" python -c \
  'from sagetrain.config.devices import CUDA_12_MIN_DRIVER as v; print(".".join(map(str, v)))' ||
  fail "could not read the driver minimum from $image"
minimum=$(tail -1 "$logs/minimum.log")
echo "gpu-check: NVIDIA driver $driver, $gpus GPU(s); CUDA 12 code needs driver >= $minimum"
if [ "$(printf '%s\n%s\n' "$minimum" "$driver" | sort -V | head -1)" != "$minimum" ]; then
  fail "driver $driver is older than $minimum: TensorFlow and Horovod cannot use the GPUs; update the driver"
fi
passed+=("driver $driver >= $minimum")

# 2. TensorFlow sees every GPU.
run_step tensorflow docker run --rm --gpus all "$image" python -c \
  'import tensorflow as tf; print("GPUS", len(tf.config.list_physical_devices("GPU")))' ||
  fail "docker run --gpus all $image failed (is the NVIDIA container toolkit installed?)"
seen=$(sed -n 's/^GPUS \([0-9]*\)$/\1/p' "$logs/tensorflow.log")
[ "${seen:-0}" -eq "$gpus" ] || fail "TensorFlow sees ${seen:-0} of the $gpus GPUs nvidia-smi lists"
echo "gpu-check: TensorFlow sees $seen/$gpus GPUs"
passed+=("TensorFlow sees $seen/$gpus GPUs")

# 3. Horovod over NCCL, one rank per GPU. op=Average runs Horovod's own CUDA kernels (scaling, and the
# batched copies of a grouped allreduce), compiled into the image rather than taken from a library.
allreduce_check=$(cat <<'PYTHON'
import tensorflow as tf

gpus = tf.config.list_physical_devices("GPU")
import horovod.tensorflow as hvd  # noqa: E402

hvd.init()
tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
n, mine = hvd.size(), hvd.rank() + 1
failures = []
for dtype in (tf.float32, tf.float16):
    with tf.device("/GPU:0"):
        x = tf.fill([1 << 20], tf.constant(mine, dtype))
        results = {
            "sum": (hvd.allreduce(x, op=hvd.Sum, name=f"sum_{dtype.name}"), n * (n + 1) / 2),
            "average": (hvd.allreduce(x, op=hvd.Average, name=f"average_{dtype.name}"), (n + 1) / 2),
        }
        grouped = hvd.grouped_allreduce([x, 2 * x, 3 * x], op=hvd.Average, name=f"grouped_{dtype.name}")
    results.update({f"grouped[{i}]": (t, (i + 1) * (n + 1) / 2) for i, t in enumerate(grouped)})
    for what, (tensor, expected) in results.items():
        wrong = int(tf.reduce_sum(tf.cast(tf.not_equal(tensor, tf.constant(expected, dtype)), tf.int32)))
        if wrong or "GPU" not in tensor.device:
            failures.append(f"{dtype.name} {what}: {wrong} wrong values, on {tensor.device}")
print(f"ALLREDUCE rank={hvd.rank()} size={n} nccl={bool(hvd.nccl_built())} failures={failures}", flush=True)
PYTHON
)
run_step horovod docker run --rm --gpus all --shm-size 1g "$image" \
  mpirun -np "$gpus" --bind-to none --oversubscribe python -c "$allreduce_check" ||
  fail "Horovod allreduce on $gpus GPUs did not run"
good=$(grep -c '^ALLREDUCE .* nccl=True failures=\[\]$' "$logs/horovod.log" || true)
[ "$good" -eq "$gpus" ] || fail "Horovod NCCL allreduce: $good of $gpus ranks got exact Sum/Average values"
echo "gpu-check: Horovod NCCL allreduce Sum/Average exact on $gpus rank(s)"
passed+=("Horovod NCCL Sum/Average exact on $gpus GPUs")

# 4. NCCL's network and an all-reduce's bus bandwidth. The container gets this host's EFA devices, as
# SageMaker gives them, and the settings the image's own plan makes on such a host (sagetrain/plan/efa.py),
# printed first; mpirun passes them to every rank.
busbw_check=$(cat <<'PYTHON'
import statistics, time
import tensorflow as tf

gpus = tf.config.list_physical_devices("GPU")
import horovod.tensorflow as hvd  # noqa: E402

hvd.init()
tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
n, elements = hvd.size(), 64 << 20  # 256 MiB of float32
with tf.device("/GPU:0"):
    x = tf.ones([elements], tf.float32)
    for _ in range(3):  # warm-up: NCCL's communicator and connections
        hvd.allreduce(x, op=hvd.Sum, name="warmup")[0].numpy()
    seconds = []
    for _ in range(10):
        began = time.perf_counter()
        total = hvd.allreduce(x, op=hvd.Sum, name="busbw")
        first = float(total[0].numpy())  # a 4-byte copy: waits for the all-reduce, moves nothing more
        seconds.append(time.perf_counter() - began)
median = statistics.median(seconds)
algbw = 4 * elements / median / 1e9
if hvd.rank() == 0:
    print(f"BUSBW ranks={n} bytes={4 * elements} seconds={median:.4f} sum_ok={first == n} "
          f"algbw_gbps={algbw:.2f} busbw_gbps={algbw * 2 * (n - 1) / n:.2f}", flush=True)
PYTHON
)
efa_decision=$(cat <<'PYTHON'
import os, sys
from sagetrain.config.devices import detect_devices
from sagetrain.plan.efa import efa_settings

devices = detect_devices(os.environ)
decided = efa_settings(devices.efa_devices, devices.gpus, sys.argv[1], devices.nccl_efa_plugin)
print("# " + (decided.reason or "no EFA device in this container: NCCL keeps its own transports"))
for name, value in decided.env:
    print(f"{name}={value}")
PYTHON
)
# In the container: the plan's EFA settings into the environment, then one rank per GPU (twice on EFA).
nccl_runner=$(cat <<'BASH'
set -euo pipefail
python -c "$EFA_DECISION" "$INSTANCE_TYPE" >/tmp/efa.env
sed 's/^/[efa] /' /tmp/efa.env
forward=(-x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET)
while IFS='=' read -r name value; do
  [ -n "$name" ] && [ "${name:0:1}" != "#" ] || continue
  export "$name=$value"
  forward+=(-x "$name")
done </tmp/efa.env
mpirun -np "$GPUS" --bind-to none --oversubscribe "${forward[@]}" python -c "$BUSBW_CHECK" 2>&1 |
  sed 's/^/[default] /'
if grep -qE '^[A-Z_]+=' /tmp/efa.env; then  # the plan set something for EFA
  mpirun -np "$GPUS" --bind-to none --oversubscribe "${forward[@]}" -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 \
    python -c "$BUSBW_CHECK" 2>&1 | sed 's/^/[network] /'
fi
BASH
)
if [ "$gpus" -lt 2 ]; then
  echo "gpu-check: one GPU: no NCCL all-reduce between GPUs to measure"
else
  efa_args=()
  for uverbs in /dev/infiniband/uverbs*; do
    [ -e "$uverbs" ] && efa_args+=(--device "$uverbs")
  done
  # EFA registers (pins) communication buffers: without a memlock limit it cannot.
  [ ${#efa_args[@]} -gt 0 ] && efa_args+=(--ulimit memlock=-1:-1)
  run_step nccl docker run --rm --gpus all --shm-size 1g "${efa_args[@]}" \
    -e GPUS="$gpus" -e INSTANCE_TYPE="$instance_type" -e EFA_DECISION="$efa_decision" \
    -e BUSBW_CHECK="$busbw_check" "$image" bash -c "$nccl_runner" ||
    fail "the NCCL all-reduce on $gpus GPUs did not run"
  sed -n 's/^\[efa\] # /gpu-check: EFA: /p' "$logs/nccl.log" | head -1
  grep '^\[default\] ' "$logs/nccl.log" | sed 's/^\[default\] //' >"$logs/nccl-default.log"
  read -r network plugin provider busbw < <(nccl_summary "$logs/nccl-default.log")
  grep -q 'sum_ok=True' "$logs/nccl-default.log" || fail "the NCCL all-reduce's sum is wrong"
  echo "gpu-check: NCCL ${network/=/: }, ${plugin/=/ }, ${provider/=/ }; all-reduce of 256 MiB on $gpus GPUs: bus bandwidth ${busbw#busbw=} GB/s"
  summary="NCCL ${network#network=}, bus bandwidth ${busbw#busbw=} GB/s"
  if grep -q '^\[efa\] [A-Z]' "$logs/nccl.log"; then  # the plan set something for EFA
    [ "$network" = network=Libfabric ] ||
      fail "this host's container has EFA devices but NCCL used ${network#network=}, not aws-ofi-nccl (Libfabric)"
    grep '^\[network\] ' "$logs/nccl.log" | sed 's/^\[network\] //' >"$logs/nccl-network.log"
    read -r _ _ _ efa_busbw < <(nccl_summary "$logs/nccl-network.log")
    echo "gpu-check: the same through EFA only (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1): bus bandwidth ${efa_busbw#busbw=} GB/s"
    summary+=", through EFA ${efa_busbw#busbw=} GB/s"
  fi
  passed+=("$summary")
fi

# 5. The managed trainer on the bundled example, as scripts/run-example.sh runs it, on this host's GPUs.
example=$repo/examples/keras_digits
run_step example "$repo/scripts/local-cluster" --image "$image" --hosts 1 --gpus all \
  --code "$example" --program model.py \
  --channel "train=$example/data/train" --channel "validation=$example/data/validation" \
  --channel "test=$example/data/test" \
  --hp "epochs=$epochs" --hp batch_size=64 --hp seed=7 --output "$logs/keras-digits" ||
  fail "the managed trainer did not train examples/keras_digits"
echo "gpu-check: the managed trainer trained examples/keras_digits ($(grep -m1 -o 'engine=[a-z_]*' "$logs/example.log" || echo 'engine=?'))"
passed+=("examples/keras_digits trained")

# 6. Synthetic throughput, one Horovod rank per GPU.
run_step synthetic "$repo/scripts/local-cluster" --image "$image" --hosts 1 --gpus all \
  --code "$repo/benchmarks/payload" --program synthetic.py \
  --hp sagemaker_mpi_enabled=true --hp "sagemaker_mpi_num_of_processes_per_host=$gpus" \
  --hp batch_size=64 --hp warmup_batches=20 --hp batches_per_iter=50 --hp iterations=5 \
  --output "$logs/synthetic" ||
  fail "the synthetic benchmark did not run"
rates=$(grep -o 'BENCH synthetic rank=[0-9]* size=[0-9]* img_per_sec=[0-9.]*' "$logs/synthetic.log" |
  sed 's/.*img_per_sec=//')
[ "$(echo "$rates" | grep -c .)" -eq "$gpus" ] || fail "the synthetic benchmark reported no rate for some ranks"
total=$(echo "$rates" | awk '{ sum += $1 } END { printf "%.0f", sum }')
echo "gpu-check: synthetic benchmark (small CNN, 32x32 images, batch 64 per GPU): $total images/s on $gpus GPU(s)"
passed+=("synthetic $total images/s")

rm -rf "$logs"
echo "gpu-check: PASS: $(IFS=';'; echo "${passed[*]}" | sed 's/;/; /g')"
