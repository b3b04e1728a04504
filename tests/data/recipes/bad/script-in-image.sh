#!/bin/bash
# The archived PyTorch/XPK layout: the training is a script baked into the image (written for these tests).
xpk workload create --cluster c --workload w --tpu-type=v6e-256 --num-slices=1 --command="bash /app/train.sh"
