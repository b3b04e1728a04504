xpk workload create --cluster c --workload w --device-type=tpu9z-4x4x8 --num-slices=1 \
  --command="python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml model_name=llama3.1-8b steps=10"
