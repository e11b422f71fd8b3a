"""What the built image contains: pinned packages that import and agree (`pip check`), what SageMaker users
import beyond TensorFlow (working offline) and the AWS CLI, Horovod's controllers, the ENTRYPOINT/ENV
contract of docs/contracts.md, the members-only library and the parameter server's user, no compilers,
no NCCL plugin, a size within its budget, and no secrets or private keys in any layer."""

import json
import re
import tarfile
from collections.abc import Iterator

import pytest
from conftest import REPO_ROOT, run_in_image
from sagetrain.config.devices import NCCL_EFA_PLUGIN
from sagetrain.contracts import MEMBERS_FILTER_LIBRARY
from sagetrain.deadline import Deadline
from sagetrain.launch.ps_server import PS_USER
from user_packages import AWS_CLI_SCRIPT, EXPECTED, USE_SCRIPT, report

PINS = [REPO_ROOT / "container" / "pins" / name for name in ("python.txt", "python-added.txt")]
RUN_DEADLINE_S = 300
# Under pytest-xdist, one worker runs the module: its fixtures start their containers once.
pytestmark = pytest.mark.xdist_group("image-contents")
# decimal GB, as `docker image inspect --format '{{.Size}}'` counts bytes
MAX_IMAGE_BYTES = 2_200_000_000

REPORT_SCRIPT = """
import json, importlib.metadata as md
import tensorflow as tf, keras, tf_keras, mpi4py, sagemaker_training, sagetrain, tensorboard
import horovod, horovod.tensorflow as hvd
print(json.dumps({
    "versions": {name: md.version(name) for name in
                 ["tensorflow", "tensorflow-cpu", "tf-keras", "keras", "horovod", "mpi4py",
                  "sagemaker-training", "paramiko", "tensorboard"]},
    "tf_version": tf.__version__, "keras_version": keras.__version__, "horovod_version": horovod.__version__,
    "mpi_built": hvd.mpi_built(), "gloo_built": hvd.gloo_built(), "nccl_built": bool(hvd.nccl_built()),
    "cuda_built": tf.test.is_built_with_cuda(),
}))
"""


def pinned_versions() -> dict[str, str]:
    pins = {}
    for path in PINS:
        for line in path.read_text().splitlines():
            match = re.fullmatch(r"\s*([A-Za-z0-9._-]+)\s*==\s*([^\s#]+).*", line)
            if match:
                pins[match.group(1).lower()] = match.group(2)
    return pins


@pytest.fixture(scope="module")
def image_report(docker_client, cpu_image) -> dict:
    result = run_in_image(docker_client, cpu_image, ["python", "-c", REPORT_SCRIPT], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def test_pip_check_is_clean(docker_client, cpu_image):
    result = run_in_image(docker_client, cpu_image, ["pip", "check"], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    assert "No broken requirements found" in result.output


def test_installed_versions_are_the_pinned_ones(image_report):
    pins = pinned_versions()
    for name, version in image_report["versions"].items():
        assert version == pins[name], f"{name} is {version} in the image, {pins[name]} in container/pins"
    assert image_report["tf_version"] == pins["tensorflow"]
    assert image_report["keras_version"] == pins["keras"]
    assert image_report["horovod_version"] == pins["horovod"]


def test_horovod_has_mpi_and_gloo_controllers_and_no_nccl_on_cpu(image_report):
    assert image_report["mpi_built"] is True
    assert image_report["gloo_built"] is True
    assert image_report["nccl_built"] is False
    assert image_report["cuda_built"] is False


@pytest.fixture(scope="module")
def use_report(docker_client, cpu_image) -> dict:
    result = run_in_image(docker_client, cpu_image, ["python", "-c", USE_SCRIPT], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    return report(result.output)


def test_what_sagemaker_users_import_works_offline(use_report):
    """pandas, scikit-learn, OpenCV, TensorFlow Datasets, TensorFlow Text (its ops load on the image's
    TensorFlow: it tokenizes) and PyYAML, each doing real work in a container with no network."""
    assert {key: use_report[key] for key in EXPECTED} == EXPECTED


def test_what_sagemaker_users_import_is_the_pinned_versions(use_report):
    pins = pinned_versions()
    assert use_report["versions"] == {name: pins[name.lower()] for name in use_report["versions"]}


def test_the_aws_cli_runs(docker_client, cpu_image):
    result = run_in_image(docker_client, cpu_image, ["bash", "-c", AWS_CLI_SCRIPT], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"aws-cli/{pinned_versions()['awscli']} "), result.output
    assert json.loads(result.output.split("\n", 1)[1]).keys() >= {"MaxBuckets", "Prefix"}


def test_added_packages_carry_no_test_suites_and_tensorflow_io_is_left_out(docker_client, cpu_image):
    """container/build-steps/trim_added_packages.py ran; tensorflow-io 0.37.1, the last on PyPI, cannot
    load its ops on TensorFlow 2.21, so the image does not carry it (README says so)."""
    script = (
        "import importlib.util, pathlib, pandas, sklearn, pyarrow; "
        "folders = [pathlib.Path(module.__file__).parent for module in (pandas, sklearn, pyarrow)]; "
        "print([str(test) for folder in folders for test in folder.rglob('tests')], "
        "importlib.util.find_spec('tensorflow_io'))"
    )
    result = run_in_image(docker_client, cpu_image, ["python", "-c", script], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == "[] None"


def test_cpu_image_has_no_nccl_plugin_and_fits_its_size_budget(docker_client, cpu_image):
    result = run_in_image(
        docker_client, cpu_image, ["bash", "-c", f"test ! -e {NCCL_EFA_PLUGIN}"], timeout_s=RUN_DEADLINE_S
    )
    assert result.exit_code == 0, result.output
    size = int(docker_client.run(["image", "inspect", "--format", "{{.Size}}", cpu_image]))
    assert size <= MAX_IMAGE_BYTES, f"{cpu_image} is {size / 1e9:.2f} GB, over {MAX_IMAGE_BYTES / 1e9:.1f} GB"


def test_image_config_follows_the_contract(docker_client, cpu_image):
    config = json.loads(docker_client.run(["image", "inspect", "--format", "{{json .Config}}", cpu_image]))
    env = dict(item.split("=", 1) for item in config["Env"])
    assert config["Entrypoint"] == ["/usr/bin/tini", "--", "docker-entrypoint"]
    assert config["Cmd"] == ["train"]
    assert env["SAGEMAKER_TRAINING_MODULE"] == "sagetrain.entry:main"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    assert env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert env["SAGETRAIN_IN_IMAGE"] == "1"
    path = env["PATH"].split(":")
    assert path.index("/usr/local/bin") < path.index("/opt/venv/bin") < path.index("/usr/bin")
    assert not {"PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"} & env.keys()


def test_help_prints_usage(docker_client, cpu_image):
    result = run_in_image(docker_client, cpu_image, ["--help"], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("SageMaker training image")
    assert "Usage: docker run" in result.output


def test_entrypoint_runs_other_commands_and_keeps_their_exit_code(docker_client, cpu_image):
    result = run_in_image(
        docker_client, cpu_image, ["sh", "-c", "echo ran; exit 7"], timeout_s=RUN_DEADLINE_S
    )
    assert (result.exit_code, result.output.strip()) == (7, "ran")


def test_train_python_and_tools_resolve_to_the_image_ones(docker_client, cpu_image):
    script = "for tool in train sagetrain-rank python pip mpirun sshd ssh; do command -v $tool; done"
    result = run_in_image(docker_client, cpu_image, ["bash", "-c", script], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    assert result.output.split() == [
        "/usr/local/bin/train",
        "/usr/local/bin/sagetrain-rank",
        "/opt/venv/bin/python",
        "/opt/venv/bin/pip",
        "/usr/bin/mpirun",
        "/usr/sbin/sshd",
        "/usr/bin/ssh",
    ]


def test_runtime_has_no_compilers_or_development_packages(docker_client, cpu_image):
    script = (
        "for tool in gcc cc g++ c++ make cmake nvcc; do command -v $tool && echo found $tool; done; "
        "for package in g++ gcc make python3-dev libopenmpi-dev; do "
        "dpkg-query -W -f '${Status}\\n' $package 2>/dev/null | grep -q 'ok installed' "
        "&& echo found $package; "
        "done; true"
    )
    result = run_in_image(docker_client, cpu_image, ["bash", "-c", script], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    assert "found" not in result.output, result.output


def test_runtime_has_no_tensorflow_headers_and_still_imports(docker_client, cpu_image):
    script = (
        "import pathlib, tensorflow as tf; "
        "print('headers', pathlib.Path(tf.sysconfig.get_include()).exists(), tf.reduce_sum([1, 2]).numpy())"
    )
    result = run_in_image(docker_client, cpu_image, ["python", "-c", script], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    assert "headers False 3" in result.output, result.output


def test_mpirun_works_as_root_without_flags(docker_client, cpu_image):
    # One write per rank: with PYTHONUNBUFFERED, print() would emit its pieces separately and mpirun
    # may interleave the two ranks' pieces.
    script = (
        "import sys; from mpi4py import MPI; c = MPI.COMM_WORLD; "
        "sys.stdout.write(f'rank={c.Get_rank()} sum={c.allreduce(c.Get_rank() + 1)} size={c.Get_size()}\\n')"
    )
    result = run_in_image(
        docker_client, cpu_image, ["mpirun", "-np", "2", "python", "-c", script], timeout_s=RUN_DEADLINE_S
    )
    assert result.exit_code == 0, result.output
    reports = sorted(re.findall(r"rank=(\d) sum=(\d+) size=(\d+)", result.output))
    assert reports == [("0", "3", "2"), ("1", "3", "2")], result.output


def test_the_members_only_library_and_the_parameter_server_user_are_in_place(docker_client, cpu_image):
    """Where the launcher looks for them (sagetrain.contracts, launch/ps_server.py): the library, linked
    against nothing but the C library, and a user without login, home or a group of root's."""
    script = (
        f"test -f {MEMBERS_FILTER_LIBRARY} && echo library; "
        f"getent passwd {PS_USER} | cut -d: -f3,6,7; id -G {PS_USER}; id -u root"
    )
    result = run_in_image(docker_client, cpu_image, ["bash", "-c", script], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output
    library, account, groups, root = result.output.split()
    uid, home, shell = account.split(":")
    assert library == "library"
    assert int(uid) != int(root) and (home, shell) == ("/nonexistent", "/usr/sbin/nologin"), account
    assert groups != "0" and len(groups.split()) == 1, groups


def test_sshd_has_no_host_keys_but_accepts_generated_ones(docker_client, cpu_image):
    script = (
        "ls /etc/ssh/ssh_host_* 2>/dev/null && exit 3; mkdir -p /run/sshd; "
        "ssh-keygen -A >/dev/null && /usr/sbin/sshd -t -o PidFile=none"
    )
    result = run_in_image(docker_client, cpu_image, ["bash", "-c", script], timeout_s=RUN_DEADLINE_S)
    assert result.exit_code == 0, result.output


PEM_PRIVATE_KEY = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----\s+[A-Za-z0-9+/=\s]{40,}")
SECRET_PATHS = re.compile(r"^(?:\./)?(?:etc/ssh/ssh_host_|run/secrets/|run/extra-ca/|root/\.ssh/id_)")
LARGEST_FILE_SCANNED = 1 << 20


def layer_findings(layer: tarfile.TarFile) -> Iterator[str]:
    for member in layer:
        if SECRET_PATHS.match(member.name):
            yield f"path {member.name}"
        elif member.isfile() and member.size <= LARGEST_FILE_SCANNED:
            content = layer.extractfile(member).read()
            if PEM_PRIVATE_KEY.search(content):
                yield f"private key in {member.name}"


# Docker 20.10 writes the whole export to disk before it sends the first byte: minutes for 2 GB on a
# busy machine; the deadline is for the whole export.
EXPORT_TIMEOUT_S = 900


def test_no_layer_holds_a_private_key_host_key_or_build_secret(docker_client, cpu_image):
    findings: list[str] = []
    layers = 0
    export = Deadline(
        EXPORT_TIMEOUT_S, f"`docker save {cpu_image}` to stream the image", "raise EXPORT_TIMEOUT_S"
    )
    with (
        docker_client.start(["save", cpu_image], export, stderr_to_stdout=False) as saving,
        tarfile.open(fileobj=saving.stdout, mode="r|") as saved,
    ):
        for member in saved:
            if not member.isfile() or not (
                member.name.endswith("layer.tar") or member.name.startswith("blobs/")
            ):
                continue
            try:
                with tarfile.open(fileobj=saved.extractfile(member), mode="r|*") as layer:
                    findings += [f"{member.name}: {finding}" for finding in layer_findings(layer)]
                    layers += 1
            except tarfile.ReadError:
                continue  # an OCI blob that is a JSON config or manifest, not a layer
        assert saving.finish().returncode == 0
    assert layers >= 5
    assert findings == [], "\n".join(findings)


def test_build_history_passes_ca_certificates_only_as_a_secret(docker_client, cpu_image):
    history = ["image", "history", "--no-trunc", "--format", "{{json .CreatedBy}}", cpu_image]
    steps = [json.loads(line) for line in docker_client.run(history).splitlines()]
    download_steps = [step for step in steps if "pip install" in step or "pip wheel" in step]
    assert download_steps, steps
    for step in download_steps:
        assert "with-extra-ca" in step, step
    assert not [step for step in steps if re.search(r"(PIP_CERT|SSL_CERT_FILE|REQUESTS_CA_BUNDLE)=", step)]
