#!/bin/bash
# The -lustre variant's xpk script (written for these tests): the volume is an xpk storage
# object attached beforehand, named by --storage; its mount path lives with the object.
export BASE_OUTPUT_DIR="/mnt/lustre/checkpoints"
export DATASET_DIR="/mnt/lustre/datasets"
export LUSTRE_VOLUME_NAME="lustre-volume"
MAXTEXT_ARGS="model_name=llama3.1-8b per_device_batch_size=2 max_target_length=8192 dataset_type=grain grain_file_type=arrayrecord grain_train_files=${DATASET_DIR}/c4/en/3.0.1/*.array_record* tokenizer_path=assets/tokenizer_llama3.tiktoken tokenizer_type=tiktoken steps=20 base_output_directory=${BASE_OUTPUT_DIR}"
xpk workload create \
  --cluster=c \
  --device-type=tpu7x-4x4x4 \
  --num-slices=1 \
  --storage=$LUSTRE_VOLUME_NAME \
  --docker-image=us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01 \
  --workload=l8b-lustre-xpk \
  --command="python3 -m maxtext.trainers.pre_train.train maxtext/configs/base.yml ${MAXTEXT_ARGS}"
