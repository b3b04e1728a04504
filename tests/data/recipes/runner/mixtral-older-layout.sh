python3 benchmarks/benchmark_runner.py --device_type=v6e-256 --num_slices=1 --num_steps=15 --model_name="mixtral_8x7b_demo" --base_docker_image maxtext_base_image
