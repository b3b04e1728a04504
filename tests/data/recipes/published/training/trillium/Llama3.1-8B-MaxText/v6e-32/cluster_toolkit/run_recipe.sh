#!/bin/bash
# Trillium's Cluster Toolkit layout (written for these tests): a machine type plus topology,
# the command wrapped in bash -c, and one training command per MaxText layout the image may have.
GCLUSTER_BIN="${GCLUSTER_BIN:-gcluster}"
set -e
export WORKLOAD_IMAGE="${WORKLOAD_IMAGE:-}"
export WORKLOAD_NAME="l8b-v6e-32"
XLA_FLAGS="--xla_tpu_scoped_vmem_limit_kib=98304 --xla_tpu_enable_async_collective_fusion=true"
MAXTEXT_ARGS="model_name=llama3.1-8b per_device_batch_size=3 max_target_length=8192 ici_fsdp_parallelism=-1 remat_policy=custom decoder_layer_input=offload attention=flash dataset_type=synthetic enable_checkpointing=False steps=20"

"${GCLUSTER_BIN}" job submit \
  --queue multislice-queue \
  --compute-type ct6e-standard-4t \
  --topology 4x8 \
  --num-slices 1 \
  --image "${WORKLOAD_IMAGE}" \
  --name "${WORKLOAD_NAME}" \
  --command "bash -c 'set -e && \\
export LIBTPU_INIT_ARGS=\"${XLA_FLAGS}\" && \\
export JAX_PLATFORMS=\"tpu,cpu\" && \\
set +e; \\
if [ -f MaxText/train.py ]; then \\
  python3 -u MaxText/train.py MaxText/configs/base.yml ${MAXTEXT_ARGS} 2>&1 | tee train.log; \\
else \\
  python3 -u -m maxtext.trainers.pre_train.train maxtext/configs/base.yml ${MAXTEXT_ARGS} 2>&1 | tee train.log; \\
fi; \\
exit \${PIPESTATUS[0]}'"
