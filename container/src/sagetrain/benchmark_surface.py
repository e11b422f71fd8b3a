"""What the benchmarks (benchmarks/: their harness on the test machine, their payloads inside the image)
may import of this package, declared in one place. The rest of sagetrain is its own to change; a name
listed here changes together with the benchmarks that use it. tests/unit/test_benchmark_surface.py
checks every import under benchmarks/ against this table. Nothing in the package imports this module.
"""

from __future__ import annotations

BENCHMARK_SURFACE: dict[str, frozenset[str]] = {
    # Every wait of the harness (figure 11's 32-host runs, the channel figures' jobs).
    "sagetrain.deadline": frozenset({"Deadline"}),
    # Figure 12: the master's coordinator under hundreds of joining hosts, through its public front.
    "sagetrain.launch.coordinator": frozenset(
        {
            "EventQueue",
            "Hello",
            "HostChanged",
            "HostState",
            "JobHosts",
            "MasterCoordinator",
            "MasterEnded",
            "WorkerCoordinator",
        }
    ),
    "sagetrain.config.job_secret": frozenset({"Membership"}),
    "sagetrain.report.verdict": frozenset({"SUCCESS"}),
    # Figure 16: masking at SageMaker's limits, and the former method from the same forms.
    "sagetrain.redact": frozenset({"MASK", "Redactor", "forms"}),
    # Figures 13 and 14: the input-path readers stand for ranks, placed as the launcher places one, with
    # a run directory to share their listing in as the launcher gives one; the model module's probe names
    # the trainer's rank by mpirun's variable.
    "sagetrain.contracts": frozenset({"MPI_RANK_VAR", "RUN_DIR_VAR", "RankPlace", "RunDir"}),
    # Figure 6: the managed trainer's input path alone (listing, sharding, the seeded epoch batches); and
    # the trainer's profile (payload/trainer_profile.py): each stage of a rank's epoch on its own; and
    # figures 13 and 14's input-path readers (payload/input_path_read.py); and the lab's parts of a
    # training epoch (payload/epoch_parts.py).
    "sagetrain.trainer.hyperparameters": frozenset({"settings_from"}),
    "sagetrain.trainer.job": frozenset({"TrainerJob", "trainer_job"}),
    "sagetrain.trainer.preparation": frozenset({"TRAIN", "Prepared", "prepare"}),
    # ... and the lab's listing phases (payload/listing_phases.py): open_channel's and rank_records' steps
    # one by one, and the first batch as the trainer reads it.
    "sagetrain.config.channels": frozenset({"Channel"}),
    "sagetrain.trainer.contract": frozenset({"load_module"}),
    "sagetrain.trainer.readers": frozenset(
        {"EpochBatches", "epoch_batches", "epoch_seed", "rank_records", "read_batches"}
    ),
    "sagetrain.trainer.sharding": frozenset({"batch_sizes", "plan_shard", "steps_per_epoch"}),
    "sagetrain.trainer.channels": frozenset(
        {"Channel", "collector_paused", "format_of", "list_data_files", "open_channel", "sharding_units"}
    ),
    "sagetrain.trainer.tfrecord_frames": frozenset({"count_files"}),
    "sagetrain.trainer.collectives": frozenset({"make_collectives"}),
    "sagetrain.trainer.loop": frozenset(
        {
            "local_metrics",
            "make_train_step",
            "mean_metrics",
            "model_variables",
            "optimizer_variables",
            "reset_metrics",
            "values_of",
        }
    ),
    "sagetrain.trainer.checkpoints": frozenset({"CheckpointMeta", "Progress", "write_checkpoint"}),
    "sagetrain.trainer.export": frozenset({"export_model"}),
}
