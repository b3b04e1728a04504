#!/bin/bash
# Two tpu7x 2x4x4 slices, int8 training, data parallel across slices
# (written for these tests in the tpu-recipes layout).
export CLUSTER_NAME="ironwood-east"
export WORKLOAD_IMAGE="maxtext-base"
export WORKLOAD_NAME="l31-8b-int8-2s"

XLA_FLAGS="--xla_tpu_enable_async_collective_fusion=true --xla_enable_async_all_gather=true"
MAXTEXT_ARGS="model_name=llama3.1-8b per_device_batch_size=1 ici_fsdp_parallelism=-1 dcn_data_parallelism=2 \
quantization=int8 dataset_type=synthetic enable_checkpointing=False steps=20 output_dir=/tmp/out"

xpk workload create --cluster $CLUSTER_NAME --workload $WORKLOAD_NAME \
  --tpu-type=tpu7x-2x4x4 --num-slices=2 --docker-image=$WORKLOAD_IMAGE \
  --command "export LIBTPU_INIT_ARGS='$XLA_FLAGS' && cd /deps && \
EMIT_MEGASCALE_METRICS=true python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml $MAXTEXT_ARGS"
