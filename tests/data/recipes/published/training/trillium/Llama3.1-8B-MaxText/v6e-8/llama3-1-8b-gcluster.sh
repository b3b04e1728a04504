#!/bin/bash
# A flat script (written for these tests): the container's script is a here-document read into
# a variable, the gcluster binary is a path the script computes, and the cluster flags come
# before `job submit`. The image's name mentions an inference server; it still trains MaxText.
# Its training is the published v6e-8 recipe's (llama3-1-8B-1xv6e-8-gcluster.sh), which keeps
# the layer input and the attention projections in host memory to fit batch 3 at 8192 tokens.
set -e
CLUSTER_NAME=${CLUSTER_NAME:-"trillium-8"}
IMAGE_NAME=${IMAGE_NAME:-"us-docker.pkg.dev/my-project/jetstream-maxtext/base:2026-10-01"}
RUN_NAME=${RUN_NAME:-"l8b-$(date +%Y%m%d)"}

read -r -d '' COMMAND_CONTENT << 'EOF_CMD' || true
set -e
export LIBTPU_INIT_ARGS="--xla_tpu_scoped_vmem_limit_kib=98304"
TRAIN_CMD="python3 -m maxtext.trainers.pre_train.train maxtext/configs/base.yml"
if ! python3 -c "import maxtext" &>/dev/null; then
    TRAIN_CMD="python3 -m MaxText.train MaxText/configs/base.yml"
fi
$TRAIN_CMD \
    model_name="llama3.1-8b" \
    run_name="${RUN_NAME}" \
    per_device_batch_size=3 \
    max_target_length=8192 \
    remat_policy="custom" \
    decoder_layer_input="offload" \
    out_proj="offload" \
    query_proj="offload" \
    key_proj="offload" \
    value_proj="offload" \
    dataset_type="synthetic" \
    steps=30
EOF_CMD

GCLUSTER="gcluster"
for candidate in "./gcluster" "${HOME}/cluster-toolkit/gcluster"; do
  if [ -f "$candidate" ]; then
    GCLUSTER="$(cd "$(dirname "$candidate")" && pwd)/$(basename "$candidate")"
    break
  fi
done

$GCLUSTER --cluster "$CLUSTER_NAME" --location "us-east5-b" job submit \
    --name "l8b-v6e-8" \
    --image "$IMAGE_NAME" \
    --command "export RUN_NAME='$RUN_NAME' && $COMMAND_CONTENT" \
    --compute-type "v6e-4" \
    --topology "2x4"
