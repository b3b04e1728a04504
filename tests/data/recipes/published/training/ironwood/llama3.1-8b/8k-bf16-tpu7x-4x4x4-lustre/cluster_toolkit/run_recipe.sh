#!/bin/bash
# The -lustre variant (written for these tests): one Lustre volume, mounted at /mnt/lustre,
# holds both the dataset and the checkpoints.
GCLUSTER_BIN="${GCLUSTER_BIN:-gcluster}"
set -e
export CLUSTER_NAME="c"
export WORKLOAD_IMAGE="us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01"
export WORKLOAD_NAME="l8b-lustre"
export LUSTRE_VOLUME_NAME="lustre-volume"
export LUSTRE_MOUNT_PATH="/mnt/lustre"
export BASE_OUTPUT_DIR="${LUSTRE_MOUNT_PATH}/checkpoints"
export DATASET_DIR="${LUSTRE_MOUNT_PATH}/datasets"

MAXTEXT_ARGS="\
model_name=llama3.1-8b \
per_device_batch_size=2 \
max_target_length=8192 \
tokenizer_path=assets/tokenizer_llama3.tiktoken \
tokenizer_type=tiktoken \
dataset_type=grain \
grain_file_type=arrayrecord \
grain_train_files=${DATASET_DIR}/c4/en/3.0.1/*.array_record* \
enable_checkpointing=True \
checkpoint_period=10 \
steps=20 \
base_output_directory=${BASE_OUTPUT_DIR} \
run_name=${WORKLOAD_NAME}"

"${GCLUSTER_BIN}" job submit \
  --cluster "$CLUSTER_NAME" \
  --compute-type tpu7x \
  --topology 4x4x4 \
  --num-slices 1 \
  --image "${WORKLOAD_IMAGE}" \
  --mount "${LUSTRE_VOLUME_NAME};${LUSTRE_MOUNT_PATH};rw" \
  --name "${WORKLOAD_NAME}" \
  --command "set -e; python3 -u -m maxtext.trainers.pre_train.train maxtext/configs/base.yml ${MAXTEXT_ARGS} 2>&1 | tee train.log; \
mkdir -p ${BASE_OUTPUT_DIR}/${WORKLOAD_NAME}/logs && cp train.log ${BASE_OUTPUT_DIR}/${WORKLOAD_NAME}/logs/"
