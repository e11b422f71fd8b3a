"""EFA: which RDMA devices are EFAs this container can open (from /sys and /dev as the kernel lays them
out), what the plan sets for NCCL and libfabric on such a host (pure, with literals), and that the job's
environment and mpirun's command carry it, the user's own settings first."""

import dataclasses
from pathlib import Path

import pytest
from sagetrain.config.devices import RdmaDevice, rdma_devices, usable_efa_devices
from sagetrain.config.hyperparameters import JobSettings
from sagetrain.config.job_files import JobFiles
from sagetrain.config.resources import ResourceConfig
from sagetrain.plan import make_plan
from sagetrain.plan.efa import (
    FI_EFA_FORK_SAFE_VAR,
    FI_EFA_USE_DEVICE_RDMA_VAR,
    FI_PROVIDER_VAR,
    NCCL_NET_PLUGIN_VAR,
    NCCL_PROTO_VAR,
    efa_settings,
    has_device_rdma,
)

PLUGIN = "/opt/aws-ofi-nccl/lib/libnccl-net-ofi.so"
P4D_EFAS = ("rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27")


def efa(name: str, openable: bool = True, driver: str | None = "efa") -> RdmaDevice:
    return RdmaDevice(name, driver, "0x1d0f", "0xefa1", openable)


# ---------------------------------------------------------------------------------------------- detection


def test_an_efa_is_known_by_its_driver_or_by_its_pci_ids():
    devices = (
        efa("rdmap16s27"),
        RdmaDevice("rdmap32s27", None, "0x1d0f", "0xefa2", True),  # driver link not visible: the ids say it
        RdmaDevice("mlx5_0", "mlx5_core", "0x15b3", "0x101b", True),  # a Mellanox NIC is not an EFA
        RdmaDevice("ena0", None, "0x1d0f", "0xec20", True),  # Amazon's, but not an EFA (ENA's id)
    )
    assert usable_efa_devices(devices) == ("rdmap16s27", "rdmap32s27")


def test_an_efa_the_container_was_not_given_is_of_no_use():
    assert usable_efa_devices((efa("rdmap16s27", openable=False),)) == ()


def make_sysfs(root: Path, devices: dict[str, tuple[str, str, str | None]], uverbs: dict[str, str]) -> None:
    """/sys/class/infiniband/<name>/device/{vendor,device,driver→…/drivers/<driver>} and
    /sys/class/infiniband_verbs/uverbsN/ibdev, as the kernel lays them out."""
    for slot, (name, (vendor, device, driver)) in enumerate(devices.items()):
        pci = root / "sys" / "devices" / "pci0000:00" / f"0000:00:{slot:02x}.0"
        pci.mkdir(parents=True)
        (pci / "vendor").write_text(vendor + "\n")
        (pci / "device").write_text(device + "\n")
        if driver:
            drivers = root / "sys" / "bus" / "pci" / "drivers" / driver
            drivers.mkdir(parents=True, exist_ok=True)
            (pci / "driver").symlink_to(drivers)
        entry = root / "sys" / "class" / "infiniband" / name
        entry.mkdir(parents=True)
        (entry / "device").symlink_to(pci)
    for uverbs_name, ibdev in uverbs.items():
        folder = root / "sys" / "class" / "infiniband_verbs" / uverbs_name
        folder.mkdir(parents=True)
        (folder / "ibdev").write_text(ibdev + "\n")


def test_rdma_devices_are_read_from_sys_and_openable_when_dev_has_their_uverbs(tmp_path):
    make_sysfs(
        tmp_path,
        {"rdmap16s27": ("0x1d0f", "0xefa1", "efa"), "rdmap32s27": ("0x1d0f", "0xefa1", "efa")},
        {"uverbs0": "rdmap16s27", "uverbs1": "rdmap32s27"},
    )
    (tmp_path / "dev" / "infiniband").mkdir(parents=True)
    (tmp_path / "dev" / "infiniband" / "uverbs0").touch()  # the container was given one of the two
    devices = rdma_devices(tmp_path / "sys", tmp_path / "dev")
    assert devices == (
        RdmaDevice("rdmap16s27", "efa", "0x1d0f", "0xefa1", True),
        RdmaDevice("rdmap32s27", "efa", "0x1d0f", "0xefa1", False),
    )
    assert usable_efa_devices(devices) == ("rdmap16s27",)


def test_a_host_without_rdma_devices_has_none(tmp_path):
    assert rdma_devices(tmp_path / "sys", tmp_path / "dev") == ()


# ----------------------------------------------------------------------------------------------- decision


def test_without_an_efa_device_nothing_is_set():
    settings = efa_settings((), gpus=8, instance_type="ml.p4d.24xlarge", nccl_plugin=PLUGIN)
    assert (settings.env, settings.reason) == ((), None)


def test_p4d_gets_the_plugin_the_efa_provider_simple_protocol_fork_safety_and_device_rdma():
    settings = efa_settings(P4D_EFAS, gpus=8, instance_type="ml.p4d.24xlarge", nccl_plugin=PLUGIN)
    assert dict(settings.env) == {
        NCCL_NET_PLUGIN_VAR: PLUGIN,
        FI_PROVIDER_VAR: "efa",
        NCCL_PROTO_VAR: "simple",
        FI_EFA_FORK_SAFE_VAR: "1",
        FI_EFA_USE_DEVICE_RDMA_VAR: "1",
    }
    assert settings.reason is not None
    assert "4 EFA device(s) (rdmap16s27, rdmap32s27, rdmap144s27, rdmap160s27)" in settings.reason
    assert "device RDMA on (ml.p4d.24xlarge)" in settings.reason


def test_an_efa_without_rdma_read_gets_everything_but_device_rdma():
    settings = efa_settings(("rdmap0s6",), gpus=8, instance_type="ml.g5.48xlarge", nccl_plugin=PLUGIN)
    env = dict(settings.env)
    assert FI_EFA_USE_DEVICE_RDMA_VAR not in env  # libfabric would abort the process on such an EFA
    assert env[NCCL_NET_PLUGIN_VAR] == PLUGIN and env[FI_PROVIDER_VAR] == "efa"
    assert "device RDMA off (ml.g5.48xlarge)" in (settings.reason or "")


@pytest.mark.parametrize(
    ("instance_type", "rdma"),
    [
        ("ml.p4d.24xlarge", True),
        ("ml.p4de.24xlarge", True),
        ("ml.p5.48xlarge", True),
        ("ml.p5e.48xlarge", True),
        ("ml.p5en.48xlarge", True),
        ("ml.p6-b200.48xlarge", True),
        ("p5.48xlarge", True),  # EC2's name, without SageMaker's prefix
        ("ml.g7e.48xlarge", True),
        ("ml.p5.4xlarge", False),
        ("ml.g7e.8xlarge", False),
        ("ml.p3dn.24xlarge", False),
        ("ml.g5.48xlarge", False),
        ("ml.g6.48xlarge", False),
        ("ml.p4d.12xlarge", False),  # no such instance: nothing is assumed for unknown sizes
        ("local", False),  # SageMaker local mode
        ("", False),
    ],
)
def test_device_rdma_only_on_instance_types_whose_efa_reads_remotely(instance_type, rdma):
    assert has_device_rdma(instance_type) is rdma


def test_efa_without_gpus_or_without_the_plugin_sets_nothing_and_says_why():
    cpu_host = efa_settings(("rdmap0s6",), gpus=0, instance_type="ml.c5n.18xlarge", nccl_plugin=PLUGIN)
    assert cpu_host.env == () and "no GPU" in (cpu_host.reason or "")
    cpu_image = efa_settings(("rdmap0s6",), gpus=8, instance_type="ml.p4d.24xlarge", nccl_plugin=None)
    assert cpu_image.env == () and "no NCCL plugin" in (cpu_image.reason or "")


def resources(instance_type: str = "ml.p4d.24xlarge", hosts=("algo-1", "algo-2")) -> ResourceConfig:
    return ResourceConfig(hosts[0], tuple(hosts), instance_type, "homogeneousCluster", (), None)


def test_the_plan_carries_the_decision_and_its_reason():
    plan = make_plan(resources(), JobSettings(), 8, 96, efa_devices=P4D_EFAS, nccl_efa_plugin=PLUGIN)
    assert dict(plan.efa_env)[NCCL_NET_PLUGIN_VAR] == PLUGIN
    assert plan.reasons[0].startswith("auto") and "EFA device(s)" in plan.reasons[-1]
    without = make_plan(resources(), JobSettings(), 8, 96, nccl_efa_plugin=PLUGIN)
    assert (without.efa_env, len(without.reasons)) == ((), 1)
    assert dataclasses.replace(plan, efa_env=(), reasons=plan.reasons[:1]) == without


# ------------------------------------------------------------------------------------- job environment


def efa_spec(root: Path, environ_extra: dict[str, str]):
    """The launch spec of a 2-host p4d job planned with 4 EFAs and the plugin, as the dry run builds it."""
    from sagetrain.preparation import Preparation, launch_spec, prepare_job

    JobFiles(("algo-1", "algo-2"), {"sagemaker_program": "train.py"}).write(root, "algo-1")
    environ = {"SAGEMAKER_BASE_DIR": str(root), "SAGETRAIN_RUN_DIR": str(root / "run"), **environ_extra}
    job = prepare_job(environ, Preparation.DESCRIBE, root=root, gpus=8, cpus=96)
    config = dataclasses.replace(
        job.config,
        resources=dataclasses.replace(job.config.resources, current_instance_type="ml.p4d.24xlarge"),
    )
    plan = make_plan(config.resources, config.settings, 8, 96, efa_devices=P4D_EFAS, nccl_efa_plugin=PLUGIN)
    return launch_spec(
        dataclasses.replace(job, config=config, plan=plan), environ, Preparation.DESCRIBE, cpus=96
    )


def test_the_job_environment_gets_the_efa_settings_and_mpirun_forwards_them(tmp_path):
    from sagetrain.launch.mpi import describe

    spec = efa_spec(tmp_path, {})
    for name, value in efa_settings(P4D_EFAS, 8, "ml.p4d.24xlarge", PLUGIN).env:
        assert spec.env[name] == value
    command = describe(spec, {})["command"]
    forwarded = {command[i + 1] for i, option in enumerate(command) if option == "-x"}
    assert {NCCL_NET_PLUGIN_VAR, FI_PROVIDER_VAR, NCCL_PROTO_VAR, FI_EFA_USE_DEVICE_RDMA_VAR} <= forwarded


def test_what_the_user_set_wins_over_the_efa_settings(tmp_path):
    spec = efa_spec(tmp_path, {NCCL_PROTO_VAR: "LL128", FI_EFA_USE_DEVICE_RDMA_VAR: "0"})
    assert spec.env[NCCL_PROTO_VAR] == "LL128"
    assert spec.env[FI_EFA_USE_DEVICE_RDMA_VAR] == "0"
    assert spec.env[NCCL_NET_PLUGIN_VAR] == PLUGIN
