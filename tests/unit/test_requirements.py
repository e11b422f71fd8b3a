"""The decisions behind installing the user's requirements: which packages are protected, what pip's
report means (the refusal sentence), which indexes pip would use and where it connects, and what pip's
output gives the failure sentence. Literals in, literals out."""

import socket
from pathlib import Path

import pytest
from sagetrain.deadline import Deadline
from sagetrain.program.package_index import (
    PYPI,
    Endpoint,
    FileLine,
    PipSettings,
    Requirements,
    Unreachable,
    endpoint,
    index_urls,
    is_local,
    logical_lines,
    parse_line,
    pip_config_files,
    pip_settings,
    probe,
    read_requirements,
    without_credentials,
)
from sagetrain.program.protected import (
    Planned,
    Protected,
    UnreadableReport,
    constraints_text,
    planned_installs,
    protected_packages,
    refusal,
    replacements,
    requirement_path,
)
from sagetrain.program.requirements import (
    ERROR_LINE_MAX,
    PipRun,
    Target,
    error_line,
    failed,
    failed_offline,
    shown_error,
)

WHAT = "/opt/ml/code/requirements.txt"
ENVIRONMENT = {"python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"}
CPU_IMAGE = {
    "tensorflow": "2.21.0",
    "tensorflow-cpu": "2.21.0",
    "keras": "3.15.1",
    "tf-keras": "2.21.0",
    "horovod": "0.28.1",
    "numpy": "2.4.6",
    "protobuf": "7.36.2",
    "scipy": "1.17.1",
    "boto3": "1.44.8",
}
KERAS_REASON = "patched in the image for multi-worker fit and Keras 2 spellings"
NUMPY_REASON = "TensorFlow, h5py and ml-dtypes are compiled against it"


def item(name, version, *, requested=False, url="", requires=None, extras=None):
    entry = {
        "download_info": {"url": url or f"https://files.example/{name}-{version}-py3-none-any.whl"},
        "is_direct": url.startswith("file://"),
        "requested": requested,
        "metadata": {"metadata_version": "2.1", "name": name, "version": version},
    }
    if requires is not None:
        entry["metadata"]["requires_dist"] = requires
    if extras is not None:
        entry["requested_extras"] = extras
    return entry


def report(*items):
    return {"version": "1", "pip_version": "23.0.1", "install": list(items), "environment": ENVIRONMENT}


def refused(installed, *items):
    planned = planned_installs(report(*items))
    return refusal(WHAT, replacements(planned, protected_packages(installed), ENVIRONMENT))


# ---------------------------------------------------------------- protected packages and constraints


def test_protected_packages_are_the_listed_ones_and_every_cuda_wheel_at_their_installed_versions():
    installed = {**CPU_IMAGE, "nvidia-cublas-cu12": "12.5.3.2", "nvidia-nccl-cu12": "2.23.4"}
    protected = protected_packages(installed)
    assert sorted(protected) == [
        "horovod", "keras", "numpy", "nvidia-cublas-cu12", "nvidia-nccl-cu12", "protobuf", "tensorflow",
        "tensorflow-cpu", "tf-keras",
    ]  # fmt: skip
    assert protected["keras"] == Protected("keras", "3.15.1", KERAS_REASON)
    assert protected["nvidia-nccl-cu12"].version == "2.23.4"


def test_constraints_pin_each_protected_package_as_installed_sorted_by_name():
    protected = protected_packages({"numpy": "2.4.6", "keras": "3.15.1", "scipy": "1.17.1"})
    assert constraints_text(protected.values()) == "keras==3.15.1\nnumpy==2.4.6\n"


# ---------------------------------------------------------------- pip's report → the refusal


def test_a_keras_wheel_in_the_code_folder_is_refused_naming_both_versions_and_the_file():
    keras = item("keras", "99.0", requested=True, url="file:///opt/ml/code/keras-99.0-py3-none-any.whl")
    assert refused(CPU_IMAGE, keras) == (
        "/opt/ml/code/requirements.txt asks for keras 99.0 (/opt/ml/code/keras-99.0-py3-none-any.whl), "
        f"which would replace the image's keras 3.15.1 ({KERAS_REASON}); remove it, or build a derived "
        "image (FROM this one) to train with keras 99.0"
    )


def test_a_protected_package_pulled_in_names_the_requirement_and_the_path_to_it():
    sentence = refused(
        CPU_IMAGE,
        item("foo", "1.0", requested=True, requires=["bar>=2", "requests"]),
        item("bar", "2.0", requires=["numpy<2; python_version >= '3.9'"]),
        item("requests", "2.32.0"),
        item("numpy", "1.26.4"),
    )
    assert sentence == (
        "/opt/ml/code/requirements.txt asks for foo 1.0, which needs numpy 1.26.4 (through bar 2.0): that "
        f"would replace the image's numpy 2.4.6 ({NUMPY_REASON}); ask for a release of foo that works with "
        "numpy 2.4.6, or build a derived image (FROM this one) to train with numpy 1.26.4"
    )


def test_the_path_follows_dependencies_only_where_their_markers_hold():
    planned = planned_installs(
        report(
            item("foo", "1.0", requested=True, requires=['numpy<2; extra == "test"', "pandas"]),
            item("baz", "3.0", requested=True, requires=["numpy<2; sys_platform == 'win32'"]),
            item("plot", "1.0", requested=True, extras=["fast"], requires=['numpy<2; extra == "fast"']),
            item("pandas", "1.5.3", requires=["numpy>=1.21"]),
            item("numpy", "1.26.4"),
        )
    )
    # foo's numpy is for its "test" extra, baz's for Windows: the first that holds is plot's "fast".
    assert [p.name for p in requirement_path(planned, "numpy", ENVIRONMENT)] == ["plot"]
    without_plot = [p for p in planned if p.name != "plot"]
    assert [p.name for p in requirement_path(without_plot, "numpy", ENVIRONMENT)] == ["foo", "pandas"]


def test_extras_asked_on_the_way_count_for_the_next_dependency():
    planned = planned_installs(
        report(
            item("app", "1.0", requested=True, requires=["lib[speed]>=1"]),
            item("lib", "1.2", requires=['numpy<2; extra == "speed"']),
            item("numpy", "1.26.4"),
        )
    )
    assert [p.name for p in requirement_path(planned, "numpy", ENVIRONMENT)] == ["app", "lib"]


def test_requested_replacements_come_first_and_the_others_are_named_too():
    sentence = refused(
        CPU_IMAGE,
        item("pkg", "1.0", requested=True, requires=["protobuf==3.20.3"]),
        item("protobuf", "3.20.3"),
        item("numpy", "1.23.5", requested=True),
    )
    assert sentence is not None
    assert sentence.startswith("/opt/ml/code/requirements.txt asks for numpy 1.23.5, which would replace")
    assert ", and also its protobuf 7.36.2 (with 3.20.3); remove it" in sentence


def test_the_same_version_reinstalled_over_the_patched_copy_is_refused_too():
    sentence = refused(CPU_IMAGE, item("keras", "3.15.1.0", requested=True, url="file:///w/keras.whl"))
    assert sentence is not None
    assert "asks for keras 3.15.1.0 (/w/keras.whl), which would replace the image's keras 3.15.1" in sentence


def test_a_distribution_that_installs_the_same_modules_is_refused_on_an_image_without_it():
    gpu_image = {"tensorflow": "2.21.0", "keras": "3.15.1", "nvidia-cudnn-cu12": "9.3.0.75"}
    sentence = refused(gpu_image, item("tensorflow-cpu", "2.21.0", requested=True))
    assert sentence is not None
    assert sentence.startswith(
        "/opt/ml/code/requirements.txt asks for tensorflow-cpu 2.21.0, which would replace the image's "
        "tensorflow 2.21.0 (the TensorFlow the image's Horovod is compiled against)"
    )
    assert refused(gpu_image, item("nvidia-cudnn-cu12", "9.1.0.70")) is not None


def test_installs_that_touch_nothing_protected_are_not_refused():
    assert refused(CPU_IMAGE, item("pandas", "2.2.0", requested=True), item("scipy", "1.14.0")) is None
    assert refused(CPU_IMAGE) is None


def test_names_in_the_report_are_compared_canonically():
    assert refused(CPU_IMAGE, item("TF_Keras", "2.20.1", requested=True)) is not None


def test_a_report_in_another_format_is_not_read():
    with pytest.raises(UnreadableReport, match="version '0'"):
        planned_installs({"version": "0", "install": []})
    with pytest.raises(UnreadableReport, match="lacks"):
        planned_installs({"version": "1", "install": [{"metadata": {}}]})


def test_planned_installs_read_the_report_fields():
    planned = planned_installs(
        report(
            item(
                "foo", "1.0", requested=True, url="file:///opt/ml/code/foo.whl", requires=["a"], extras=["x"]
            )
        )
    )
    assert planned == (Planned("foo", "1.0", True, "/opt/ml/code/foo.whl", ("a",), ("x",)),)


# ---------------------------------------------------------------- the index URLs pip would use


def test_config_files_in_pips_override_order(tmp_path):
    home, prefix = Path("/root"), Path("/opt/venv")
    assert pip_config_files({}, home, prefix) == (
        Path("/etc/xdg/pip/pip.conf"),
        Path("/etc/pip.conf"),
        Path("/root/.pip/pip.conf"),
        Path("/root/.config/pip/pip.conf"),
        Path("/opt/venv/pip.conf"),
    )
    named = tmp_path / "pip.conf"
    named.write_text("")
    environ = {"PIP_CONFIG_FILE": str(named), "XDG_CONFIG_DIRS": "/a:/b"}
    assert pip_config_files(environ, home, prefix) == (
        Path("/a/pip/pip.conf"), Path("/b/pip/pip.conf"), Path("/etc/pip.conf"), Path("/opt/venv/pip.conf"),
        named,
    )  # fmt: skip
    assert pip_config_files({"PIP_CONFIG_FILE": "/dev/null"}, home, prefix) == ()


def test_settings_install_section_over_global_variables_over_both():
    site = "[global]\nindex-url = https://global.example/simple\n"
    user = "[install]\nindex_url = https://install.example/simple\nextra-index-url = https://x/simple https://y/simple\n"
    assert pip_settings([], {}) == PipSettings(PYPI)
    assert pip_settings([site], {}).index_url == "https://global.example/simple"
    # [install] wins over [global] whichever file holds it
    assert pip_settings([user, site], {}) == PipSettings(
        "https://install.example/simple", ("https://x/simple", "https://y/simple")
    )
    environ = {
        "PIP_INDEX_URL": "https://env.example/simple",
        "PIP_NO_INDEX": "yes",
        "PIP_PROXY": "proxy:3128",
    }
    assert pip_settings([user], environ) == PipSettings(
        "https://env.example/simple", ("https://x/simple", "https://y/simple"), True, "proxy:3128"
    )
    assert pip_settings([site], {"PIP_INDEX_URL": ""}).index_url == "https://global.example/simple"
    assert pip_settings(["not a config file"], {}).index_url == PYPI


def test_requirements_lines_as_pip_reads_them():
    text = "numpy \\\n  >=1.0  # a comment\n# only a comment\n\n-i https://${TOKEN}@host/simple\n${UNSET}x\n"
    assert logical_lines(text, {"TOKEN": "abc"}) == [
        "numpy   >=1.0",
        "-i https://abc@host/simple",
        "${UNSET}x",
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("-i https://a/simple", [FileLine("index-url", "https://a/simple")]),
        ("-ihttps://a/simple", [FileLine("index-url", "https://a/simple")]),
        ("--index-url=https://a/simple", [FileLine("index-url", "https://a/simple")]),
        ("--extra-index-url https://b/simple", [FileLine("extra-index-url", "https://b/simple")]),
        ("--no-index", [FileLine("no-index", "")]),
        ("-f ./wheels", [FileLine("find-links", "./wheels")]),
        ("--trusted-host h --pre", [FileLine("trusted-host", "h"), FileLine("pre", "")]),
        ("-e .", [FileLine("editable", ".")]),
        ("foo==1.0 --hash=sha256:abc", [FileLine("", "foo==1.0")]),
        ("foo-bar[x]>=1; python_version > '3'", [FileLine("", "foo-bar[x]>=1; python_version > '3'")]),
    ],
)
def test_parse_line(line, expected):
    assert parse_line(line) == expected


@pytest.mark.parametrize(
    ("requirement", "local"),
    [
        ("./keras-99.0-py3-none-any.whl", True),
        ("keras-99.0-py3-none-any.whl", True),
        ("wheels/foo-1.0.tar.gz", True),
        ("/opt/ml/code", True),
        (".", True),
        ("file:///opt/ml/code/foo.whl", True),
        ("foo @ file:///opt/ml/code/foo.whl", True),
        ("./foo.whl ; python_version > '3'", True),
        ("foo", False),
        ("foo==1.0", False),
        ("foo @ https://example.com/foo.whl", False),
        ("git+https://github.com/o/r.git", False),
        ("https://example.com/foo.whl", False),
    ],
)
def test_is_local(requirement, local):
    assert is_local(requirement) is local


def test_read_requirements_follows_included_files_in_place(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "requirements.txt").write_text(
        "-i https://a/simple\n-r sub/more.txt\n-c sub/constraints.txt\n./w.whl\n"
    )
    (tmp_path / "sub" / "more.txt").write_text("--extra-index-url https://b/simple\nfoo\n")
    (tmp_path / "sub" / "constraints.txt").write_text("--no-index\nbar==1\n")
    found = read_requirements(tmp_path / "requirements.txt", {})
    assert found == Requirements(
        (
            FileLine("index-url", "https://a/simple"),
            FileLine("extra-index-url", "https://b/simple"),
            FileLine("no-index", ""),
        ),
        ("foo", "./w.whl"),
    )
    assert not found.local_only


def test_a_missing_included_file_leaves_the_requirements_incomplete(tmp_path):
    (tmp_path / "requirements.txt").write_text("./w.whl\n-r missing.txt\n")
    found = read_requirements(tmp_path / "requirements.txt", {})
    assert found.requirements == ("./w.whl",)
    assert not found.complete
    assert not found.local_only  # what the missing file asks for is unknown


def test_local_only_and_the_package_target():
    assert Requirements(requirements=("./a.whl", "b/c.tar.gz")).local_only
    assert Target.package(Path("/opt/ml/code")) == Target(
        "the package in /opt/ml/code", ("/opt/ml/code",), Requirements(requirements=("/opt/ml/code",))
    )


def test_index_urls_as_pip_changes_them_line_by_line():
    settings = PipSettings("https://conf/simple", ("https://extra/simple",))
    assert index_urls(PipSettings()) == (PYPI,)
    assert index_urls(settings) == ("https://conf/simple", "https://extra/simple")
    lines = [FileLine("index-url", "https://file/simple"), FileLine("extra-index-url", "https://more/simple")]
    assert index_urls(settings, lines) == ("https://file/simple", "https://more/simple")
    assert index_urls(settings, [FileLine("find-links", "."), FileLine("no-index", "")]) == ()
    # after --no-index, pip ignores index lines
    assert (
        index_urls(settings, [FileLine("no-index", ""), FileLine("index-url", "https://file/simple")]) == ()
    )
    assert index_urls(PipSettings(no_index=True)) == ()


# ---------------------------------------------------------------- where a connection to an index goes


def test_endpoint_of_an_index_and_through_a_proxy():
    none = PipSettings()
    assert endpoint("https://pypi.org/simple", none, {}) == Endpoint("pypi.org", 443)
    assert endpoint("http://127.0.0.1:8000/simple", none, {}) == Endpoint("127.0.0.1", 8000)
    assert endpoint("https://u:p@host.example:8443/simple", none, {}) == Endpoint("host.example", 8443)
    assert endpoint("file:///srv/index", none, {}) is None
    assert endpoint("/srv/index", none, {}) is None
    proxied = {"https_proxy": "http://proxy.corp:3128", "NO_PROXY": "internal.corp,.local"}
    assert endpoint("https://pypi.org/simple", none, proxied) == Endpoint(
        "proxy.corp", 3128, "http://proxy.corp:3128"
    )
    assert endpoint("https://pkgs.internal.corp/simple", none, proxied) == Endpoint("pkgs.internal.corp", 443)
    assert endpoint("https://a.local/simple", none, proxied) == Endpoint("a.local", 443)
    assert endpoint("http://pypi.org/simple", none, proxied) == Endpoint("pypi.org", 80)  # no http proxy
    assert endpoint("https://pypi.org/simple", PipSettings(proxy="squid:8080"), proxied) == Endpoint(
        "squid", 8080, "squid:8080"
    )


def test_probe_connects_on_loopback_and_says_why_not():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert probe(Endpoint("127.0.0.1", port), Deadline(5, "a test connection")) is None
    # Nothing listens there any more.
    assert probe(Endpoint("127.0.0.1", port), Deadline(5, "a test connection")) == "Connection refused"


def test_an_unreachable_index_is_described_without_its_credentials():
    unreachable = Unreachable(
        "https://aws:tok3n@d.example/simple", "Connection refused", "http://u:pw@proxy:3128"
    )
    assert unreachable.describe() == (
        "the package index https://***@d.example/simple cannot be reached through the proxy "
        "http://***@proxy:3128 (Connection refused)"
    )
    assert without_credentials("see https://tok@h/x and http://h/y") == "see https://***@h/x and http://h/y"


# ---------------------------------------------------------------- pip's error line and the sentences


def test_the_error_line_is_pips_last_own_error_line():
    output = [
        "Collecting foo\n",
        "ERROR: Could not find a version that satisfies the requirement nope (from versions: none)\n",
        "ERROR: No matching distribution found for nope\n",
        "      error: command 'gcc' failed\n",  # a build's output, indented by pip
        "Done\n",
    ]
    last = ""
    for line in output:
        last = error_line(last, line)
    assert last == "No matching distribution found for nope"


def test_resolution_impossible_keeps_the_line_that_names_the_conflict():
    last = error_line(
        "", "ERROR: Cannot install a==1 and b==2 because these package versions have conflicts."
    )
    assert error_line(last, "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/") == last
    assert error_line("", "error: metadata-generation-failed\n") == "metadata-generation-failed"


def test_shown_error_masks_credentials_and_is_short():
    assert shown_error("cannot fetch https://aws:secret@d.example/simple/x/") == (
        "cannot fetch https://***@d.example/simple/x/"
    )
    long = shown_error("x" * 1000)
    assert len(long) == ERROR_LINE_MAX
    assert long.endswith("…")


def test_failure_sentences():
    assert failed(WHAT, PipRun(1, "No matching distribution found for nope")) == (
        "installing /opt/ml/code/requirements.txt failed: pip says "
        '"No matching distribution found for nope"; '
        "fix what it names (pip's output is in the job's log)"
    )
    assert failed(WHAT, PipRun(2)) == (
        "installing /opt/ml/code/requirements.txt failed (pip exit code 2; pip's output is in the job's log)"
    )
    unreachable = Unreachable(PYPI, "name resolution failed: Temporary failure in name resolution")
    sentence = failed_offline(WHAT, unreachable, PipRun(1, "No matching distribution found for nope"))
    assert sentence == (
        "installing /opt/ml/code/requirements.txt failed: the package index https://pypi.org/simple cannot "
        "be reached (name resolution failed: Temporary failure in name resolution), and without it pip says "
        '"No matching distribution found for nope"; give the job a route to it (in a VPC: a subnet with '
        "a NAT gateway), or ship the wheels in the code folder (pip download -r requirements.txt -d wheels, "
        "and a line --find-links wheels in requirements.txt), or build a derived image with them installed"
    )
    assert len(sentence) + ERROR_LINE_MAX < 1024  # SageMaker's FailureReason keeps the first 1,024
