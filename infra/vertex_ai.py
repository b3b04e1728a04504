"""Where a Vertex AI TensorBoard can live: the regions Vertex AI is offered in, and the nearest one to a cluster.

TPU regions and Vertex AI regions are not the same set: us-central2 (where TPU v4 lives)
has no Vertex AI, so a TensorBoard there cannot be created and the whole deploy fails on
it. Google's TPU-training-on-GKE reference guide gives the TensorBoard a region of its own for
this reason (its default: us-central1;
https://github.com/GoogleCloudPlatform/applied-ai-engineering-samples/tree/main/ai-infrastructure/tpu-training-on-gke). The table below is compiled by hand from the Vertex
AI locations page (https://cloud.google.com/vertex-ai/docs/general/locations, "Available
locations", taken 2026-11); a region Vertex AI adds later is refused with the way through
(``tensorboard.region_unlisted``). Pure, cheap to import.
"""

from __future__ import annotations

SOURCE = "https://cloud.google.com/vertex-ai/docs/general/locations (Available locations, 2026-11)"

REGIONS: frozenset[str] = frozenset(
    {
        # Americas
        "us-central1",
        "us-east1",
        "us-east4",
        "us-east5",
        "us-south1",
        "us-west1",
        "us-west2",
        "us-west3",
        "us-west4",
        "northamerica-northeast1",
        "northamerica-northeast2",
        "southamerica-east1",
        "southamerica-west1",
        # Europe
        "europe-central2",
        "europe-north1",
        "europe-southwest1",
        "europe-west1",
        "europe-west2",
        "europe-west3",
        "europe-west4",
        "europe-west6",
        "europe-west8",
        "europe-west9",
        # Asia Pacific
        "asia-east1",
        "asia-east2",
        "asia-northeast1",
        "asia-northeast2",
        "asia-northeast3",
        "asia-south1",
        "asia-southeast1",
        "asia-southeast2",
        "australia-southeast1",
        "australia-southeast2",
        # Middle East, Africa
        "me-central1",
        "me-central2",
        "me-west1",
        "africa-south1",
    }
)

# Regions without Vertex AI that TPUs are offered in, with the Vertex AI region nearest to them.
_NEAREST: dict[str, str] = {
    "us-central2": "us-central1",  # Oklahoma -> Iowa (the reference guide's default, too)
}

# Otherwise the nearest by geography prefix: the region of that area TPU users most often use.
_BY_AREA: tuple[tuple[str, str], ...] = (
    ("us-", "us-central1"),
    ("northamerica-", "northamerica-northeast1"),
    ("southamerica-", "southamerica-east1"),
    ("europe-", "europe-west4"),
    ("asia-", "asia-southeast1"),
    ("australia-", "australia-southeast1"),
    ("me-", "me-west1"),
    ("africa-", "africa-south1"),
)
FALLBACK = "us-central1"


def offered(region: str) -> bool:
    return region in REGIONS


def nearest(region: str) -> str:
    """``region`` itself when Vertex AI is offered there, else the Vertex AI region nearest to it."""
    if region in REGIONS:
        return region
    if region in _NEAREST:
        return _NEAREST[region]
    return next((r for prefix, r in _BY_AREA if region.startswith(prefix)), FALLBACK)
