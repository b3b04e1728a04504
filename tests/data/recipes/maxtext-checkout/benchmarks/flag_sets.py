# XLA flag strings in the style of MaxText's benchmarks/xla_flags_library.py (written for these tests).
_LIMIT = 98304
VMEM_FLAG = f" --xla_tpu_scoped_vmem_limit_kib={_LIMIT}"
ASYNC_GATHER = " --xla_enable_async_all_gather=true" " --xla_tpu_overlap_compute_collective_tc=true"
SIZED_VMEM = "--xla_tpu_scoped_vmem_limit_kib={kib}".format
