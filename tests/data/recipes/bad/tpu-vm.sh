#!/bin/bash
# Runs on TPU VMs over ssh (written for these tests).
gcloud compute tpus tpu-vm scp train.sh env.sh "$TPU_NAME:~" --worker=all --zone=$ZONE
gcloud compute tpus tpu-vm ssh $TPU_NAME --zone=$ZONE --worker=all --command="bash train.sh"
