PJRT_DEVICE=TPU
PER_HOST_BATCH_SIZE=8
# a Docker env-file: values are not quoted
LIBTPU_INIT_ARGS=--xla_tpu_enable_flash_attention=false --xla_enable_async_all_gather=true
