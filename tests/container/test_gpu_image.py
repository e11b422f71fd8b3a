"""The GPU image, when it has been built: `scripts/build.sh gpu`, which CI (.ci/run) starts in the
background before the suite (these tests then wait for it); scripts/test.sh alone skips these rather than
download ~5 GB of CUDA wheels. No GPU is needed: these check what was compiled in and that every library
resolves, EFA's NCCL plugin (aws-ofi-nccl) and libfabric's EFA provider included, and that what SageMaker
users import works. Horovod's library is also taken out of the image and read with cuobjdump (PyPI's
nvidia-cuda-cuobjdump, in tests/requirements.txt)."""

import importlib.metadata
import json
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest
from conftest import (
    IMAGE_NAME,
    REPO_ROOT,
    TEST_LABEL,
    background_build_log,
    run_in_image,
    wait_for_background_build,
)
from sagetrain.config.devices import NCCL_EFA_PLUGIN
from sagetrain.plan.efa import FI_PROVIDER_VAR, NCCL_NET_PLUGIN_VAR
from user_packages import AWS_CLI_SCRIPT, EXPECTED, USE_SCRIPT, report

GPU_IMAGE = os.environ.get("SAGETRAIN_TEST_GPU_IMAGE", f"{IMAGE_NAME}:gpu")
RUN_DEADLINE_S = 600
# Under pytest-xdist, one worker runs the module: its fixtures start their containers once.
pytestmark = pytest.mark.xdist_group("gpu-image")
# decimal GB, as `docker image inspect --format '{{.Size}}'` counts bytes
MAX_IMAGE_BYTES = 6_500_000_000
# V100, T4, A100, A10G (and L4, which runs sm_86 code), H100: the SageMaker GPU fleet.
FLEET_SASS = {70, 75, 80, 86, 90}

REPORT_SCRIPT = """
import json, pathlib, subprocess
import tensorflow as tf, keras, tf_keras, mpi4py, sagemaker_training, sagetrain
import horovod.tensorflow as hvd
hvd.init()
(mpi_lib,) = pathlib.Path(hvd.__file__).parent.glob("mpi_lib*.so")
ldd = subprocess.run(["ldd", str(mpi_lib)], capture_output=True, text=True, check=True).stdout
print(json.dumps({
    "cuda_built": tf.test.is_built_with_cuda(), "nccl_built": bool(hvd.nccl_built()),
    "mpi_built": hvd.mpi_built(), "gloo_built": hvd.gloo_built(), "size": hvd.size(),
    "nccl_line": next((line.strip() for line in ldd.splitlines() if "libnccl" in line), ""),
    # TensorFlow's own libraries are loaded by `import tensorflow` before Horovod's library.
    "unresolved": [line.strip() for line in ldd.splitlines()
                   if "not found" in line and not line.strip().startswith("libtensorflow_")],
}))
"""


@pytest.fixture(scope="module")
def gpu_image(docker_client) -> str:
    build_log = background_build_log("gpu")
    if build_log is not None:
        wait_for_background_build(build_log, "gpu")
    if docker_client.image_id(GPU_IMAGE) is None:
        if build_log is not None:
            pytest.fail(f"the background build ({build_log}) succeeded, yet {GPU_IMAGE} does not exist")
        pytest.skip(f"{GPU_IMAGE} is not built (scripts/build.sh gpu)")
    return GPU_IMAGE


def test_gpu_image_pip_check_is_clean(docker_client, gpu_image):
    result = run_in_image(docker_client, gpu_image, ["pip", "check"], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output


def test_gpu_image_has_cuda_tensorflow_and_horovod_with_nccl_mpi_gloo(docker_client, gpu_image):
    result = run_in_image(docker_client, gpu_image, ["python", "-c", REPORT_SCRIPT], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["cuda_built"] is True
    assert report["nccl_built"] is True
    assert report["mpi_built"] is True
    assert report["gloo_built"] is True
    assert report["size"] == 1
    assert report["unresolved"] == []
    # Found through the rpath build-horovod sets, so no LD_LIBRARY_PATH is needed.
    assert "/tensorflow/../../nvidia/nccl/lib/libnccl.so.2" in report["nccl_line"], report["nccl_line"]


def test_gpu_image_runtime_has_no_cuda_compiler_or_unused_libraries_but_keeps_ptxas(docker_client, gpu_image):
    script = (
        "command -v nvcc cicc cudafe++ fatbinary nvlink && exit 3; "
        'nvidia=$(python -c "import nvidia; print(list(nvidia.__path__)[0])"); '
        "test -x $nvidia/cuda_nvcc/bin/ptxas && test ! -e /opt/cuda-home && "
        # NCCL's device-code link inputs and libclang's library (no module imports clang) are gone.
        "test -z \"$(find $nvidia/nccl -name 'libnccl_device.*')\" && "
        "test -e $nvidia/nccl/lib/libnccl.so.2 && "
        "test ! -e $nvidia/../clang/native/libclang.so && "
        # slim-site-packages: libraries nothing names are gone, the ones TensorFlow loads are there.
        "test ! -e $nvidia/cusolver/lib/libcusolverMg.so.11 && "
        "test -e $nvidia/cusolver/lib/libcusolver.so.11 && "
        "test ! -e $nvidia/cuda_nvrtc/lib/libnvrtc.alt.so.12 && "
        "test -e $nvidia/cuda_nvrtc/lib/libnvrtc.so.12 && "
        "test ! -e $nvidia/curand/lib/libcurand.so.10 && test ! -e $nvidia/cufft/lib/libcufftw.so.11 && "
        "test -e $nvidia/cufft/lib/libcufft.so.11 && test ! -e $nvidia/cublas/lib/libnvblas.so.12 && "
        "test -e $nvidia/cublas/lib/libcublasLt.so.12 && test -z \"$(find $nvidia -name '*.a')\""
    )
    result = run_in_image(docker_client, gpu_image, ["bash", "-c", script], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output


def test_gpu_image_every_shared_library_resolves_its_dependencies(docker_client, gpu_image):
    """What the slimming removed is not a dependency of anything left: every shared object of TensorFlow,
    the CUDA wheels and Horovod finds what it links against. Two exceptions are expected: libcuda.so.1 is
    the NVIDIA driver, which the container runtime mounts on a GPU host, and Horovod's extension finds
    TensorFlow's libraries because `import tensorflow` has loaded them."""
    script = (
        "cd $(python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])') && "
        "find nvidia tensorflow horovod -type f -name '*.so*' | sort | while read -r library; do "
        'ldd "$library" | grep "not found" | sed "s|^|$library: |"; done; echo checked'
    )
    result = run_in_image(docker_client, gpu_image, ["bash", "-c", script], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.strip().splitlines()]
    assert lines and lines[-1] == "checked", result.output
    unresolved = [
        line
        for line in lines[:-1]
        if "libcuda.so.1 " not in line and not (line.startswith("horovod/") and "libtensorflow_" in line)
    ]
    assert unresolved == [], "\n".join(unresolved)


def test_gpu_image_is_at_most_6_5_gb(docker_client, gpu_image):
    size = int(docker_client.run(["image", "inspect", "--format", "{{.Size}}", gpu_image]))
    assert size <= MAX_IMAGE_BYTES, f"{gpu_image} is {size / 1e9:.2f} GB, over {MAX_IMAGE_BYTES / 1e9:.1f} GB"


def test_gpu_image_has_one_cuda_runtime_and_horovod_calls_it(docker_client, gpu_image):
    """No static CUDA runtime in Horovod's library: its CUDA calls (kernel launches, the registration of
    its kernels) bind, with every symbol bound at load (LD_BIND_NOW), to the CUDA runtime TensorFlow
    provides: libtensorflow_framework's entry points, which forward to the wheel's libcudart.so.12, or
    that library itself. It is the only CUDA runtime file in the image."""
    script = (
        "find / -xdev -type f -name 'libcudart*' | sort; "
        "LD_BIND_NOW=1 LD_DEBUG=bindings LD_DEBUG_OUTPUT=/tmp/bindings "
        "python -c 'import tensorflow, horovod.tensorflow' >/dev/null 2>&1 || exit 3; "
        "grep -h 'binding file .*/mpi_lib[^ ]* .* to .*symbol "
        ".\\(cudaLaunchKernel\\|__cudaRegisterFatBinary\\).$' /tmp/bindings.*"
    )
    result = run_in_image(docker_client, gpu_image, ["bash", "-c", script], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    runtimes = [line for line in lines if line.startswith("/")]
    assert len(runtimes) == 1 and runtimes[0].endswith("/nvidia/cuda_runtime/lib/libcudart.so.12"), runtimes
    bindings = [line for line in lines if "binding file" in line]
    assert len(bindings) == 2, result.output
    for binding in bindings:
        bound_to = binding.split(" to ", 1)[1]
        assert "/tensorflow/libtensorflow_framework.so.2" in bound_to.replace(
            "/python/platform/../..", ""
        ) or ("/nvidia/cuda_runtime/lib/libcudart.so.12" in bound_to), binding


def test_gpu_image_user_packages_work_offline_and_the_aws_cli_runs(docker_client, gpu_image):
    result = run_in_image(docker_client, gpu_image, ["python", "-c", USE_SCRIPT], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    assert {key: value for key, value in report(result.output).items() if key in EXPECTED} == EXPECTED
    result = run_in_image(docker_client, gpu_image, ["bash", "-c", AWS_CLI_SCRIPT], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0 and result.output.startswith("aws-cli/"), result.output


PLUGIN_SCRIPT = f"""
import ctypes, json, os, pathlib, subprocess
plugin = pathlib.Path("{NCCL_EFA_PLUGIN}")
ldd = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, check=True).stdout
library = ctypes.CDLL(str(plugin), mode=os.RTLD_NOW)  # every symbol it needs, bound now
net_apis = [f"ncclNetPlugin_v{{v}}" for v in range(2, 20) if hasattr(library, f"ncclNetPlugin_v{{v}}")]
import nvidia.cuda_runtime
cudart = pathlib.Path(list(nvidia.cuda_runtime.__path__)[0]) / "lib" / "libcudart.so.12"
print(json.dumps({{
    "unresolved": [line.strip() for line in ldd.splitlines() if "not found" in line],
    "links": sorted(line.split()[0] for line in ldd.splitlines() if "=>" in line),
    "net_apis": net_apis,
    "cudart_link": str((plugin.parent / "libcudart.so").resolve()), "cudart": str(cudart.resolve()),
    "origin_in_runpath": plugin.read_bytes().count(b"$ORIGIN"),
    "licenses": sorted(p.name for p in plugin.parents[1].glob("share/doc/aws-ofi-nccl/*")),
}}))
"""


def test_efa_nccl_plugin_loads_with_every_library_it_links(docker_client, gpu_image):
    """aws-ofi-nccl where the plan names it to NCCL: every library it links resolves (ldd) and loads with
    every symbol bound (RTLD_NOW), against libfabric and hwloc; it exports NCCL's net API; the CUDA
    runtime it opens at run time ("libcudart.so", through its RUNPATH $ORIGIN) is TensorFlow's one; its
    licence and notice ship with it."""
    result = run_in_image(docker_client, gpu_image, ["python", "-c", PLUGIN_SCRIPT], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    plugin = json.loads(result.output.strip().splitlines()[-1])
    assert plugin["unresolved"] == []
    assert {"libfabric.so.1", "libhwloc.so.15"} <= set(plugin["links"]), plugin["links"]
    assert plugin["net_apis"], "the plugin exports no ncclNetPlugin_v* symbol (what NCCL looks up)"
    assert plugin["cudart_link"] == plugin["cudart"]
    assert plugin["origin_in_runpath"] > 0
    assert plugin["licenses"] == ["LICENSE", "NOTICE"]


# NCCL's first call into a net plugin: init(logger) of its oldest API (ncclNetPlugin_v6: the plugin's name,
# then init). The logger is variadic in C; its first five arguments are read here, the format included.
PLUGIN_INIT_SCRIPT = f"""
import ctypes, json, os
library = ctypes.CDLL("{NCCL_EFA_PLUGIN}", mode=os.RTLD_NOW)
Logger = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p)
class NetV6(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("init", ctypes.CFUNCTYPE(ctypes.c_int, Logger))]
said = []
log = Logger(lambda level, flags, file, line, text: said.append(text.decode(errors="replace")))
net = NetV6.in_dll(library, "ncclNetPlugin_v6")
result = net.init(log)
print(json.dumps({{"name": net.name.decode(), "result": result, "said": said}}))
"""


def test_efa_nccl_plugin_initialises_as_far_as_a_host_without_gpu_allows(docker_client, gpu_image):
    """The plugin started as NCCL starts it, with the plan's FI_PROVIDER: it names itself Libfabric, finds
    libfabric and opens the CUDA runtime (through the link beside it), and stops where it needs the CUDA
    driver, which a host without a GPU does not have."""
    result = run_in_image(
        docker_client,
        gpu_image,
        ["python", "-c", PLUGIN_INIT_SCRIPT],
        timeout_s=RUN_DEADLINE_S,
        environment={FI_PROVIDER_VAR: "efa"},
    )
    assert result.exit_code == 0, result.output
    started = json.loads(result.output.strip().splitlines()[-1])
    assert started["name"] == "Libfabric"
    version = next(
        line.split()[1]
        for line in (REPO_ROOT / "container" / "pins" / "sources.txt").read_text().splitlines()
        if line.startswith("aws-ofi-nccl ")
    )
    assert started["said"][:2] == [
        f"NET/OFI Initializing aws-ofi-nccl {version}",
        "NET/OFI Using Libfabric version %u.%u",
    ]
    assert not [line for line in started["said"] if "Failed to find CUDA Runtime library" in line], started
    assert "NET/OFI Failed to resolve CUDA function %s (last error: %d, result: %d)" in started["said"], (
        started
    )
    assert started["result"] != 0  # no GPU: NCCL would go on without the plugin


def test_libfabric_carries_its_efa_provider_and_rdma_cores_efa_driver(docker_client, gpu_image):
    """Debian's libfabric 1.17 has the EFA provider compiled in (it links rdma-core's libefa, and its code
    is in the library: libfabric lists a provider only on a host with its device, so `fi_info -l` cannot
    show it here), and rdma-core's user-space EFA driver for libibverbs is installed; both resolve."""
    script = (
        "set -e; fabric=$(python -c 'import ctypes.util; print(ctypes.util.find_library(\"fabric\"))'); "
        'path=$(ldconfig -p | sed -n "s|.*$fabric.* => ||p" | head -1); '
        'ldd "$path" | grep -E "libefa.so.1 => /|libibverbs.so.1 => /"; '
        'grep -c -a efa_device_construct "$path"; '
        "ldd /usr/lib/x86_64-linux-gnu/libibverbs/libefa-rdmav34.so | grep -c 'not found' || true; "
        "fi_info --version | head -1"
    )
    result = run_in_image(docker_client, gpu_image, ["bash", "-c", script], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert any(line.strip().startswith("libefa.so.1 => /") for line in lines), result.output
    assert any(line.strip().startswith("libibverbs.so.1 => /") for line in lines), result.output
    assert lines[-3] != "0" and lines[-2] == "0", result.output  # EFA code in libfabric; driver resolves
    assert lines[-1].startswith("fi_info: 1.17.0"), result.output


PLAN_SCRIPT = """
import json, os, pathlib
from sagetrain.__main__ import plan_command
from sagetrain.config.devices import detect_devices
from sagetrain.config.job_files import JobFiles
root = pathlib.Path("/tmp/job")
JobFiles(("algo-1", "algo-2"), {"sagemaker_program": "train.py"}).write(root, "algo-1")
devices = detect_devices(os.environ)
plan = plan_command(root, gpus=8)
print(json.dumps({"plugin": devices.nccl_efa_plugin, "efa": list(devices.efa_devices),
                  "env": plan["launch"]["env"], "reasons": plan["reasons"]}))
"""


def test_without_efa_the_gpu_images_plan_sets_nothing_for_it(docker_client, gpu_image):
    """The GPU image's own detection, in a container without EFA: the plugin is found where the plan looks
    for it, no EFA device, and the planned job (2 hosts x 8 GPUs) gets no EFA setting."""
    result = run_in_image(docker_client, gpu_image, ["python", "-c", PLAN_SCRIPT], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output.strip().splitlines()[-1])
    assert (plan["plugin"], plan["efa"]) == (str(NCCL_EFA_PLUGIN), [])
    assert NCCL_NET_PLUGIN_VAR not in plan["env"] and FI_PROVIDER_VAR not in plan["env"]
    assert not [reason for reason in plan["reasons"] if "EFA" in reason]


@pytest.fixture(scope="module")
def horovod_library(docker_client, gpu_image, tmp_path_factory) -> Path:
    """Horovod's TensorFlow library, copied out of the image (the container is created, never started)."""
    site = (
        run_in_image(
            docker_client,
            gpu_image,
            ["python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            timeout_s=RUN_DEADLINE_S,
        )
        .output.strip()
        .splitlines()[-1]
    )
    name = f"sagetrain-test-{uuid.uuid4().hex[:12]}"
    folder = tmp_path_factory.mktemp("horovod")
    docker_client.run(["create", "--pull", "never", "--name", name, "--label", f"{TEST_LABEL}=1", gpu_image])
    try:
        docker_client.run(["cp", f"{name}:{site}/horovod/tensorflow", str(folder)])
    finally:
        docker_client.run(["rm", "--force", name])
    (library,) = (folder / "tensorflow").glob("mpi_lib*.so")
    return library


def cuobjdump(*arguments: str) -> str:
    try:
        files = importlib.metadata.files("nvidia-cuda-cuobjdump") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(
            "nvidia-cuda-cuobjdump is not installed: "
            "pip install -c container/pins/python.txt -c container/pins/python-added.txt "
            "-r tests/requirements.txt"
        )
    (binary,) = [f for f in files if f.name == "cuobjdump"]
    return subprocess.run(
        [str(binary.locate()), *arguments], capture_output=True, text=True, timeout=120, check=True
    ).stdout


def test_horovod_kernels_are_compiled_by_cuda_12_not_13(horovod_library):
    """CUDA 13 code needs NVIDIA driver >= 580, which SageMaker's GPU hosts do not have. The library says
    which nvcc compiled its kernels (build patch 0004, from nvcc's own version macros), and its PTX
    carries the ISA version that nvcc release emits (8.x for CUDA 12, 9.x for CUDA 13)."""
    releases = set(re.findall(rb"Cuda compilation tools, release (\d+)\.(\d+)", horovod_library.read_bytes()))
    assert releases, "no 'Cuda compilation tools' string in the library"
    assert {major for major, _ in releases} == {b"12"}, releases
    ptx_versions = set(re.findall(r"^\.version (\d+)\.(\d+)$", cuobjdump("-ptx", str(horovod_library)), re.M))
    assert ptx_versions, "no PTX in the library"
    assert {major for major, _ in ptx_versions} == {"8"}, ptx_versions


def test_horovod_kernels_run_on_the_fleet_and_newer_gpus(horovod_library):
    """SASS for every GPU of the fleet, and PTX for the newest, which the driver compiles for GPUs newer
    than all of them."""
    elf_listing = cuobjdump("--list-elf", str(horovod_library))
    ptx_listing = cuobjdump("--list-ptx", str(horovod_library))
    sass = {int(arch) for arch in re.findall(r"\.sm_(\d+)\.cubin", elf_listing)}
    ptx = {int(arch) for arch in re.findall(r"\.sm_(\d+)\.ptx", ptx_listing)}
    assert sass >= FLEET_SASS, f"SASS for sm_{sorted(sass)}, missing sm_{sorted(FLEET_SASS - sass)}"
    assert ptx and max(ptx) >= max(sass), f"PTX for sm_{sorted(ptx)}, SASS up to sm_{max(sass)}"
