#!/bin/bash
# A run script in the shape tpu-recipes publishes (written for these tests):
# an environment block, XLA flags and MaxText overrides in shell variables, and
# one `xpk workload create` whose --command trains with MaxText.

VENV="${HOME}/.venvs/xpk"
source "${VENV}/bin/activate"
if ! pip show xpk &> /dev/null; then
    echo "install xpk first: pip install xpk"
    exit 1
fi

export PROJECT_ID="my-project"
export CLUSTER_NAME="ironwood-east"
export ZONE="us-east5-b"
export BASE_OUTPUT_DIR="gs://my-bucket/runs"
export WORKLOAD_IMAGE="us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01"
export WORKLOAD_NAME="$(printf "%.20s" "${USER//_/-}-l31-8b-fp8")-$(date +%m%d-%H%M)"

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

xpk workload create \
  --cluster=$CLUSTER_NAME \
  --project=$PROJECT_ID \
  --zone=$ZONE \
  --priority=very-high \
  --max-restarts=0 \
  --device-type=tpu7x-4x4x8 \
  --num-slices=1 \
  --docker-image="${WORKLOAD_IMAGE}" \
  --enable-debug-logs \
  --workload="${WORKLOAD_NAME}" \
  --command="set -e && set -o pipefail && \
export LIBTPU_INIT_ARGS='${XLA_FLAGS}' && \
export JAX_PLATFORMS='tpu,cpu' && export ENABLE_PJRT_COMPATIBILITY='true' && \
python3 -m maxtext.trainers.pre_train.train maxtext/configs/base.yml ${MAXTEXT_ARGS} | tee train.log && \
gsutil cp train.log ${BASE_OUTPUT_DIR}/${WORKLOAD_NAME}/train-\${TPU_WORKER_ID}.log"
