#!/bin/bash
gcluster job submit --compute-type tpu7x --topology 4x4x4 --name x --mount "gs://my-bucket" \
  --command "python3 -m maxtext.trainers.pre_train.train maxtext/configs/base.yml model_name=llama3.1-8b steps=5"
