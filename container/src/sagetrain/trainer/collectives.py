"""The few collectives the training loop needs, for one process, for Horovod, or for the TF_CONFIG
engine's MultiWorkerMirroredStrategy; which one a rank gets is the engine registry's choice
(sagetrain/engines.py), and so is the refusal of the others.

The Horovod adapter uses only ``horovod.tensorflow`` primitives on plain tensors (allreduce,
grouped_allreduce, broadcast, allgather_object) — not DistributedOptimizer or the Keras callbacks — so it
averages gradients correctly with Keras 3 and tf-keras whether or not Horovod's Keras layer is patched.
"""

from __future__ import annotations

import io
import logging
import pickle
import signal
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import tensorflow as tf

from sagetrain import contracts
from sagetrain.contracts import RankPlace
from sagetrain.engines import Engine, load
from sagetrain.errors import PlatformError, UserError


class Collectives(Protocol):
    """Made before any other TensorFlow op (an engine may pin the GPU or configure TensorFlow's runtime).
    ``connect`` is called once this rank has prepared, before the first collective: Horovod connects
    there, as its idle loop polls the other ranks from then on; MultiWorkerMirroredStrategy connected
    when it was made."""

    ranks: RankPlace

    def connect(self) -> None: ...

    def allgather_object(self, value: object) -> list[Any]: ...

    def broadcast_object(self, value: object) -> Any: ...

    def broadcast_variables(self, variables: Sequence[Any]) -> None: ...

    def mean_over_ranks(self, values: np.ndarray) -> np.ndarray: ...

    def reduce_step(
        self, gradients: list[tf.Tensor], weight: tf.Tensor, stop_flag: tf.Tensor
    ) -> tuple[list[tf.Tensor], tf.Tensor]:
        """A training step's one collective (one per dtype): each gradient averaged over ranks weighted by
        ``weight``, this rank's batch length, and ``stop_flag`` summed (how many ranks asked to stop).
        Weighted, every record of the step weighs the same, so for a mean-reduced loss the step equals
        one process on the ranks' concatenated batches, whatever each rank's batch size."""
        ...


def sum_per_dtype(
    tensors: list[tf.Tensor], sum_group: Callable[[list[tf.Tensor]], Sequence[tf.Tensor]]
) -> list[tf.Tensor]:
    """Each of ``tensors`` summed over ranks, in their order, by ``sum_group`` (an engine's one collective
    over tensors of one dtype) called once per dtype: a collective reduces tensors of one dtype."""
    summed = list(tensors)
    for dtype in dict.fromkeys(tensor.dtype for tensor in tensors):
        indices = [index for index, tensor in enumerate(tensors) if tensor.dtype == dtype]
        for index, value in zip(indices, sum_group([tensors[index] for index in indices]), strict=True):
            summed[index] = value
    return summed


def weighted_step(
    sum_by_dtype: Callable[[list[tf.Tensor]], list[tf.Tensor]],
    gradients: list[tf.Tensor],
    weight: tf.Tensor,
    stop_flag: tf.Tensor,
) -> tuple[list[tf.Tensor], tf.Tensor]:
    """``reduce_step`` over an engine's ``sum_by_dtype`` (each tensor summed over ranks, one collective
    per dtype): sum(weight * gradient) / sum(weight), with the weights and the stop flag in the same
    collectives as the gradients, so a step costs no extra round trip."""
    dtypes = list(dict.fromkeys(gradient.dtype for gradient in gradients))
    weights = {dtype: tf.cast(weight, dtype) for dtype in dtypes}
    summed = sum_by_dtype(
        [gradient * weights[gradient.dtype] for gradient in gradients]
        + [weights[dtype] for dtype in dtypes]
        + [stop_flag]
    )
    total_weight = dict(zip(dtypes, summed[len(gradients) : -1], strict=True))
    averaged = [
        gradient_sum / total_weight[gradient.dtype]
        for gradient, gradient_sum in zip(gradients, summed, strict=False)
    ]
    return averaged, summed[-1]


class SingleProcess:
    """One process: every collective is the identity."""

    def __init__(self, ranks: RankPlace) -> None:
        if ranks.size != 1:
            raise PlatformError(
                f"{contracts.ENGINE_VAR}={Engine.SINGLE.value} but {contracts.SIZE_VAR}={ranks.size}; "
                "expected 1"
            )
        self.ranks = ranks

    def connect(self) -> None:
        return None

    def allgather_object(self, value: object) -> list[Any]:
        return [value]

    def broadcast_object(self, value: object) -> Any:
        return value

    def broadcast_variables(self, variables: Sequence[Any]) -> None:
        return None

    def mean_over_ranks(self, values: np.ndarray) -> np.ndarray:
        return values

    def reduce_step(
        self, gradients: list[tf.Tensor], weight: tf.Tensor, stop_flag: tf.Tensor
    ) -> tuple[list[tf.Tensor], tf.Tensor]:
        return gradients, stop_flag


# Dtypes Horovod's broadcast accepts; others (Keras 3's uint32 seed state) travel as int64.
_BROADCAST_DTYPES = (
    tf.uint8,
    tf.int8,
    tf.uint16,
    tf.int16,
    tf.int32,
    tf.int64,
    tf.float16,
    tf.float32,
    tf.float64,
    tf.bool,
)


class HorovodCollectives:
    def __init__(self, ranks: RankPlace) -> None:
        try:
            import horovod.tensorflow as hvd
        except ImportError as error:
            raise PlatformError(
                f"{contracts.ENGINE_VAR}={Engine.HOROVOD.value} but horovod.tensorflow does not import: "
                f"{error}"
            ) from None
        self._hvd = hvd
        self.ranks = ranks
        _pin_gpu(ranks.local_rank)

    def connect(self) -> None:
        # Not at construction: from init on, Horovod's background loop meets the other ranks' loops in a
        # collective every cycle, even when idle, and polls while it waits; on shared cores that took the
        # CPU the ranks needed to list and count their channels (up to twice as long).
        hvd = self._hvd
        hvd.init()
        if (hvd.rank(), hvd.size()) != (self.ranks.rank, self.ranks.size):
            raise PlatformError(
                f"Horovod says rank {hvd.rank()} of {hvd.size()} but {contracts.RANK_VAR}/"
                f"{contracts.SIZE_VAR} say {self.ranks.rank} of {self.ranks.size}; the rank launcher and "
                "mpirun disagree"
            )

    # Horovod's object collectives unpickle whatever arrives (cloudpickle); they carry our bytes, which
    # only the plain-data loader opens, as on the other engines.
    def allgather_object(self, value: object) -> list[Any]:
        return [_plain_loads(data) for data in self._hvd.allgather_object(_plain_dumps(value))]

    def broadcast_object(self, value: object) -> Any:
        return _plain_loads(self._hvd.broadcast_object(_plain_dumps(value), root_rank=0))

    def broadcast_variables(self, variables: Sequence[Any]) -> None:
        for variable in variables:
            value = tf.convert_to_tensor(variable)
            if value.dtype in _BROADCAST_DTYPES:
                variable.assign(self._hvd.broadcast(value, root_rank=0))
            else:
                wide = self._hvd.broadcast(tf.cast(value, tf.int64), root_rank=0)
                variable.assign(tf.cast(wide, value.dtype))

    def mean_over_ranks(self, values: np.ndarray) -> np.ndarray:
        return self._hvd.allreduce(tf.constant(values, tf.float64), op=self._hvd.Average).numpy()

    def _sum(self, tensors: list[tf.Tensor]) -> list[tf.Tensor]:
        """Each tensor summed over ranks, one grouped allreduce per dtype."""
        if self.ranks.size == 1:
            # Nothing to add up; Horovod's collective would still wait for its background thread's next
            # cycle (the trainer's profile measured ~30 ms a step beside a busy input pipeline).
            return list(tensors)
        return sum_per_dtype(tensors, lambda group: self._hvd.grouped_allreduce(group, op=self._hvd.Sum))

    def reduce_step(
        self, gradients: list[tf.Tensor], weight: tf.Tensor, stop_flag: tf.Tensor
    ) -> tuple[list[tf.Tensor], tf.Tensor]:
        return weighted_step(self._sum, gradients, weight, stop_flag)


class MultiWorkerCollectives:
    """MultiWorkerMirroredStrategy's collective ops (TF_CONFIG, one process per host), one replica per
    host: the training step stays the trainer's own, and each all-reduce runs in the strategy's replica
    context. With several GPUs on a host that would leave all but one idle, so it is refused there."""

    def __init__(self, ranks: RankPlace) -> None:
        gpus = len(tf.config.list_physical_devices("GPU"))
        engine = Engine.MULTI_WORKER_MIRRORED
        if gpus > 1:
            raise UserError(
                f"the managed trainer on the {engine.value} engine trains one replica per host, and this "
                f"host has {gpus} GPUs; remove {engine.entry.enabled_by} to train on every GPU with Horovod "
                "(the default)"
            )
        own_sigterm = signal.getsignal(signal.SIGTERM)
        # Before any other TensorFlow op: the strategy configures the collective runtime at start-up.
        self._strategy = tf.distribute.MultiWorkerMirroredStrategy()
        # Its coordination service takes SIGTERM for a preemption notifier of its own ("SIGTERM caught"),
        # so the trainer's handler (every rank stops at the same step, rank 0 checkpoints) would never
        # run: it gets it back.
        if own_sigterm is not None:
            signal.signal(signal.SIGTERM, own_sigterm)
        task, replicas = self._strategy.cluster_resolver.task_id, self._strategy.num_replicas_in_sync
        if (task, replicas) != (ranks.rank, ranks.size):
            raise PlatformError(
                f"TF_CONFIG makes this worker {task} of {replicas} replicas but {contracts.RANK_VAR}/"
                f"{contracts.SIZE_VAR} say rank {ranks.rank} of {ranks.size}; the launcher and TF_CONFIG "
                "disagree"
            )
        self._device = self._strategy.extended.worker_devices[0]
        self.ranks = ranks
        # The eager collectives (start-up agreement, broadcast, per-epoch metrics) are a handful per epoch;
        # TensorFlow's warning about each one's overhead would bury the epoch lines.
        tf_logger = tf.get_logger()
        if not any(isinstance(existing, _EagerOverheadFilter) for existing in tf_logger.filters):
            tf_logger.addFilter(_EagerOverheadFilter())

    def connect(self) -> None:
        return None  # connected at construction: the strategy must exist before any other TensorFlow op

    def _sum(self, tensors: list[tf.Tensor]) -> list[tf.Tensor]:
        """Each tensor summed over the hosts, one collective per dtype."""

        def replica_sum(group: list[tf.Tensor]) -> list[tf.Tensor]:
            # A tensor traced in the trainer's step has no device, and the all-reduce sends to the devices
            # of its inputs: place them on this worker's.
            with tf.device(self._device):
                placed = [tf.identity(tensor) for tensor in group]
            context = tf.distribute.get_replica_context()
            return list(context.all_reduce(tf.distribute.ReduceOp.SUM, placed))

        def sum_group(group: list[tf.Tensor]) -> Sequence[tf.Tensor]:
            result = self._strategy.run(replica_sum, args=(group,))
            return self._strategy.experimental_local_results(result)[0]

        return sum_per_dtype(tensors, sum_group)

    def allgather_object(self, value: object) -> list[Any]:
        payload = np.frombuffer(_plain_dumps(value), dtype=np.uint8)
        lengths = np.zeros(self.ranks.size, dtype=np.int64)
        lengths[self.ranks.rank] = payload.size
        (all_lengths,) = self._sum([tf.constant(lengths)])
        sizes = all_lengths.numpy()
        table = np.zeros((self.ranks.size, int(sizes.max())), dtype=np.int32)
        table[self.ranks.rank, : payload.size] = payload
        (all_rows,) = self._sum([tf.constant(table)])
        rows = all_rows.numpy().astype(np.uint8)
        return [_plain_loads(rows[rank, : sizes[rank]].tobytes()) for rank in range(self.ranks.size)]

    def broadcast_object(self, value: object) -> Any:
        return self.allgather_object(value if self.ranks.rank == 0 else None)[0]

    def broadcast_variables(self, variables: Sequence[Any]) -> None:
        values = [tf.convert_to_tensor(variable) for variable in variables]
        # Integers and booleans (Keras 3's uint32 seed state) travel as int64; rank 0's value plus zeros
        # is rank 0's value exactly.
        wire = [value if value.dtype.is_floating else tf.cast(value, tf.int64) for value in values]
        mine = wire if self.ranks.rank == 0 else [tf.zeros_like(value) for value in wire]
        for variable, value, summed in zip(variables, values, self._sum(mine), strict=True):
            variable.assign(tf.cast(summed, value.dtype))

    def mean_over_ranks(self, values: np.ndarray) -> np.ndarray:
        (summed,) = self._sum([tf.constant(values, tf.float64)])
        return summed.numpy() / self.ranks.size

    def reduce_step(
        self, gradients: list[tf.Tensor], weight: tf.Tensor, stop_flag: tf.Tensor
    ) -> tuple[list[tf.Tensor], tf.Tensor]:
        return weighted_step(self._sum, gradients, weight, stop_flag)


class _EagerOverheadFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "eagerly has significant overhead" not in record.getMessage()


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain data only (None, numbers, strings, bytes, lists, tuples, dicts, sets: what the
    trainer's object collectives carry, agreement.py and run.py): a peer's bytes never name a class or a
    callable to run."""

    def find_class(self, module: str, name: str) -> Any:
        raise PlatformError(
            f"a peer sent an object of class {module}.{name}; the trainer sends plain data only"
        )


def _plain_dumps(value: object) -> bytes:
    return pickle.dumps(value)


def _plain_loads(data: bytes) -> Any:
    return _PlainUnpickler(io.BytesIO(data)).load()


def _pin_gpu(local_rank: int) -> None:
    """One GPU per rank (the plan starts one rank per GPU); memory growth so ranks never grab all of it."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return
    mine = gpus[local_rank % len(gpus)]
    tf.config.experimental.set_memory_growth(mine, True)
    tf.config.set_visible_devices(mine, "GPU")


def make_collectives(engine: Engine, ranks: RankPlace) -> Collectives:
    """This rank's collectives on ``engine``, as the registry names them; the registry's refusal when
    the managed trainer does not run on it."""
    entry = engine.entry
    if entry.trainer is None:
        raise UserError(entry.trainer_refusal)
    collectives: Collectives = load(entry.trainer)(ranks)
    return collectives
