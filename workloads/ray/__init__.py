"""Ray on TPU: the pinned Ray version and the JaxTrainer entrypoint a RayJob runs.

``jax_trainer`` is the script a ``--runtime ray`` RayJob runs on its head: Ray Train's
JaxTrainer (alpha in Ray) starting one worker per TPU VM, each running MaxText's
trainer with the recipe's arguments; ``entrypoint`` is how those arguments travel in
the RayJob's entrypoint string (inert words, base64url when needed). Both import only
the standard library, Ray and MaxText, so they run unchanged in the run's image and in
the local Ray venv (scripts/setup-ray.sh). Nothing in the toolkit imports Ray.
"""

from __future__ import annotations

# The first Ray release whose JaxTrainer spreads workers over several TPU slices
# (ray-project/ray#58629; ScalingConfig(use_tpu=True) itself is from 2.49.1, one slice
# only). Keep in step with scripts/setup-ray.sh.
RAY_VERSION = "2.54.0"
# What the RayJob's entrypoint runs, with the run image's python3.
ENTRYPOINT_MODULE = "workloads.ray.jax_trainer"

# Catalog generation -> Ray's accelerator type (ray.util.accelerators: GOOGLE_TPU_*),
# what ScalingConfig(accelerator_type=...) and the TPU head resource are named after.
RAY_ACCELERATOR_TYPES = {
    "v4": "TPU-V4",
    "v5e": "TPU-V5LITEPOD",
    "v5p": "TPU-V5P",
    "v6e": "TPU-V6E",
    "tpu7x": "TPU-V7X",
}


def ray_accelerator_type(generation: str) -> str:
    """Ray's accelerator type for a catalog generation name (``v6e`` -> ``TPU-V6E``)."""
    try:
        return RAY_ACCELERATOR_TYPES[generation]
    except KeyError:
        raise ValueError(f"no Ray accelerator type for TPU generation {generation!r} (known: {', '.join(RAY_ACCELERATOR_TYPES)})") from None
