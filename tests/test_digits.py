"""Numbers in text anyone may have written: Unicode digits are "not a number", never a traceback (toolkit.digits)."""

from __future__ import annotations

import pytest

from toolkit.digits import is_decimal, whole_number
from workloads.maxtext.run_local import saved_steps
from workloads.observe import metrics as m


@pytest.mark.parametrize("text", ["²", "٣", "12²", "１２", "", "-1", "1.0", " 1"])
def test_only_ascii_digits_are_a_number(text: str) -> None:
    assert not is_decimal(text) and whole_number(text) is None


def test_the_cases_that_fool_str_isdigit_are_among_them() -> None:
    assert all(t.isdigit() for t in ("²", "٣", "12²", "１２"))  # what int() refuses or reads as another script's


def test_ascii_digits_are_read_within_their_bound() -> None:
    assert whole_number("0") == 0 and whole_number("0042") == 42
    assert whole_number("1234567890", 10) == 1234567890 and whole_number("12345678901", 10) is None


def test_a_superscript_step_or_device_count_is_skipped_not_a_traceback() -> None:
    log = m.load(None, '{"step": "²", "perf/step_time_seconds": 1.0}\n{"step": 3, "perf/step_time_seconds": 1.0}\n')
    assert [s.step for s in log.steps] == [3]
    assert m.RunLog(steps=[], system={"num_devices": "٣"}).num_devices is None


def test_a_checkpoint_directory_named_with_unicode_digits_is_not_a_step(tmp_path) -> None:
    root = tmp_path / "run" / "checkpoints"
    for name in ("3", "²", "٣", "10"):
        (root / name).mkdir(parents=True)
    assert saved_steps(tmp_path, "run") == [3, 10]
