#!/bin/bash
# A diffusion training script in the xpk layout (written for these tests).
xpk workload create --cluster c --workload w --device-type=tpu7x-4x4x4 \
  --command="set -e && HF_HUB_CACHE=/dev/shm python3 -m src.maxdiffusion.train_wan src/maxdiffusion/configs/base_wan_14b.yml run_name=x"
