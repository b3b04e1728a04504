#!/bin/bash
# A PyTorch/XLA training script run on the TPU VM itself (written for these tests).
export PJRT_DEVICE=TPU
torchrun --nproc_per_node=4 transformers/examples/pytorch/language-modeling/run_clm.py --model_name_or_path meta-llama/Llama-3-8B
