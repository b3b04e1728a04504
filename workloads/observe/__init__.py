"""Observing runs: preflight checks, MaxText metrics, reports and their upload."""
