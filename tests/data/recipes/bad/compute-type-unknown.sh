#!/bin/bash
gcluster job submit --compute-type a3-megagpu-8g --topology 4x4x4 --name x \
  --command "python3 -m maxtext.trainers.pre_train.train maxtext/configs/base.yml model_name=llama3.1-8b steps=5"
