#!/bin/bash
# The Ironwood layout with a name built by command substitution and the trainer run from a
# MaxText checkout's root as src.maxtext... (written for these tests).
export WORKLOAD_NAME="$(printf "%.26s" "${USER//_/-}-deepseek3-671b-4096-fsdp")-$(date +%Y%m%d-%H%M)"
export SHORT=$(printf "%.8s" "deepseek3-671b-long")
MAXTEXT_ARGS="model_name=deepseek3-671b per_device_batch_size=4 max_target_length=4096 ici_fsdp_parallelism=-1 \
remat_policy=custom decoder_layer_input=offload megablox=True sparse_matmul=True fsdp_shard_on_exp=True wi_tile_fwd_buffer_count=2 steps=20 run_name=${WORKLOAD_NAME}"
xpk workload create --cluster=c --tpu-type=tpu7x-4x8x8 --num-slices=1 \
  --workload=$WORKLOAD_NAME --docker-image=us-docker.pkg.dev/p/images/maxtext:${SHORT} \
  --command="set -e && cd /app && python3 -m src.maxtext.trainers.pre_train.train maxtext/configs/base.yml ${MAXTEXT_ARGS}"
