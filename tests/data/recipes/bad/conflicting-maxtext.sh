ARGS="model_name=llama3.1-8b quantization=fp8_full steps=10"
xpk workload create --cluster c --workload w --device-type=tpu7x-4x4x8 --num-slices=1 \
  --command="python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml ${ARGS} quantization=int8"
