#!/bin/bash
# MaxText reinforcement learning on Pathways (written for these tests).
MAXTEXT_COMMAND="python3 src/maxtext/trainers/post_train/rl/train_rl.py src/maxtext/configs/post_train/rl.yml model_name=qwen3-30b-a3b"
xpk workload create-pathways --cluster=c --workload=rl --tpu-type=tpu7x-4x4x4 --command="${MAXTEXT_COMMAND}"
