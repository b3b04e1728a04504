#!/bin/bash
# A helper the recipe copies into the image and runs there (written for these tests): no launch.
export LIBTPU_INIT_ARGS="--xla_tpu_scoped_vmem_limit_kib=65472"
python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml model_name=llama3.1-8b steps=8
