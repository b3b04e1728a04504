#!/bin/bash
# MaxText pre-training through Pathways (written for these tests).
xpk workload create-pathways --cluster=c --workload=pw --tpu-type=tpu7x-4x4x4 \
  --command="python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml model_name=llama3.1-8b steps=5"
