#!/bin/bash
# The -gcs variant (written for these tests): real data from a bucket that gcluster mounts
# inline through GCS FUSE at /tmp/dataset; MaxText's Grain reads it from there.
GCLUSTER_BIN="${GCLUSTER_BIN:-gcluster}"
set -e
export CLUSTER_NAME="c"
export WORKLOAD_IMAGE="us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01"
export WORKLOAD_NAME="l8b-gcs"
export DATASET_BUCKET="my-data-bucket"
export DATASET_BUCKET_MOUNTED_PATH="/tmp/dataset"
MOUNT_OPTIONS="implicit-dirs,metadata-cache:ttl-secs:-1"

MAXTEXT_ARGS="\
model_name=llama3.1-8b \
per_device_batch_size=2 \
max_target_length=8192 \
tokenizer_path=assets/tokenizer_llama3.tiktoken \
tokenizer_type=tiktoken \
dataset_type=grain \
grain_file_type=arrayrecord \
grain_train_files=${DATASET_BUCKET_MOUNTED_PATH}/c4/en/3.0.1/*.array_record* \
grain_worker_count=2 \
enable_checkpointing=False \
steps=20"

"${GCLUSTER_BIN}" job submit \
  --cluster "$CLUSTER_NAME" \
  --compute-type tpu7x \
  --topology 4x4x4 \
  --num-slices 1 \
  --image "${WORKLOAD_IMAGE}" \
  --mount "gs://${DATASET_BUCKET};${DATASET_BUCKET_MOUNTED_PATH};ro;options=${MOUNT_OPTIONS}" \
  --name "${WORKLOAD_NAME}" \
  --command "python3 -u -m maxtext.trainers.pre_train.train maxtext/configs/base.yml ${MAXTEXT_ARGS} 2>&1 | tee train.log"
