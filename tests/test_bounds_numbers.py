"""Numbers past their domain: every number is bounded to what its consumer accepts.

The reported cases (NaN, 1e300 and negative step times in a metrics log; --checkpoint-every
1e308; --steps 1e23; --max-restarts 2^66), then the audit as tests: every numeric flag of
both CLIs has a ceiling and refuses NaN/inf/huge/negative in one line (exit 2); every
numeric spec and recipe field has one; arbitrary metrics lines and metrics-file records never
end in a traceback nor put a NaN or infinity in a summary or JSON; --set numbers are ones
MaxText can hold. In-process through ``toolkit.clikit.run``.
"""

from __future__ import annotations

import io
import json
import math
import re
import typing
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import annotated_types as at
import pytest
import typer
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from infra.cli import app as _infra_app
from infra.spec import EnvSpec, parse_spec
from tests.support import REPO
from toolkit.clikit import run
from toolkit.errors import FieldError, SpecError
from workloads.cli import _register
from workloads.cli import app as _workloads_app
from workloads.observe import goodput
from workloads.observe import metrics as m
from workloads.observe.report import RunFacts, summary_document
from workloads.planning.defaults import INT32_MAX
from workloads.planning.overrides import Overrides, bounds_of, flag_of
from workloads.planning.planner import PlanError, plan_run
from workloads.planning.recipes import Recipe

_register()
INFRA, WORKLOADS = typer.main.get_command(_infra_app), typer.main.get_command(_workloads_app)
DEFAULT = REPO / "examples" / "default.yaml"
TINY_LOG = REPO / "tests" / "data" / "maxtext" / "tiny_cpu.log"
SPEC = EnvSpec.model_validate(yaml.safe_load(DEFAULT.read_text()))
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for var in ("TGK_DEBUG", "TGK_SPEC", "TGK_REQUEST_TIMEOUT", "KUBECONFIG", "TGK_RECIPES"):
        monkeypatch.delenv(var, raising=False)


def cli(command, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = run(command.main, list(argv))
    return rc, out.getvalue(), err.getvalue()


def refused(rc: int, stderr: str, *needles: str) -> None:
    """Exit 2 and one line, no traceback."""
    assert "Traceback" not in stderr and rc == 2, (rc, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for n in needles:
        assert n in lines[0], lines[0]


def finite_json(text: str):
    """JSON that holds no NaN or infinity (json.loads would take them)."""

    def refuse(word: str):
        raise AssertionError(f"{word} in JSON output")

    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------ the reported cases


def test_nan_huge_and_negative_step_times_are_skipped_and_said_once(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    good = "completed step: {}, seconds: 1.0, TFLOP/s/device: 10, Tokens/s/device: 100, total_weights: 128, loss: 4.0"
    log.write_text(
        "\n".join(
            [good.format(0), good.format(1), good.format(2)]
            + [
                "completed step: 3, seconds: nan, TFLOP/s/device: 10, Tokens/s/device: 100, total_weights: 128, loss: nan",
                "completed step: 4, seconds: 1e300, TFLOP/s/device: 1e300, Tokens/s/device: 1e308, total_weights: 1e308, loss: 5.0",
                "completed step: 5, seconds: -1.0, TFLOP/s/device: 10, Tokens/s/device: 100, total_weights: 128, loss: -inf",
                "completed step: 100000000000000000000000, seconds: 1.0, loss: 4.0",
                good.format(6).replace("loss: 4.0", "loss: nan"),
                good.format(7),
            ]
        )
        + "\n"
    )
    rc, out, err = cli(WORKLOADS, "metrics", str(log), "--shape", "v5litepod-16")
    assert rc == 0, err
    warnings = err.splitlines()
    assert len(warnings) == 2 and "skipped 4 impossible step line(s)" in warnings[0] and "left out 1 NaN" in warnings[1], err
    assert not re.search(r"\b(nan|inf|infinity)\b", out.split("\n", 1)[1], re.IGNORECASE), out
    rc, out, err = cli(WORKLOADS, "metrics", str(log), "--shape", "v5litepod-16", "-o", "json")
    doc = finite_json(out)
    assert [s["step"] for s in doc["steps"]] == [0, 1, 2, 6, 7] and len(doc["notes"]) == 2
    assert doc["summary"]["step_seconds_mean"] == 1.0


def test_goodput_reads_impossible_timed_lines_without_a_traceback() -> None:
    text = "\n".join(
        [
            "I0101 10:00:00.000000 1 x.py:1] start",
            "I0101 10:00:01.000000 1 x.py:1] completed step: 0, seconds: 1.0, loss: 5",
            "I0101 10:00:02.000000 1 x.py:1] completed step: 1, seconds: 1.2.3, loss: 5",
            "I0101 10:00:03.000000 1 x.py:1] completed step: " + "9" * 5000 + ", seconds: 1.0",
            "I0101 10:00:04.000000 1 x.py:1] Saved a checkpoint at step " + "9" * 5000,
            "I0101 10:00:05.000000 1 x.py:1] completed step: 2, seconds: 1e400, loss: 5",
        ]
    )
    g = goodput.from_log(text)
    assert g.attempts == 1 and g.last_checkpoint is None
    json.dumps(g.to_dict(), allow_nan=False)
    assert goodput.last_checkpoint(text) is None


@pytest.mark.parametrize(
    "flag, value, needle",
    [
        ("--checkpoint-every", "1e308", "above 525600"),
        ("--checkpoint-every", "nan", "above 0"),
        ("--steps", "1e23", "--steps"),  # not an integer
        ("--steps", "100000000000000000000000", "above 2147483647"),
        ("--max-restarts", str(2**66), "above 2147483647"),
        ("--slices", str(2**66), "above 2147483647"),
        ("--profile", str(2**40), "above 2147483647"),
    ],
)
def test_reported_flags_are_one_line_exit_2(flag: str, value: str, needle: str) -> None:
    rc, out, err = cli(WORKLOADS, "submit", "maxtext-6b", "--dry-run", flag, value)
    refused(rc, err, needle)
    assert out == ""


def test_the_library_is_held_to_the_same_bounds() -> None:
    for o in (Overrides(steps=10**23), Overrides(max_restarts=2**66), Overrides(checkpoint_every=1e308), Overrides(ttl_seconds=2**40)):
        with pytest.raises(PlanError) as e:
            plan_run("maxtext-6b", SPEC, o)
        assert "above" in str(e.value) and "\n" not in str(e.value)


def test_a_huge_profiler_window_in_a_log_costs_nothing() -> None:
    """A logged profiler_steps of 10^11 once became a set of 10^11 steps."""
    text = TINY_LOG.read_text() + "\nConfig param profiler: xplane\nConfig param profiler_steps: 100000000000\n"
    log = m.load(text)
    assert m.summarize(log.steps, profiler=log.profiler_window()).steps_seen > 0
    window = m.ProfilerWindow(1, INT32_MAX)
    assert m.summarize(log.steps, profiler=window).steady_steps == ()


# ------------------------------------------------------------ every numeric flag of both CLIs


def _numeric_options(command, path=()):
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _numeric_options(sub, (*path, name))
        return
    for p in command.params:
        kind = getattr(p.type_descriptor, "annotation", None)
        if kind in (int, float) and p.opts and p.opts[0].startswith("-"):
            yield path, p


OPTIONS = [(("infra", *path), p) for path, p in _numeric_options(INFRA)] + [(("workloads", *path), p) for path, p in _numeric_options(WORKLOADS)]
OVERRIDE_FLAGS = {flag_of(f).decls: f for f in Overrides.__dataclass_fields__.values() if flag_of(f) is not None}


def _ceiling(p) -> float | None:
    f = OVERRIDE_FLAGS.get(p.opts[0])
    return bounds_of(f).high if f is not None and bounds_of(f) else p.max


def test_every_numeric_flag_has_a_ceiling() -> None:
    """The audit: no int or float option of either CLI without a declared maximum."""
    assert len(OPTIONS) >= 25
    missing = [f"{' '.join(path)} {p.opts[0]}" for path, p in OPTIONS if _ceiling(p) is None]
    assert missing == []


def _outside(p) -> st.SearchStrategy[str]:
    f = OVERRIDE_FLAGS.get(p.opts[0])
    b = bounds_of(f) if f is not None else None
    low = b.low if b else p.min
    high = _ceiling(p)
    kind = p.type_descriptor.annotation
    above = st.integers(int(high) + 1, 2**80) if kind is int else st.floats(float(high) * 1.0001 + 1, 1e308)
    options = [above.map(str), st.sampled_from(["nan", "inf", "-inf", "1e999", str(2**66), "1" + "0" * 400])]
    if low is not None:
        options.append((st.integers(-(2**80), math.ceil(low) - 1) if kind is int else st.floats(-1e308, low - 1e-9 if low else -1e-9)).map(str))
    return st.one_of(*options)


# A base invocation per command that parses its options and refuses nothing else on its way.
BASE = {
    ("workloads", "render"): ["render", "maxtext-6b", "--out", "/nonexistent/never-written"],
    ("workloads", "submit"): ["submit", "maxtext-6b", "--dry-run"],
    ("workloads", "status"): ["status", "r1", "-n", "research", "--wait", "--kubeconfig", "/nonexistent"],
    ("workloads", "logs"): ["logs", "r1", "-n", "research", "--kubeconfig", "/nonexistent"],
    ("workloads", "metrics"): ["metrics", str(TINY_LOG), "--shape", "v5litepod-16"],
    ("workloads", "report"): ["report", str(TINY_LOG), "--out", "/nonexistent/never-written"],
    ("workloads", "preflight"): ["preflight", "maxtext-6b", "--kubeconfig", "/nonexistent"],
    ("workloads", "run-local"): ["run-local", "maxtext-6b"],
    ("workloads", "convert"): ["convert", "llama3.1-8b", "--from", "gs://my-hf/x", "--kubeconfig", "/nonexistent"],
    ("workloads", "local", "up"): ["local", "up"],
    ("workloads", "local", "preempt"): ["local", "preempt", "r1"],
    ("workloads", "local", "upgrade"): ["local", "upgrade", "--pool", "p"],
    ("workloads", "local", "maintenance"): ["local", "maintenance", "--node", "n"],
    ("workloads", "maintain"): ["maintain", "r1", "-n", "research", "--kubeconfig", "/nonexistent"],
    ("workloads", "local", "crash"): ["local", "crash", "r1"],
    ("workloads", "journal", "add"): ["journal", "add", str(TINY_LOG), "--dry-run", "--shape", "v5litepod-16"],
    ("workloads", "local", "badhost"): ["local", "badhost", "n1"],
    ("workloads", "local", "hang"): ["local", "hang", "r1"],
    ("workloads", "badhost"): ["badhost", "r1", "-n", "research", "--kubeconfig", "/nonexistent"],
    ("workloads", "data", "check"): ["data", "check", "--dataset", "text", "--kubeconfig", "/nonexistent"],
}


@pytest.mark.parametrize("path, param", OPTIONS, ids=[f"{' '.join(path)} {p.opts[0]}" for path, p in OPTIONS])
def test_property_values_outside_a_flags_bounds_are_one_line_exit_2(path, param) -> None:
    assert path in BASE, f"{' '.join(path)}: add a base invocation"
    app = INFRA if path[0] == "infra" else WORKLOADS

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_outside(param))
    def check(value: str) -> None:
        rc, out, err = cli(app, *BASE[path], param.opts[0], value)
        refused(rc, err, param.opts[0])

    check()


@pytest.mark.parametrize("field", [f for f in Overrides.__dataclass_fields__.values() if bounds_of(f)], ids=lambda f: f.name)
def test_property_any_number_into_a_run_option_plans_or_is_one_plan_error(field) -> None:
    b = bounds_of(field)
    numbers = st.one_of(
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(int(b.low), int(min(b.high, 10**6))),
    )

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(numbers)
    def check(value) -> None:
        kind = typing.get_type_hints(Overrides)[field.name]
        if int in typing.get_args(kind) or kind is int:
            assume(isinstance(value, int))
        extra = {"profile_steps": 1} if field.name == "profile_start" else {}
        try:
            plan = plan_run("maxtext-6b", SPEC, Overrides(**{field.name: value, **extra}))
        except PlanError as e:
            assert "\n" not in str(e) and len(str(e)) < 1100
            return
        assert b.low <= value <= b.high
        assert plan.policy.max_restarts <= INT32_MAX and plan.program.steps <= INT32_MAX

    check()


# ------------------------------------------------------------ --set numbers


SET_KEYS = [
    "learning_rate",
    "log_period",
    "per_device_batch_size",
    "base_emb_dim",
    "ici_fsdp_parallelism",
    "max_num_checkpoints_to_keep",
    "adam_b1",
    "dataset_path",
]
NUMBER_TEXT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(2**90), 2**90).map(str),
    st.sampled_from(["nan", "NaN", "-inf", "Infinity", "1e999", "-1e999", "9" * 30, "1" + "0" * 5000, "0x10", "1_000"]),
)


@FAST
@given(st.sampled_from(SET_KEYS), NUMBER_TEXT)
def test_property_set_numbers_are_ones_maxtext_can_hold(key: str, text: str) -> None:
    try:
        plan = plan_run("maxtext-6b", SPEC, Overrides(sets=(f"{key}={text}",)))
    except PlanError as e:
        assert e.field == "--set" and "\n" not in str(e) and len(str(e)) < 1100
        return
    arg = next(a for a in plan.program.args if a.startswith(f"{key}="))
    value = arg.split("=", 1)[1].replace("_", "")
    if key == "dataset_path":  # not a numeric key: its value reaches MaxText as written, whatever it spells
        assert value == text.replace("_", "")
        return
    if re.fullmatch(r"[-+]?[0-9]+", value):
        assert abs(int(value)) <= 2**63 - 1
    else:
        try:
            number = float(value)
        except ValueError:
            return  # not a number to Python: MaxText's parser judges it
        assert math.isfinite(number)


# ------------------------------------------------------------ metrics


NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["nan", "-inf", "1.2.3", "", "9" * 5000, "1e-320", "0.000", "-0"]),
)
FIELDS = ["seconds", "TFLOP/s/device", "Tokens/s/device", "total_weights", "loss", "perplexity", "moe_lb_loss"]
STEP_LINE = st.builds(
    lambda step, vals, prefix: prefix + f"completed step: {step}, " + ", ".join(f"{k}: {v}" for k, v in vals),
    NUMBER,
    st.lists(st.tuples(st.sampled_from(FIELDS), NUMBER), max_size=7),
    st.sampled_from(["", f"I0101 10:00:0{0} 1 train.py:1] ", "[Rampup Batch Size Phase] ", "W0101 11:59:59.999999 7 x.py:9] "]),
)
OTHER_LINE = st.sampled_from(
    [
        "Config param profiler: xplane",
        "Config param profiler_steps: 99999999999999999999",
        "Config param skip_first_n_steps_for_profiler: -3",
        "Num_devices: " + "9" * 30,
        "Completed eval after train step 99999999999999999999, loss=nan",
        "completed profiler activation/deactivation step: 99999999999999999999",
        "I0101 10:00:09.000000 1 x.py:1] Saved a checkpoint at step 12",
    ]
)


def _all_finite(obj) -> bool:
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_all_finite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(_all_finite(v) for v in obj)
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(STEP_LINE, OTHER_LINE), min_size=1, max_size=25), st.booleans())
def test_property_arbitrary_metrics_lines_no_traceback_no_nan(lines: list[str], with_hardware: bool) -> None:
    text = "\n".join(lines)
    try:
        log = m.load(text)
    except m.MetricsError as e:
        assert "\n" not in str(e)
        return
    hw = m.Hardware.from_shape(SPEC.tpu_pools[0].shape, 2) if with_hardware else None
    summary = m.summarize(log.steps, hardware=hw, profiler=log.profiler_window())
    doc = summary_document(RunFacts.from_log("r", "f", log), log, summary, goodput.from_log(text))
    assert _all_finite(doc), doc["summary"]
    json.dumps(doc, allow_nan=False)
    assert all(0 <= s.step <= INT32_MAX for s in log.steps)
    assert len(log.notes()) <= 2 and all("\n" not in n for n in log.notes())


JSON_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from([[], {}]),
)
RECORD = st.fixed_dictionaries(
    {"step": JSON_VALUE},
    optional={
        k: JSON_VALUE
        for k in (
            "perf/step_time_seconds",
            "perf/per_device_tflops_per_sec",
            "perf/per_device_tokens_per_sec",
            "learning/loss",
            "learning/total_weights",
            "perf/per_device_tokens",
        )
    },
)


@FAST
@given(st.lists(RECORD, min_size=1, max_size=15))
def test_property_arbitrary_metrics_file_records_no_traceback_no_nan(records: list[dict]) -> None:
    text = "\n".join(json.dumps(r) for r in records)  # json.dumps writes NaN and Infinity, as a broken writer would
    try:
        log = m.load(None, text)
    except m.MetricsError as e:
        assert "\n" not in str(e)
        return
    summary = m.summarize(log.steps, hardware=m.Hardware.from_shape(SPEC.tpu_pools[0].shape, 1))
    assert _all_finite(summary.to_dict())


# ------------------------------------------------------------ spec and recipe fields


def _numeric_fields(model: type[BaseModel], prefix: str = "", seen: frozenset = frozenset()):
    """(path, field) of every int/float field of a model and the models inside it."""
    for name, f in model.model_fields.items():
        ann = f.annotation
        args = [a for a in typing.get_args(ann) if a is not type(None)] or [ann]
        for a in args:
            for inner in typing.get_args(a) or [a]:
                if isinstance(inner, type) and issubclass(inner, BaseModel) and inner not in seen:
                    yield from _numeric_fields(inner, f"{prefix}{name}.", seen | {inner})
        if any(a in (int, float) for a in args):
            yield f"{prefix}{name}", f


def _has_ceiling(f) -> bool:
    return any(isinstance(c, (at.Le, at.Lt)) for c in f.metadata)


# Numbers bounded by a validator rather than a declared maximum, with the validator.
BOUNDED_ELSEWHERE = {
    "tpu_pools.chips_per_vm": "infra.catalog.resolve: one of the generation's VM sizes",
    "prices.chip_hour.on_demand": "infra.pricing.Rates._positive: finite, above 0, at most MAX_USD_PER_CHIP_HOUR",
    "prices.chip_hour.spot": "the same",
    "prices.chip_hour.flex_start": "the same",
    "prices.chip_hour.reservation": "the same",
    "fatal_exit_codes": "Recipe._fatal: 1-127",
    "maxtext.parallelism.ici": "Parallelism._axes: -1 or 1..INT32_MAX",
    "maxtext.parallelism.dcn": "the same",
    "monitoring.alerts.goodput_below": "infra.spec.rules.check_monitoring: within (0, 1]",
}


def test_every_numeric_spec_and_recipe_field_has_a_ceiling() -> None:
    missing = []
    for model, name in ((EnvSpec, "spec"), (Recipe, "recipe")):
        for path, f in _numeric_fields(model):
            if not _has_ceiling(f) and path not in BOUNDED_ELSEWHERE and not path.endswith("mode"):
                missing.append(f"{name}: {path}")
    assert missing == []


SPEC_NUMBERS = [(path, f) for path, f in _numeric_fields(EnvSpec)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SPEC_NUMBERS), st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True)))
def test_property_any_number_in_a_spec_field_validates_or_is_one_spec_error(path_field, value) -> None:
    path, _ = path_field
    data = yaml.safe_load(DEFAULT.read_text())
    node = data
    parts = path.split(".")
    for part in parts[:-1]:
        nxt = node.get(part) if isinstance(node, dict) else None
        if isinstance(nxt, list):
            nxt = nxt[0] if nxt else None
        if nxt is None or not isinstance(nxt, (dict, list)):
            nxt = {}
            node[part] = [nxt] if part in ("tpu_pools", "teams", "buckets") else nxt
        node = nxt if isinstance(nxt, dict) else nxt[0]
    node[parts[-1]] = value
    try:
        parse_spec(data)
    except SpecError as e:
        assert "\n" not in str(e) and len(str(e)) < 1100
    except FieldError as e:  # a few checks outside pydantic raise the base class
        assert "\n" not in str(e)


RECIPE = yaml.safe_load((REPO / "workloads" / "recipes" / "maxtext-6b.yaml").read_text())


@FAST
@given(
    st.sampled_from(
        [
            "steps",
            "slices",
            "min_chips_per_slice",
            "maxtext.model.base_emb_dim",
            "maxtext.model.vocab_size",
            "maxtext.per_device_batch.0.per_device_batch_size",
            "maxtext.per_device_batch.0.min_hbm_gib_per_device",
            "maxtext.parallelism.ici.fsdp",
            "maxtext.args.max_target_length",
            "maxtext.args.learning_rate",
        ]
    ),
    st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True)),
)
def test_property_any_number_in_a_recipe_field_validates_or_is_refused(path: str, value) -> None:
    data = json.loads(json.dumps(RECIPE))
    node = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    node[parts[-1]] = value
    try:
        r = Recipe.model_validate(data)
    except ValidationError:
        return
    assert r.steps <= INT32_MAX and r.slices <= INT32_MAX
    assert all(math.isfinite(b.per_device_batch_size) for b in r.maxtext.per_device_batch)


# ------------------------------------------------------------ prices and environment numbers


@FAST
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70)))
def test_property_a_price_is_finite_positive_and_below_the_ceiling(value) -> None:
    from infra.price_table import MAX_USD_PER_CHIP_HOUR, Rates

    try:
        r = Rates.model_validate({"spot": value})
    except ValidationError:
        return
    assert 0 < r.spot <= MAX_USD_PER_CHIP_HOUR


@FAST
@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        # What an environment can hold: no NUL, no lone surrogate (neither encodes to bytes).
        st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12),
        st.integers(-(2**70), 2**70).map(str),
    )
)
def test_property_environment_numbers_are_bounded(raw: str) -> None:
    import os

    from workloads.cluster.transport import DEADLINE_ENV, MAX_DEADLINE_S, request_deadline
    from workloads.local import rehearsal

    plan = plan_run("maxtext-6b", SPEC, Overrides())
    # The rehearsal factor is bounded by its consumer: however large, the rehearsal is capped.
    for var, read, high in (
        (rehearsal.TIME_FACTOR_ENV, lambda: rehearsal.rehearsal_seconds(plan), rehearsal.MAX_SECONDS),
        (DEADLINE_ENV, request_deadline, MAX_DEADLINE_S),
    ):
        os.environ[var] = raw
        try:
            value = read()
        except FieldError as e:
            assert str(e).startswith(f"{var}: ") and "\n" not in str(e)
        else:
            assert 0 <= value <= high
        finally:
            del os.environ[var]


@FAST
@given(st.one_of(st.integers(0, 10**400).map(str), st.floats(0, 1e308).map(lambda f: f"{f:.3f}")), st.sampled_from("smhdw"))
def test_property_a_duration_is_finite_and_at_most_ten_years(number: str, unit: str) -> None:
    from workloads.cluster.cleanup import MAX_DURATION_S, parse_duration

    try:
        seconds = parse_duration(number + unit)
    except FieldError as e:
        assert str(e).startswith("--older-than: ") and "\n" not in str(e) and len(str(e)) < 300
    else:
        assert 0 <= seconds <= MAX_DURATION_S
