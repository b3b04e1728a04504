#!/bin/bash
MAXTEXT_ARGS="model_name=llama3.1-8b steps=10"
python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml ${MAXTEXT_ARGS}
