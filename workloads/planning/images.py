"""The images a run pulls when its recipe names none of its own: the pinned MaxText, and Ray over it.

Each is a ``name:tag`` inside the spec's Artifact Registry repository, written here and
nowhere else: ``cloudbuild/image-maxtext.yaml`` reads these names to build and push them
(with that MaxText version in the image), every recipe whose ``image.registry`` names the
MaxText image must pull exactly this tag (``recipes.check_image``), and the MaxText keys
the toolkit knows (``maxtext_keys``) are this version's.
"""

from __future__ import annotations

from workloads.ray import RAY_VERSION

MAXTEXT_VERSION = "0.2.5"
MAXTEXT_IMAGE_NAME = "maxtext"
MAXTEXT_IMAGE = f"{MAXTEXT_IMAGE_NAME}:{MAXTEXT_VERSION}"
# The ray runtime's image: Ray (workloads.ray.RAY_VERSION) + that MaxText + this repository's
# workloads/ray entrypoint, in the same registry. A recipe that pulls MAXTEXT_IMAGE pulls this
# one instead when it runs on ray.
RAY_IMAGE_NAME = "ray-maxtext"
RAY_IMAGE = f"{RAY_IMAGE_NAME}:{RAY_VERSION}-maxtext-{MAXTEXT_VERSION}"

# The trainer modules of that MaxText version: what a MaxText run's command starts.
MAXTEXT_TRAIN_MODULE = "maxtext.trainers.pre_train.train"
# Its supervised fine-tuning: the pre-training loop with use_sft=True, which the module adds itself
# (train_sft.py, the other SFT entry point, needs Tunix, which maxtext[tpu]==0.2.5 does not install).
MAXTEXT_SFT_MODULE = "maxtext.trainers.post_train.sft.train_sft_native"


def runs_pinned_maxtext(image: str) -> bool:
    """Whether ``image`` (a registry name:tag or a full reference) is the toolkit's pinned MaxText.

    Keys are validated against the MaxText a run uses: the pinned image's keys are known
    (``_maxtext_keys.yaml``); any other image is a MaxText the toolkit has not read, whose keys
    go through as written (a recipe tuned for a newer MaxText needs its newer keys).
    """
    return image in (MAXTEXT_IMAGE, RAY_IMAGE) or image.endswith((f"/{MAXTEXT_IMAGE}", f"/{RAY_IMAGE}"))
