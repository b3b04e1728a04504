"""Each CLI entry point once as a real process: what the in-process runner returns is what the process gives.

The fast tier runs ``python -m workloads`` and ``python -m infra`` in process
(``cli`` in tests/support/cli.py). Here each runs as a real ``python -m`` process too, and
both ways must give the same exit code, stdout and stderr byte for byte: a success,
a bad input (one stderr line, exit 2), a usage error and the help. The other entry
points run as processes where they are tested: ``python -m infra.app`` and the
user's-shell synth in tests/test_synth.py, ``python -m workloads.ray.jax_trainer``
in tests/test_ray_local.py, the lazy command registration in tests/test_cli_registry.py,
the local daemons in the integration tier, ``workloads.maxtext.driver`` in the maxtext tier.
"""

from __future__ import annotations

import pytest

from tests.support import EXAMPLES, cli, run_module

CASES = [
    ("workloads", ["submit", "maxtext-6b", "--slices", "2", "--name", "smoke", "--dry-run", "-o", "json", "--spec", str(EXAMPLES / "default.yaml")], 0),
    ("workloads", ["submit", "maxtext-6b", "--slices", "0", "--dry-run"], 2),
    ("workloads", ["submit", "maxtext-6b", "--no-such-flag"], 2),
    ("workloads", ["--help"], 0),
    ("infra", ["spec", "-o", "json", "--spec", str(EXAMPLES / "v5p.yaml")], 0),
    ("infra", ["spec", "--spec", "tests/bad_specs/zero_slices.yaml"], 2),
    ("infra", ["synth", "--help"], 0),
]


@pytest.mark.parametrize("module, args, code", CASES, ids=[f"{m}-{'-'.join(a[:2]).strip('-')}" for m, a, _ in CASES])
def test_the_process_and_the_in_process_runner_agree(module: str, args: list[str], code: int) -> None:
    real = run_module(module, *args)
    assert real.returncode == code, real.stderr
    if code == 2:
        assert len(real.stderr.splitlines()) == 1 and real.stderr.startswith("error: "), real.stderr
    here = cli(module, *args)
    assert (here.returncode, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr)
