"""A stand-in for a real cluster where the run service only asks whether a run is there and applies: it records what is applied."""

from __future__ import annotations


class RecordingCluster:
    """A real cluster's context (no hook), with nothing under the name: records what is applied."""

    context = "gke_p_us-west4_c"

    def __init__(self) -> None:
        self.applied: list[dict] = []

    def find_run(self, namespace, name):
        return None

    def apply(self, objects, **_):
        self.applied.extend(objects)
