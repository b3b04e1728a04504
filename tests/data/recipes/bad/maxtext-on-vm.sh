#!/bin/bash
# MaxText run directly on a TPU VM, with no launcher (written for these tests).
export LIBTPU_INIT_ARGS="--xla_tpu_scoped_vmem_limit_kib=81920"
python3 MaxText/train.py MaxText/configs/base.yml model_name=mixtral-8x7b steps=10 per_device_batch_size=8
