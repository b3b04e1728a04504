# A benchmark-runner script in the Trillium layout (written for these tests): the model's
# flags are in the MaxText checkout's benchmarks/ configs, not here.
python3 -m benchmarks.benchmark_runner xpk \
    --project=$PROJECT \
    --zone=$ZONE \
    --device_type=v6e-16 \
    --num_slices=2  \
    --cluster_name=${CLUSTER_NAME} \
    --base_output_directory=${OUTPUT_DIR} \
    --model_name="llama3_1_8b_demo" \
    --libtpu_version=20250101 \
    --base_docker_image=maxtext_base_image
