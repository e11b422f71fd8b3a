"""User code's own dependencies: `requirements.txt` next to the program is installed on the host before
any rank starts; an uninstallable requirement, or one that would replace a package the image was built
around, fails the job clearly, before launch. The containers have no network (`--network none`), so the
requirements are wheels shipped in the code folder (built here by hand), or come from a package index the
container serves itself on 127.0.0.1."""

import base64
import hashlib
import json
import re
import shlex
import time
import zipfile
from pathlib import Path

from conftest import REPO_ROOT, run_in_image
from sagetrain.config.job_files import JobFiles
from sagetrain.program.requirements import DRY_RUN_NETWORK, INSTALL_NETWORK, PROBE_SECONDS

JOB_DEADLINE_S = 300
PACKAGE, VERSION = "sagetrain_userdep", "1.2.3"
WHEEL = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
INDEX_PORT = 8765
INDEX_FOLDER = "/srv/index"
CODE = "/opt/ml/code"

TRAIN_SCRIPT = """
import json, os
import sagetrain_userdep
rank = os.environ["SAGETRAIN_RANK"]
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank-{rank}.json"), "w") as f:
    json.dump({"rank": int(rank), "dependency": sagetrain_userdep.VERSION}, f)
"""

# Serves a folder on 127.0.0.1 (a PEP 503 simple index), then runs the command: the socket listens before
# the command starts, so the command's first connection waits in its backlog instead of racing it.
INDEX_SERVER = """
import functools, http.server, os, sys
folder, port, *command = sys.argv[1:]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=folder)
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), handler)
if os.fork() == 0:
    server.serve_forever()
server.socket.close()
os.execvp(command[0], command)
"""

# A route that drops every connection attempt, as a VPC subnet without a NAT gateway does: a loopback port
# whose accept queue is full (the kernel then drops new connection requests). Then runs the command.
BLACK_HOLE = """
import os, socket, sys
port, *command = sys.argv[1:]
listener = socket.socket()
listener.bind(("127.0.0.1", int(port)))
listener.listen(0)
queued = [socket.socket() for _ in range(3)]
for connection in queued:
    connection.setblocking(False)
    connection.connect_ex(("127.0.0.1", int(port)))
child = os.fork()
if child == 0:
    os.execvp(command[0], command)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
"""


def pinned(name: str) -> str:
    text = (REPO_ROOT / "container" / "pins" / "python.txt").read_text()
    return re.search(rf"^{re.escape(name)}==(\S+)$", text, re.MULTILINE).group(1)


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(
    folder: Path, name: str = PACKAGE, version: str = VERSION, requires: tuple[str, ...] = ()
) -> Path:
    """A pure-Python wheel of one module, as `pip wheel` would make it."""
    dist_info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    files = {
        f"{name}.py": f"VERSION = {version!r}\n".encode(),
        f"{dist_info}/METADATA": metadata.encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [record_line(path, data) for path, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def write_tree(root: Path, requirements: str, processes: int) -> Path:
    hyperparameters = {
        "sagemaker_program": "train.py",
        "sagemaker_mpi_enabled": True,
        "sagemaker_mpi_num_of_processes_per_host": processes,
    }
    JobFiles(("algo-1",), hyperparameters).write(root, "algo-1")
    code = root / "code"
    (code / "train.py").write_text(TRAIN_SCRIPT)
    write_wheel(code)
    (code / "requirements.txt").write_text(requirements)
    return code


def write_index(folder: Path) -> None:
    """A PEP 503 simple index that has the one wheel PACKAGE."""
    files = folder / "files"
    files.mkdir(parents=True)
    wheel = write_wheel(files)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    project = folder / "simple" / PACKAGE.replace("_", "-")
    project.mkdir(parents=True)
    (project / "index.html").write_text(
        f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>\n'
    )
    (folder / "serve.py").write_text(INDEX_SERVER)
    (folder / "black_hole.py").write_text(BLACK_HOLE)


def run_job(docker_client, image: str, root: Path, index: Path | None = None, *, black_hole: bool = False):
    """The job in a container without a network; with ``index``, a package index on 127.0.0.1 serves that
    folder, or with ``black_hole`` the index's port drops every connection attempt."""
    volumes = {str(root): {"bind": "/opt/ml", "mode": "rw"}}
    entrypoint, environment = None, None
    if index is not None:
        volumes[str(index)] = {"bind": INDEX_FOLDER, "mode": "ro"}
        server = (
            ["black_hole.py", str(INDEX_PORT)] if black_hole else ["serve.py", INDEX_FOLDER, str(INDEX_PORT)]
        )
        entrypoint = ["/usr/bin/tini", "--", "python", f"{INDEX_FOLDER}/{server[0]}", *server[1:]]
        environment = {"PIP_INDEX_URL": f"http://127.0.0.1:{INDEX_PORT}/simple"}
    began = time.monotonic()
    result = run_in_image(
        docker_client,
        image,
        ["train"],
        timeout_s=JOB_DEADLINE_S,
        volumes=volumes,
        hostname="algo-1",
        entrypoint=entrypoint,
        environment=environment,
    )
    print(f"the job's container ran {time.monotonic() - began:.1f} s (start, install, exit)")
    return result


def failure_line(root: Path) -> str:
    return (root / "output" / "failure").read_text().splitlines()[0]


def assert_never_launched(root: Path, output: str) -> None:
    assert "mpirun command" not in output, "no rank may start when the requirements failed"
    assert not list((root / "model").glob("rank-*.json"))


def assert_rank_files(root: Path) -> None:
    said = [json.loads((root / "model" / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    assert said == [{"rank": 0, "dependency": VERSION}, {"rank": 1, "dependency": VERSION}]


def test_requirements_are_installed_before_every_rank_starts(docker_client, cpu_image, tmp_path):
    root = tmp_path / "ml"
    write_tree(root, f"./{WHEEL}\n", processes=2)
    result = run_job(docker_client, cpu_image, root)
    assert result.exit_code == 0, result.output
    assert_rank_files(root)
    # Installed against the image's own packages, pinned as installed.
    assert f"installing {CODE}/requirements.txt: " in result.output
    assert " -c /tmp/sagetrain-pip-" in result.output


def test_an_uninstallable_requirement_fails_before_launch_naming_the_file(docker_client, cpu_image, tmp_path):
    root = tmp_path / "ml"
    write_tree(root, "./no-such-package-0.0-py3-none-any.whl\n", processes=2)
    result = run_job(docker_client, cpu_image, root)
    assert result.exit_code == 1, result.output
    line = failure_line(root)
    assert line.startswith(f"installing {CODE}/requirements.txt failed: "), line
    # pip's own error line, not a pointer to its output
    assert 'pip says "no-such-package-0.0-py3-none-any.whl is not a valid wheel filename."' in line, line
    assert_never_launched(root, result.output)


def test_a_wheel_that_would_replace_the_images_keras_is_refused(docker_client, cpu_image, tmp_path):
    root = tmp_path / "ml"
    code = write_tree(root, "./keras-99.0-py3-none-any.whl\n", processes=2)
    write_wheel(code, "keras", "99.0")
    result = run_job(docker_client, cpu_image, root)
    assert result.exit_code == 1, result.output
    line = failure_line(root)
    assert line.startswith(
        f"{CODE}/requirements.txt asks for keras 99.0 ({CODE}/keras-99.0-py3-none-any.whl), which would "
        f"replace the image's keras {pinned('keras')} ("
    ), line
    assert line.endswith("; remove it, or build a derived image (FROM this one) to train with keras 99.0"), (
        line
    )
    assert f"installing {CODE}/requirements.txt: " not in result.output, "pip must not install it"
    assert_never_launched(root, result.output)


def test_a_dependency_that_would_replace_numpy_names_the_requirement_that_pulls_it_in(
    docker_client, cpu_image, tmp_path
):
    root = tmp_path / "ml"
    code = write_tree(root, "--find-links .\n./app-1.0-py3-none-any.whl\n", processes=1)
    write_wheel(code, "app", "1.0", requires=("helper>=1",))
    write_wheel(code, "helper", "2.0", requires=("numpy<2",))
    write_wheel(code, "numpy", "1.26.4")
    result = run_job(docker_client, cpu_image, root)
    assert result.exit_code == 1, result.output
    line = failure_line(root)
    assert line.startswith(
        f"{CODE}/requirements.txt asks for app 1.0 ({CODE}/app-1.0-py3-none-any.whl), which needs numpy "
        "1.26.4 (through helper 2.0): that would replace the image's numpy "
    ), line
    assert "ask for a release of app that works with numpy " in line, line
    assert_never_launched(root, result.output)


def test_a_requirement_no_reachable_index_has_names_the_index_quickly(docker_client, cpu_image, tmp_path):
    root = tmp_path / "ml"
    write_tree(root, "no-such-package==1.0\n", processes=2)
    result = run_job(docker_client, cpu_image, root)
    assert result.exit_code == 1, result.output
    line = failure_line(root)
    assert line.startswith(
        f"installing {CODE}/requirements.txt failed: the package index https://pypi.org/simple cannot be "
        "reached ("
    ), line
    assert 'and without it pip says "No matching distribution found for no-such-package==1.0"' in line, line
    assert "ship the wheels in the code folder" in line, line
    # pip ran without the index once the probe found it out of reach, its network waits bounded all the same
    dry_run = next(text for text in result.output.splitlines() if "what installing" in text)
    assert f" {shlex.join(DRY_RUN_NETWORK)} --no-index --dry-run " in dry_run, dry_run
    assert_never_launched(root, result.output)


def test_a_wheel_shipped_in_the_code_folder_installs_without_a_network(docker_client, cpu_image, tmp_path):
    root = tmp_path / "ml"
    write_tree(root, f"--find-links .\n{PACKAGE}=={VERSION}\n", processes=2)
    result = run_job(docker_client, cpu_image, root)
    assert result.exit_code == 0, result.output
    assert "the package index https://pypi.org/simple cannot be reached (" in result.output
    assert_rank_files(root)


def test_an_index_on_loopback_installs_the_requirement(docker_client, cpu_image, tmp_path):
    root, index = tmp_path / "ml", tmp_path / "index"
    code = write_tree(root, f"{PACKAGE}=={VERSION}\n", processes=2)
    (code / WHEEL).unlink()  # from the index only
    write_index(index)
    result = run_job(docker_client, cpu_image, root, index)
    assert result.exit_code == 0, result.output
    assert "cannot be reached" not in result.output
    install = next(
        text for text in result.output.splitlines() if f"installing {CODE}/requirements.txt: " in text
    )
    assert f" {shlex.join(INSTALL_NETWORK)} -c " in install, install
    assert_rank_files(root)


def test_a_requirement_the_reachable_index_lacks_gets_pips_error_line(docker_client, cpu_image, tmp_path):
    root, index = tmp_path / "ml", tmp_path / "index"
    write_tree(root, f"{PACKAGE}=={VERSION}\nno-such-package\n", processes=2)
    write_index(index)
    result = run_job(docker_client, cpu_image, root, index)
    assert result.exit_code == 1, result.output
    assert failure_line(root) == (
        f'installing {CODE}/requirements.txt failed: pip says "No matching distribution found for '
        "no-such-package\"; fix what it names (pip's output is in the job's log)"
    )
    assert "cannot be reached" not in result.output
    assert_never_launched(root, result.output)


def test_an_index_behind_a_route_that_drops_connections_is_named_within_the_probes_bound(
    docker_client, cpu_image, tmp_path
):
    root, index = tmp_path / "ml", tmp_path / "index"
    write_tree(root, "no-such-package\n", processes=2)
    write_index(index)
    result = run_job(docker_client, cpu_image, root, index, black_hole=True)
    assert result.exit_code == 1, result.output
    assert failure_line(root).startswith(
        f"installing {CODE}/requirements.txt failed: the package index http://127.0.0.1:{INDEX_PORT}/simple "
        f"cannot be reached (no connection within {PROBE_SECONDS:g} s), and without it pip says "
        '"No matching distribution found for no-such-package"; '
    ), failure_line(root)
    assert_never_launched(root, result.output)
