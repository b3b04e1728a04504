#!/bin/bash
xpk workload create --cluster c --workload w --device-type=tpu7x-4x4x8 --num-slices=1 \
  --command="echo hello && sleep 60"
