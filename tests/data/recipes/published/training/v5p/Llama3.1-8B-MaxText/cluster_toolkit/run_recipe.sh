#!/bin/bash
# v5p named as GKE's accelerator label spells it (written for these tests); the model
# settings come from variables a caller may override with KEY=VALUE arguments.
export CONTEXT_PARALLELISM=64
export PER_DEVICE_BATCH_SIZE=1
for ARGUMENT in "$@"; do
    IFS='=' read -r KEY VALUE <<< "$ARGUMENT"
    export "$KEY"="$VALUE"
done
gcluster job submit \
  --compute-type tpu-v5p \
  --topology 4x4x4 \
  --num-slices 1 \
  --image us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01 \
  --name l8b-v5p \
  --command "python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml \
    model_name=llama3.1-8b steps=8 per_device_batch_size=$PER_DEVICE_BATCH_SIZE max_target_length=65536 \
    ici_context_parallelism=$CONTEXT_PARALLELISM ici_fsdp_parallelism=1 dataset_type=synthetic"
