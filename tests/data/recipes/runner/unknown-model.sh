python3 -m benchmarks.benchmark_runner xpk --device_type=v6e-16 --model_name="llama3_1_8b_dem"
