#!/bin/bash
# A chip-count shorthand with no --topology (written for these tests): gcluster takes
# v6e-256 as 256 chips, its default 16x16 slice.
MAXTEXT_ARGS="model_name=mixtral-8x7b per_device_batch_size=4 max_target_length=4096 ici_fsdp_parallelism=-1 megablox=True sparse_matmul=True dataset_type=synthetic steps=20"
gcluster job submit \
  --compute-type v6e-256 \
  --num-slices 1 \
  --image us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01 \
  --name mixtral \
  --command "python3 -m MaxText.train MaxText/configs/base.yml ${MAXTEXT_ARGS}"
