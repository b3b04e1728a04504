"""workloads.maxtext.env without MaxText: compile_topology from the catalog's SliceShape,
running through the one runner (toolkit.tools.run), locating the venv, last_error."""

from __future__ import annotations

import sys

import pytest

from infra import catalog
from workloads.maxtext import env as maxtext_env
from workloads.maxtext.run_local import last_error


@pytest.mark.parametrize(
    "generation, topology, name",
    [
        ("v5e", "4x4", "v5e-16"),  # accelerator type v5litepod-16: chips
        ("v5e", "2x4", "v5e-8"),
        ("v6e", "4x4", "v6e-16"),
        ("v4", "2x2x4", "v4-32"),  # 16 chips, 32 TensorCores
        ("v5p", "4x4x4", "v5p-128"),
        ("tpu7x", "2x2x4", "tpu7x-32"),
    ],
)
def test_compile_topology_counts_what_the_accelerator_type_counts(generation, topology, name):
    shape = catalog.shape(generation, topology)
    assert maxtext_env.compile_topology(shape) == name
    assert shape.accelerator_type.endswith(f"-{shape.accelerator_count}")
    assert maxtext_env.topology_args(shape, 2) == {"compile_topology": name, "compile_topology_num_slices": "2"}


def test_run_writes_named_files_and_measures_the_child(tmp_path):
    code = "import sys; b = bytearray(64 * 2**20); print('out'); print('err', file=sys.stderr); sys.exit(3)"
    done = maxtext_env.run([sys.executable, "-c", code], {}, tmp_path / "w", "step")
    assert done.returncode == 3 and not done.timed_out
    assert done.stdout_path == tmp_path / "w" / "step.stdout" and done.stdout_text() == "out\n"
    assert done.stderr_path == tmp_path / "w" / "step.stderr" and done.stderr_text() == "err\n"
    assert done.peak_rss_bytes > 64 * 2**20


def test_run_timeout_kills_the_process_group(tmp_path):
    # A grandchild holding the files open would keep a plain kill waiting; the group goes.
    code = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    done = maxtext_env.run([sys.executable, "-c", code], {}, tmp_path, "slow", timeout=1)
    assert done.timed_out  # the timeout, not the program's own end after 60 s, stopped it


def test_a_program_that_cannot_start_exits_4(tmp_path):
    with pytest.raises(maxtext_env.MaxTextEnvError) as e:
        maxtext_env.run([str(tmp_path / "no-python")], {}, tmp_path, "x")
    assert e.value.exit_code == 4 and "no-python" in str(e.value)


def test_locate_reports_the_setup_scripts_failure(tmp_path, monkeypatch):
    monkeypatch.delenv("TGK_MAXTEXT_VENV", raising=False)
    script = tmp_path / "setup.sh"
    script.write_text("echo one >&2; echo two >&2; echo three >&2; echo four >&2; exit 3\n")
    monkeypatch.setattr(maxtext_env, "SETUP_SCRIPT", script)
    with pytest.raises(maxtext_env.MaxTextEnvError, match=r"failed \(exit 3\): two \| three \| four$") as e:
        maxtext_env.locate()
    assert e.value.exit_code == 4
    script.write_text(f"echo building >&2; echo {tmp_path}\n")
    with pytest.raises(maxtext_env.MaxTextEnvError, match="holds no bin/python"):
        maxtext_env.locate()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").touch()
    assert maxtext_env.locate() == tmp_path


def test_locate_prefers_tgk_maxtext_venv(tmp_path, monkeypatch):
    monkeypatch.setenv("TGK_MAXTEXT_VENV", str(tmp_path))
    with pytest.raises(maxtext_env.MaxTextEnvError, match="has no bin/python"):
        maxtext_env.locate()


def test_last_error_prefers_config_errors_then_exceptions():
    assert last_error("x\nMAXTEXT CONFIG ERROR: bad key\nTraceback\n  SystemExit: 2\n") == "MAXTEXT CONFIG ERROR: bad key"
    assert last_error("ValueError: no\nwhile handling\n") == "ValueError: no"
    # A destructor's error Python reports as ignored, after the real one (Grain's iterator in MaxText 0.2.5), is not the failure.
    ignored = "Traceback (most recent call last):\n  f\nIndivisibleError: axis 0\nException ignored in: <function __del__>\nTraceback (most recent call last):\n  g\nAssertionError: ()\n"
    assert last_error(ignored) == "IndivisibleError: axis 0"
    assert last_error("just words\n\n  the end  \n") == "the end"
    assert last_error("") == "no output"
