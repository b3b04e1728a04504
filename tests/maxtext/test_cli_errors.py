"""run-local input errors: one line, exit 2, before any MaxText process starts."""

from __future__ import annotations

from tests.support import run_module


def test_run_local_needs_tiny(tmp_path):
    r = run_module("workloads", "run-local", "maxtext-6b", "--out", str(tmp_path))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == ["error: --tiny: run-local only runs the tiny model on CPU — add --tiny"], r.stderr


def test_run_local_rejects_a_command_recipe(tmp_path):
    r = run_module("workloads", "run-local", "hello-tpu", "--tiny", "--out", str(tmp_path))
    assert r.returncode == 2 and "plain command" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_run_local_unknown_recipe(tmp_path):
    r = run_module("workloads", "run-local", "maxtext-6", "--tiny", "--out", str(tmp_path))
    assert r.returncode == 2 and "did you mean maxtext-6b" in r.stderr, r.stderr
