#!/bin/bash
# The same fp8 run as ../llama3.1-8b-fp8-tpu7x-4x4x8, in the layout of tpu-recipes'
# cluster_toolkit/ scripts (Cluster Toolkit's `gcluster job submit`; written for these tests).
GCLUSTER_BIN="${GCLUSTER_BIN:-gcluster}"
if ! command -v "${GCLUSTER_BIN}" &> /dev/null; then
    echo "install Cluster Toolkit first"
    exit 1
fi
set -e
set -o pipefail

export CLUSTER_NAME="ironwood-east"
export ZONE="us-east5-b"
export BASE_OUTPUT_DIR="gs://my-bucket/runs"
export WORKLOAD_IMAGE="us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01"
export WORKLOAD_NAME="${WORKLOAD_NAME:-$(printf "%.11s" "${USER}")-l31-fp8-$(date +%H%M)}"
export ARTIFACT_DIR="${ARTIFACT_DIR:-${BASE_OUTPUT_DIR}/${WORKLOAD_NAME}}"

XLA_FLAGS=" \
  --xla_tpu_scoped_vmem_limit_kib=65536 \
  --xla_tpu_enable_async_collective_fusion=true \
  --xla_tpu_enable_async_collective_fusion_fuse_all_gather=true \
  --xla_enable_async_all_gather=true \
  --xla_tpu_overlap_compute_collective_tc=true "

MAXTEXT_ARGS="\
model_name=llama3.1-8b \
per_device_batch_size=2 \
max_target_length=8192 \
ici_fsdp_parallelism=-1 \
dcn_data_parallelism=-1 \
remat_policy=full \
attention=flash \
dataset_type=synthetic \
opt_type=adamw \
use_qwix_quantization=True \
quantization=fp8_full \
weight_quantization_calibration_method='fixed,-224,224' \
act_quantization_calibration_method='fixed,-224,224' \
enable_checkpointing=False \
profiler=xplane \
skip_first_n_steps_for_profiler=5 \
profiler_steps=3 \
steps=40 \
base_output_directory=${BASE_OUTPUT_DIR} \
run_name=${WORKLOAD_NAME}"

echo "submitting $WORKLOAD_NAME"
"${GCLUSTER_BIN}" job submit \
  --skip-prereqs \
  --queue multislice-queue \
  --cluster "$CLUSTER_NAME" \
  --location "$ZONE" \
  --priority medium \
  --restarts 0 \
  --compute-type tpu7x \
  --topology 4x4x8 \
  --num-slices 1 \
  --image "${WORKLOAD_IMAGE}" \
  --name "${WORKLOAD_NAME}" \
  --command "set -e && set -o pipefail && \
export LIBTPU_INIT_ARGS='${XLA_FLAGS}' && \
export JAX_PLATFORMS='tpu,cpu' && export ENABLE_PJRT_COMPATIBILITY='true' && \
set +e; \
python3 -u -m maxtext.trainers.pre_train.train maxtext/configs/base.yml ${MAXTEXT_ARGS} | tee train.log; \
STATUS=\${PIPESTATUS[0]}; \
if [ -s train.log ]; then gcloud storage cp train.log \${ARTIFACT_DIR}/train-\${TPU_WORKER_ID:-0}.log || true; fi; \
exit \${STATUS}"
