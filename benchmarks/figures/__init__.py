"""One module per figure of the benchmark table; each has NUMBER, TITLE and ``samples(ctx) -> list[Row]``."""

from types import ModuleType

from figures import (
    accept_cost,
    allreduce,
    channel_read,
    coordinator_cost,
    coordinator_crowd,
    entry_overhead,
    hosts,
    image_sizes,
    large_file_job,
    large_files,
    masking,
    mwms_trainer_vs_fit,
    mwms_vs_horovod,
    new_user_job,
    rendezvous,
    small_files,
    synthetic,
    teardown,
    trainer_vs_fit,
)

FIGURES: dict[int, ModuleType] = {
    module.NUMBER: module
    for module in (
        entry_overhead,
        teardown,
        rendezvous,
        allreduce,
        trainer_vs_fit,
        channel_read,
        image_sizes,
        synthetic,
        mwms_vs_horovod,
        mwms_trainer_vs_fit,
        hosts,
        coordinator_cost,
        small_files,
        large_files,
        coordinator_crowd,
        masking,
        accept_cost,
        new_user_job,
        large_file_job,
    )
}
