"""Toolkit-wide code that both ``python -m infra`` and ``python -m workloads`` use.

``errors`` (the one error hierarchy), ``clikit`` (CLI options and the single place
errors become one line and an exit code), ``names`` (every Kubernetes and GKE name
the toolkit reads or writes), ``paths`` (the repository and the cache directory)
and ``tools`` (the one runner for external programs). Nothing here imports infra,
modules or workloads.
"""
