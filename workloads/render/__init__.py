"""Rendering: a RunPlan (or the spec) -> Kubernetes objects as plain dicts, and the Kustomize tree. Pure."""
