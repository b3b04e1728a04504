#!/bin/bash
gcluster job submit --compute-type tpu7x-64 --num-slices 1 --name x \
  --command "python3 -m maxtext.trainers.pre_train.train maxtext/configs/base.yml model_name=llama3.1-8b steps=5"
