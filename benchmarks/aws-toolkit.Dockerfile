# Benchmark-only comparison image: our image plus AWS's `sagemaker-tensorflow-training` toolkit as the
# training module, started by sagemaker-training's own `train` — what a user of AWS's TF images runs.
# Built by benchmarks/run.py (context: container/, for the pins and the CA helper); never published.
#
#   DOCKER_BUILDKIT=1 /usr/bin/docker build --network host -f benchmarks/aws-toolkit.Dockerfile \
#     --build-arg BASE_IMAGE=sagemaker-tf-horovod:cpu \
#     --secret id=extra_ca_certs,src=/etc/ssl/certs/ca-certificates.crt \
#     -t sagemaker-tf-horovod:cpu-awstoolkit container/

ARG BASE_IMAGE=sagemaker-tf-horovod:cpu
FROM ${BASE_IMAGE}

# --no-deps: the toolkit pins sagemaker-training <= 4.8.3, whose protobuf 3.20 / numpy 1.23 would break
# TensorFlow 2.21; the image's sagemaker-training 5.1.4 serves it (checked: its MPI and script paths run).
RUN --mount=type=secret,id=extra_ca_certs,required=false \
    --mount=type=tmpfs,target=/run/extra-ca \
    --mount=type=bind,source=pins/python.txt,target=/run/build/python.txt \
    --mount=type=bind,source=build-steps/with-extra-ca,target=/run/build/with-extra-ca \
    /run/build/with-extra-ca pip install --no-cache-dir --no-deps -c /run/build/python.txt \
      sagemaker-tensorflow-training

# AWS's images bake sshd host keys and one root key pair shared by every container, which its MPI path
# (sagemaker_training.mpi) expects: it starts `sshd -D` with the default config and logs in as root
# without a password. Acceptable ONLY here: this image is never pushed or published; our image makes
# per-job keys at start instead.
RUN ssh-keygen -A \
 && mkdir -p /run/sshd /root/.ssh \
 && ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519 \
 && cp /root/.ssh/id_ed25519.pub /root/.ssh/authorized_keys \
 && printf 'Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n' > /root/.ssh/config \
 && chmod 600 /root/.ssh/authorized_keys /root/.ssh/config \
 && sed -i 's/^session\s*required\s*pam_loginuid.so/session optional pam_loginuid.so/' /etc/pam.d/sshd

LABEL sagetrain.benchmark="aws-toolkit comparison image; never publish"
ENV SAGEMAKER_TRAINING_MODULE=sagemaker_tensorflow_container.training:main
ENTRYPOINT ["/opt/venv/bin/train"]
CMD []
