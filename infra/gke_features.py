"""What the GKE features a spec can turn on need: the first GKE version with each, and where it is offered.

Beside ``infra.catalog``, which holds the TPU generations' own floors (each generation's
``min_gke_version``, and multislice's): these are the floors of features the spec turns
on (flex-start, ComputeClasses, multi-tier checkpointing, Managed Lustre, the Ray add-on).
``EnvSpec.gke_floors`` lists the ones a spec needs, each with the words its refusal uses;
the cluster's ``min_master_version`` defaults to the highest. A separate module, not the
catalog: the catalog is the table of TPU hardware, and these are facts about GKE releases
that change on GKE's schedule, each with the page it comes from. Pure data.
"""

from __future__ import annotations

# DWS flex-start for TPUs (both modes: autoscaled and queued provisioning) needs this GKE
# version (GKE docs "About GPU and TPU provisioning with flex-start"; see docs/architecture.md).
FLEX_START_TPU_MIN_GKE_VERSION = "1.33.0-gke.1712000"
# Generations GKE offers flex-start TPUs in: not v4 (nor v3).
FLEX_START_GENERATIONS = ("v5e", "v5p", "v6e", "tpu7x")

# RayJob workers keep to one node pool per slice through pod-affinity matchLabelKeys and
# mismatchLabelKeys (workloads/render/rayjob.py): beta and on by default from Kubernetes 1.31,
# GA in 1.33 (KEP-3633); an older API server drops the fields and a slice may straddle pools.
# 1.31.2-gke.1115000 is the earliest 1.31 GKE version the catalog already cites (v6e's floor).
RAY_MIN_GKE_VERSION = "1.31.2-gke.1115000"

# GKE custom ComputeClasses (cloud.google.com/v1): "1.30.3-gke.1451000 and later" (GKE docs "About custom ComputeClasses").
COMPUTE_CLASS_MIN_GKE_VERSION = "1.30.3-gke.1451000"

# GKE's multi-tier checkpointing (GKE docs "Train large-scale machine learning models on GKE with
# Multi-Tier Checkpointing": version floor, Standard clusters only; MaxText's multi_tier_checkpointing
# guide: the TPU generations it supports). The toolkit only makes Standard clusters.
MTC_MIN_GKE_VERSION = "1.32.4-gke.1415000"
MTC_GENERATIONS = ("v4", "v5e", "v5p", "v6e")

# Google Cloud Managed Lustre (provider 7.43.0's google_lustre_instance; GKE docs "About the Managed
# Lustre CSI driver": the driver needs GKE 1.33.2-gke.1111000 and the instance in the cluster's VPC).
# The floor is the later 1.33.2-gke.4655000: from it the nodes' Lustre client uses LNet's own port
# (988) beside the GKE metadata server, so the instance needs no gke_support_enabled and the
# driver no legacy port 6988 (GKE API, LustreCsiDriverConfig.enable_legacy_lustre_port).
LUSTRE_MIN_GKE_VERSION = "1.33.2-gke.4655000"

# JobSet's in-place restart (restartStrategy InPlaceRestart, alpha from JobSet v0.11.0, gate
# InPlaceRestart) restarts a healthy worker's container where it is: its agent exits with a code
# the container's restartPolicyRules turn into a restart. Those rules are Kubernetes' ContainerRestartRules,
# alpha in 1.34 and beta, on by default, from 1.35 (k8s.io/kubernetes pkg/features/kube_features.go,
# v1.36.0). The earliest GKE 1.35 version a public page names is 1.35.0-gke.3065000 (managed ML
# diagnostics, github.com/AI-Hypercomputer/xpk pull 1186, 2026-06-11).
IN_PLACE_RESTART_MIN_GKE_VERSION = "1.35.0-gke.3065000"
IN_PLACE_RESTART_MIN_JOBSET = "v0.11.0"
# The image cloudbuild/image-maxtext.yaml builds the agent into (tag: the spec's versions.jobset); each
# in-place run copies the agent from it into its pods (workloads/render/jobset.py).
IN_PLACE_AGENT_IMAGE = "jobset-in-place-restart-agent"
# GKE's slice controller add-on (addonsConfig.sliceControllerConfig; provider 7.43.0's
# ContainerClusterAddonsConfigSliceControllerConfig), which forms tpu7x slices from Slice objects
# (accelerator.gke.io/v1beta1). The only GKE page that says how to turn it on is dynamic slicing's
# ("Use dynamic slicing with a custom scheduler": Standard, Rapid channel, 1.35.2-gke.1842000 or later),
# so its floor is that one. Ironwood multislice training lists the add-on among its prerequisites.
SLICE_CONTROLLER_MIN_GKE_VERSION = "1.35.2-gke.1842000"
# Dynamic slicing of tpu7x (GA; GKE docs "About dynamic slicing", "Use dynamic slicing in GKE with Kueue"):
# Standard, Rapid channel, COS, an All Capacity mode reservation consumed as SPECIFIC_RESERVATION, node pools
# of one 4x4x4 sub-block each whose workload policy has accelerator_topology_mode PROVISION_ONLY.
DYNAMIC_SLICING_MIN_GKE_VERSION = "1.35.2-gke.1842000"
DYNAMIC_SLICING_GENERATIONS = ("tpu7x",)
