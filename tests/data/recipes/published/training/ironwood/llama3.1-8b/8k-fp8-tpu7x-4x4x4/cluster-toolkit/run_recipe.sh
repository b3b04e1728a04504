#!/bin/bash
# The cluster-toolkit/ spelling of the layout (written for these tests), naming the slice by a
# chip-count shorthand beside its topology.
MAXTEXT_ARGS="model_name=llama3.1-8b per_device_batch_size=2 max_target_length=8192 quantization=fp8_full use_qwix_quantization=True dataset_type=synthetic steps=20"
gcluster job submit \
  --compute-type="tpu7x-64" \
  --topology="4x4x4" \
  --num-slices=1 \
  --image="us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01" \
  --name="l8b-fp8" \
  --command="python3 -m maxtext.trainers.pre_train.train maxtext/configs/base.yml ${MAXTEXT_ARGS}"
