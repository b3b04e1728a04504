#!/bin/bash
# Cluster Toolkit layout (written for these tests): a binary found through GCLUSTER_BIN, an
# optional placement policy spread from an array, the training piped through tee, the exit
# code taken from PIPESTATUS and the log copied out afterwards.
export PATH="${HOME}/cluster-toolkit:${PATH}"
GCLUSTER_BIN="${GCLUSTER_BIN:-gcluster}"
if ! command -v "${GCLUSTER_BIN}" &> /dev/null && [[ ! -x "${GCLUSTER_BIN}" ]]; then
    echo "gcluster not found" >&2
    exit 1
fi
set -e
set -o pipefail

export PROJECT_ID="${PROJECT_ID:-}"
export CLUSTER_NAME="${CLUSTER_NAME:-}"
export ZONE="${ZONE:-}"
export BASE_OUTPUT_DIR="${BASE_OUTPUT_DIR:-gs://my-bucket/out}"
export WORKLOAD_IMAGE="${WORKLOAD_IMAGE:-us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01}"
export WORKLOAD_NAME="${WORKLOAD_NAME:-$(printf "%.11s" "${USER//_/-}")-l8b-$(date +%H%M)}"
export ARTIFACT_DIR="${ARTIFACT_DIR:-${BASE_OUTPUT_DIR}/${WORKLOAD_NAME}}"

PLACEMENT_POLICY_ARG=()
if [[ -n "${PLACEMENT_POLICY:-}" ]]; then
  PLACEMENT_POLICY_ARG=(--placement-policy "${PLACEMENT_POLICY}")
fi

XLA_FLAGS=" \
  --xla_tpu_scoped_vmem_limit_kib=61440 \
  --xla_tpu_enable_async_collective_fusion=true \
  --xla_enable_async_all_gather=true "

MAXTEXT_ARGS="\
model_name=llama3.1-8b \
per_device_batch_size=2 \
max_target_length=8192 \
ici_fsdp_parallelism=-1 \
remat_policy=full \
attention=flash \
dataset_type=synthetic \
enable_checkpointing=False \
steps=20 \
base_output_directory=${BASE_OUTPUT_DIR} \
run_name=${WORKLOAD_NAME}"

echo "=== submitting ${WORKLOAD_NAME} ==="
"${GCLUSTER_BIN}" job submit \
  --skip-prereqs \
  --queue multislice-queue \
  --cluster "$CLUSTER_NAME" \
  --project "$PROJECT_ID" \
  --location "$ZONE" \
  --priority medium \
  --restarts 0 \
  --compute-type tpu7x \
  --topology 4x4x4 \
  --num-slices 1 \
  --image "${WORKLOAD_IMAGE}" \
  "${PLACEMENT_POLICY_ARG[@]}" \
  --verbose \
  --gke-namespace default \
  --name "${WORKLOAD_NAME}" \
  --command "set -e && set -o pipefail && export ENABLE_PATHWAYS_PERSISTENCE='1' && \
export LIBTPU_INIT_ARGS='${XLA_FLAGS}' && \
export ARTIFACT_DIR='${ARTIFACT_DIR}' && \
export JAX_PLATFORMS='tpu,cpu' && \
set +e; \
python3 -u -m maxtext.trainers.pre_train.train maxtext/configs/base.yml ${MAXTEXT_ARGS} 2>&1 | tee train.log; \
TRAIN_EXIT_CODE=\${PIPESTATUS[0]}; \
if [ -s train.log ]; then \
  timeout 30s gcloud storage cp train.log \${ARTIFACT_DIR}/logs/train-\${TPU_WORKER_ID:-0}.log || true; \
fi; \
exit \${TRAIN_EXIT_CODE}"
