"""A script-mode job through the image's own entry: `docker run … train` with a mounted /opt/ml tree,
`sagemaker_mpi_enabled` with 2 processes on the one host. The user script is plain Horovod (what AWS
users bring): every rank reads its share of the channel, gradients are allreduced, rank 0 saves the
model. The job must end in success with the model and one output per rank, each record read exactly
once, and identical weights on both ranks."""

import json
import textwrap
from pathlib import Path

from conftest import run_in_image
from sagetrain.config.channels import Channel
from sagetrain.config.job_files import JobFiles

JOB_DEADLINE_S = 600
RECORDS = 40

TRAIN_SCRIPT = textwrap.dedent(
    """
    import argparse, hashlib, json, os
    from pathlib import Path

    import horovod.tensorflow as hvd
    import keras
    import numpy as np
    import tensorflow as tf

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--model_dir", default=os.environ["SM_MODEL_DIR"])
    args, _ = parser.parse_known_args()

    hvd.init()
    rows = np.loadtxt(Path(os.environ["SM_CHANNEL_TRAIN"]) / "data.csv", delimiter=",", dtype="float32")
    mine = rows[hvd.rank()::hvd.size()]
    ids, features, labels = mine[:, 0].astype(int), mine[:, 1:4], mine[:, 4:]

    keras.utils.set_random_seed(hvd.rank())
    layers = [keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)]
    model = keras.Sequential(layers)
    for i, v in enumerate(model.trainable_variables):
        v.assign(hvd.broadcast(tf.convert_to_tensor(v), root_rank=0, name=f"init.{i}"))
    optimizer = keras.optimizers.SGD(0.05)
    for _ in range(args.epochs):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(model(features) - labels))
        grads = tape.gradient(loss, model.trainable_variables)
        grads = [hvd.allreduce(g, op=hvd.Average, name=f"grad.{i}") for i, g in enumerate(grads)]
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    digest = hashlib.sha256(b"".join(np.asarray(v).tobytes() for v in model.trainable_variables)).hexdigest()
    out = Path(os.environ["SM_OUTPUT_DATA_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank-{hvd.rank()}.json").write_text(json.dumps({
        "rank": hvd.rank(), "size": hvd.size(), "host": os.environ["SM_CURRENT_HOST"],
        "record_ids": ids.tolist(), "weights_sha256": digest, "epochs": args.epochs,
    }))
    if hvd.rank() == 0:
        Path(args.model_dir).mkdir(parents=True, exist_ok=True)
        model.save(Path(args.model_dir) / "model.keras")
    """
)


def write_job_tree(root: Path) -> None:
    hyperparameters = {
        "sagemaker_program": "train.py",
        "sagemaker_submit_directory": "/opt/ml/code",
        "sagemaker_mpi_enabled": True,
        "sagemaker_mpi_num_of_processes_per_host": 2,
        "epochs": 3,
    }
    # As SageMaker writes them: every hyperparameter value a JSON-encoded string.
    JobFiles(("algo-1",), hyperparameters, (Channel("train", content_type="text/csv"),)).write(root, "algo-1")
    data = root / "input" / "data" / "train"
    lines = [f"{i},{i % 3},{i % 5 / 5},{i % 7 / 7},{(i % 3) + (i % 5) / 5}" for i in range(RECORDS)]
    (data / "data.csv").write_text("\n".join(lines) + "\n")
    code = root / "code"
    (code / "train.py").write_text(TRAIN_SCRIPT)
    for folder in ("output", "checkpoints"):
        (root / folder).mkdir(exist_ok=True)


def test_single_host_mpi_job_succeeds_with_model_and_one_output_per_rank(
    docker_client, cpu_image, internal_network, tmp_path
):
    ml = tmp_path / "ml"
    write_job_tree(ml)
    result = run_in_image(
        docker_client,
        cpu_image,
        ["train"],
        timeout_s=JOB_DEADLINE_S,
        volumes={str(ml): {"bind": "/opt/ml", "mode": "rw"}},
        network=internal_network,
        hostname="algo-1",
    )
    failure = ml / "output" / "failure"
    assert result.exit_code == 0, (
        f"train exited {result.exit_code}; failure file: "
        f"{failure.read_text() if failure.exists() else '(none)'}\n{result.output}"
    )
    assert (ml / "output" / "success").exists()
    assert not failure.exists()
    assert (ml / "model" / "model.keras").stat().st_size > 0

    outputs = [json.loads((ml / "output" / "data" / f"rank-{rank}.json").read_text()) for rank in range(2)]
    assert [output["rank"] for output in outputs] == [0, 1]
    assert {output["size"] for output in outputs} == {2}
    assert {output["host"] for output in outputs} == {"algo-1"}
    assert {output["epochs"] for output in outputs} == {3}
    record_ids = [record for output in outputs for record in output["record_ids"]]
    assert sorted(record_ids) == list(range(RECORDS)), "every record read by exactly one rank"
    assert outputs[0]["weights_sha256"] == outputs[1]["weights_sha256"]


ORPHANS = 20
ORPHAN_SCRIPT = textwrap.dedent(
    f"""
    import json, os, sys, time
    from pathlib import Path

    def zombies():
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if fields[0] == "Z":
                    found.append(int(entry.name))
        return found

    # A careless daemon: double-forked, still holding the program's stdout and stderr, never exits.
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                time.sleep(3600)
        os._exit(0)
    os.wait()
    # Orphans that exit at once: each double fork leaves a grandchild whose parent is gone, so PID 1 must
    # reap it. Each says it is done through the pipe before exiting.
    read_end, write_end = os.pipe()
    for _ in range({ORPHANS}):
        if os.fork() == 0:
            if os.fork() == 0:
                os.close(read_end)
                os.write(write_end, b"x")
                os._exit(0)
            os._exit(0)
        os.wait()
    os.close(write_end)
    said = b""
    while chunk := os.read(read_end, 64):
        said += chunk
    deadline = time.monotonic() + 30
    while zombies() and time.monotonic() < deadline:
        time.sleep(0.1)  # reaping happens in PID 1, on its own time: observe it, bounded
    out = Path(os.environ["SM_OUTPUT_DATA_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "orphans.json").write_text(json.dumps({{"exited": len(said), "zombies": zombies()}}))
    print("program done", flush=True)
    """
)


def test_orphans_are_reaped_and_a_leftover_daemon_does_not_hold_the_job(docker_client, cpu_image, tmp_path):
    """PID 1 (tini) reaps what the program's double forks orphan, and the job ends when the program does,
    even though a daemon it left behind still runs and holds its output pipes."""
    ml = tmp_path / "ml"
    JobFiles(("algo-1",), {"sagemaker_program": "orphans.py"}).write(ml, "algo-1")
    (ml / "code" / "orphans.py").write_text(ORPHAN_SCRIPT)
    result = run_in_image(
        docker_client,
        cpu_image,
        ["train"],
        timeout_s=120,
        volumes={str(ml): {"bind": "/opt/ml", "mode": "rw"}},
        hostname="algo-1",
    )
    assert result.exit_code == 0, result.output
    assert (ml / "output" / "success").exists()
    assert json.loads((ml / "output" / "data" / "orphans.json").read_text()) == {
        "exited": ORPHANS,
        "zombies": [],
    }
