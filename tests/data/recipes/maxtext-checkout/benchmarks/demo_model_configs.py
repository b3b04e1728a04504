# Model configs in the shape of MaxText's benchmarks/*_model_configs.py (written for these tests).
import os.path

from benchmarks import flag_sets
from benchmarks.benchmark_utils import MaxTextModel, _add_to_model_dictionary
from benchmarks.paths import ASSETS  # computed at run time in the real package

raise RuntimeError("importing this file is a bug: the importer must only parse it")

demo_dict = {}

COMMON = {"attention": "flash", "enable_checkpointing": False}

llama_8b = _add_to_model_dictionary(
    demo_dict,
    MaxTextModel(
        model_name="llama3_1-8b-demo",
        model_type="llama3.1-8b",
        tuning_params={
            **COMMON,
            "per_device_batch_size": 2,
            "ici_fsdp_parallelism": -1,
            "remat_policy": "full",
            "max_target_length": 8192,
            "tokenizer_path": os.path.join(ASSETS, "tokenizer_llama3.tiktoken"),
            "dataset_type": "synthetic",
            "steps": 50,
        },
        xla_flags=(flag_sets.VMEM_FLAG + flag_sets.ASYNC_GATHER),
    ),
)

mixtral = _add_to_model_dictionary(
    demo_dict,
    MaxTextModel(
        model_name="mixtral-8x7b-demo",
        model_type="mixtral-8x7b",
        tuning_params={"per_device_batch_size": 4, "megablox": True, "sparse_matmul": True, "ici_fsdp_parallelism": -1},
        xla_flags=flag_sets.SIZED_VMEM(kib=81920),
    ),
)

for n in range(2):  # built at run time: no literal name, skipped
    MaxTextModel(model_name=f"loop-{n}", model_type="default", tuning_params={}, xla_flags="")
