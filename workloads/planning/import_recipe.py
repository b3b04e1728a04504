"""A tpu-recipes ``run_recipe.sh`` (or a bare ``xpk workload create`` line) -> a recipe.

Both script layouts tpu-recipes publishes are read: ``xpk/`` (``xpk workload create``) and
``cluster_toolkit/`` (``gcluster job submit --compute-type G --topology T --image ...``,
whose flags are renamed to xpk's first).

Pure: text in, a validated recipe and a report out; the CLI reads and writes the files.
The published scripts set shell variables (XLA_FLAGS, MAXTEXT_ARGS, ...), then run::

    xpk workload create --device-type=tpu7x-4x8x8 --num-slices=1 ... \\
      --command="set -e && export LIBTPU_INIT_ARGS='<flags>' && export K='v' && \\
                 python3 -m <MaxText train module> <config>.yml key=value ... | tee ... && gsutil cp ..."

Where each piece goes:

| script | recipe |
|---|---|
| ``--device-type`` / ``--tpu-type`` | ``shapes``, ``generations``, ``min_chips_per_slice`` |
| ``--num-slices`` | ``slices`` |
| ``--docker-image`` (a literal, tagged reference) | ``image.ref``; else the toolkit's MaxText image |
| ``export LIBTPU_INIT_ARGS=...`` in the command | ``libtpu_init_args.<generation>``, flag by flag |
| other ``export`` in the command | ``env`` |
| ``model_name`` | ``maxtext.model_name`` + the preset's dimensions (``_maxtext_models.yaml``) |
| ``per_device_batch_size`` | ``maxtext.per_device_batch`` (one rule, any HBM) |
| ``ici_*/dcn_*_parallelism`` | ``maxtext.parallelism`` |
| ``steps`` | ``steps`` |
| every other MaxText key (fp8/quantization and tile keys included) | ``maxtext.args``, value text unchanged |

What the toolkit decides itself (run_name, base_output_directory, the cluster, project,
zone, priority, restarts) and what it cannot carry (keys the pinned MaxText lacks, other
shell commands in ``--command``, unresolved variables) are listed in ``unmapped``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from infra import catalog
from toolkit.errors import CatalogError, FieldError
from toolkit.yamlfile import load_yaml
from workloads.planning import benchmark_configs, shellwords
from workloads.planning.defaults import INT32_MAX
from workloads.planning.errors import suggest
from workloads.planning.image_reference import image_problem
from workloads.planning.images import MAXTEXT_IMAGE, runs_pinned_maxtext
from workloads.planning.maxtext_keys import FILL, MODEL_KEYS, maxtext_keys, mesh_key
from workloads.planning.maxtext_numbers import PLAIN_INT
from workloads.planning.recipe_model import Recipe
from workloads.planning.recipes import RECIPES_DIR, check_image

MODELS_FILE = RECIPES_DIR / "_maxtext_models.yaml"
TRAIN_MODULES = ("MaxText.train", "maxtext.train", "maxtext.trainers.pre_train.train", "MaxText.trainers.pre_train.train")
DEFAULT_CONFIG = "src/maxtext/configs/base.yml"
# xpk flags the toolkit takes from the spec, the team or the submit command instead.
_XPK_DECIDED = {
    "cluster": "the spec's cluster",
    "project": "the spec's project",
    "zone": "the spec's pool zone",
    "priority": "the team's priority; pass --priority on submit",
    "max-restarts": "--max-restarts on submit (default by capacity mode)",
    "base_output_directory": "the team's checkpoints bucket",
    "xpk_path": "not needed",
    "workload": "the run name (`submit --name`)",
    "enable-debug-logs": "not needed",
}
_IMAGE_REF = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?/[^\s$]+(:[A-Za-z0-9_][A-Za-z0-9_.-]*|@sha256:[0-9a-f]{64})$")


class Imported(BaseModel):
    """The recipe (as the YAML mapping written) and what was not carried, one line each."""

    model_config = ConfigDict(frozen=True)

    name: str
    recipe: dict[str, Any]
    unmapped: list[str]
    device_type: str
    slices: int


def _bad(problem: str, fix: str) -> FieldError:
    return FieldError("import-recipe", problem, fix)


@lru_cache(maxsize=1)
def _models_file() -> dict[str, Any]:
    return dict(load_yaml(MODELS_FILE.read_text()))


def model_presets() -> dict[str, dict[str, Any]]:
    """model_name -> the dimensions the planner checks (MaxText's presets, read from the pinned wheel)."""
    return dict(_models_file()["models"])


# ------------------------------------------------------------------ the script


# Shell keywords before a command, and the commands that only set up the script's own shell.
_SHELL_CONTROL = frozenset({"if", "then", "else", "elif", "fi", "while", "until", "do", "done", "!", "{", "}"})
_SHELL_SETUP = frozenset({"source", ".", "set", "echo", "exit", "printf", "cd", "pip", "command", "[", "[["})


def _xpk_at(words: list[str]) -> int | None:
    """Index after ``workload create`` of xpk (``xpk``, ``xpk.py``, ``python3 xpk.py``) or after
    ``job submit`` of Cluster Toolkit's ``gcluster`` (tpu-recipes' cluster_toolkit/ scripts)."""
    for i, word in enumerate(words[:3]):
        program = word.rsplit("/", 1)[-1]
        if program in ("xpk", "xpk.py") and words[i + 1 : i + 3] == ["workload", "create"]:
            return i + 3
        if program == "gcluster" and words[i + 1 : i + 3] == ["job", "submit"]:
            return i + 3
    return None


# gcluster job submit's flags under the xpk names this module maps.
_GCLUSTER_FLAGS = {"image": "docker-image", "name": "workload", "location": "zone", "restarts": "max-restarts"}


def _runner_at(words: list[str]) -> int | None:
    """Index after MaxText's benchmark runner (``python3 -m benchmarks.benchmark_runner [xpk]`` or
    ``python3 benchmarks/benchmark_runner.py``), whose model flags live in the MaxText checkout."""
    if not words or not re.fullmatch(r"(.*/)?python3?(\.\d+)?", words[0]):
        return None
    rest = 1
    while rest < len(words) and words[rest] in _PYTHON_OPTIONS:
        rest += 1
    if words[rest : rest + 2] == ["-m", "benchmarks.benchmark_runner"]:
        at = rest + 2
    elif rest < len(words) and words[rest].endswith("benchmarks/benchmark_runner.py"):
        at = rest + 1
    else:
        return None
    if at < len(words) and not words[at].startswith("-"):
        if words[at] != "xpk":
            raise _bad(
                f"the benchmark runner's `{words[at]}` mode runs on the machine itself, not through xpk",
                "import a script that runs `benchmark_runner xpk`",
            )
        at += 1
    return at


class _Launch(BaseModel):
    """The one launch command of a script: which launcher, and its words after the launcher's name."""

    kind: str  # "xpk" (gcluster's flags renamed to xpk's) or "runner"
    words: list[str]


def _find_launch(text: str) -> tuple[_Launch, list[str]]:
    """(the launch command, other top-level command names)."""
    env: dict[str, str] = {}
    launches: list[_Launch] = []
    others: list[str] = []
    maxtext_here = False
    for words, _ in shellwords.commands(text, env):
        at = _xpk_at(words)
        runner = None if at is not None else _runner_at(words)
        if at is not None and words[at - 2] == "job":
            launches.append(_Launch(kind="xpk", words=_from_gcluster(words[at:])))
        elif at is not None:
            launches.append(_Launch(kind="xpk", words=words[at:]))
        elif runner is not None:
            launches.append(_Launch(kind="runner", words=words[runner:]))
        elif not all(shellwords.assignment(w) for w in words[1 if words[0] == "export" else 0 :]):
            program = next((w for w in words if w not in _SHELL_CONTROL), "")
            maxtext_here = maxtext_here or _train_args(words) is not None
            if program and program[0] not in "<>&0123456789" and program not in _SHELL_SETUP:
                others.append(program)
    if len(launches) > 1:
        raise _bad(f"the script launches {len(launches)} workloads", "import a script with one workload")
    if not launches:
        what = other_framework(text)
        if what:
            raise _bad(f"this is {what}, not MaxText training: the toolkit imports MaxText training recipes only", "import a MaxText recipe")
        if maxtext_here:
            raise _bad(
                "the script runs MaxText on this machine (no xpk, gcluster or benchmark_runner launch), so it names no TPU type",
                "import the xpk or benchmark_runner script of the recipe",
            )
        raise _bad(
            "no launch command (`xpk workload create`, `gcluster job submit` or `python3 -m benchmarks.benchmark_runner xpk`)",
            "pass a tpu-recipes run script or an xpk workload create line",
        )
    return launches[0], others


# What a script trains when it is not MaxText, by a word its commands carry (first match wins).
_OTHER_FRAMEWORKS = (
    (re.compile(r"maxdiffusion", re.I), "a MaxDiffusion (image/video diffusion) script"),
    (re.compile(r"accelerator-microbenchmarks|microbenchmark|run_benchmark\.py", re.I), "a microbenchmark"),
    (re.compile(r"torchrun|torch_xla|pytorch|run_clm\.py|\btorch\b|transformers/examples", re.I), "a PyTorch script"),
    (re.compile(r"\bvllm\b|jetstream|inference", re.I), "an inference script"),
)


def other_framework(text: str) -> str | None:
    """What the script runs when that is plainly not MaxText training (None when it cannot tell)."""
    return next((what for pattern, what in _OTHER_FRAMEWORKS if pattern.search(text)), None)


def _from_gcluster(words: list[str]) -> list[str]:
    """gcluster's --compute-type tpu7x --topology 4x8x8 as xpk's --device-type=tpu7x-4x8x8, its other
    flags under xpk's names, so one mapping reads both."""
    flags = xpk_flags(words)
    gen, topology = flags.pop("compute-type", None), flags.pop("topology", None)
    if gen is not None or topology is not None:
        if not (gen and topology):
            raise _bad("gcluster job submit needs both --compute-type and --topology", "give both, e.g. --compute-type tpu7x --topology 4x8x8")
        flags["device-type"] = f"{gen}-{topology}"
    return [f"--{_GCLUSTER_FLAGS.get(k, k)}={v}" for k, v in flags.items()]


def xpk_flags(words: list[str]) -> dict[str, str]:
    """--flag=value, --flag value, or a bare --flag ("true"); a flag given twice must agree."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            raise _bad(f"xpk workload create: unexpected argument {word[:60]!r}", "give xpk options as --flag=value")
        key, eq, value = word[2:].partition("=")
        if not eq:
            if i < len(words) and not words[i].startswith("--"):
                value, i = words[i], i + 1
            else:
                value = "true"
        key = "device-type" if key == "tpu-type" else key
        if key in flags and flags[key] != value:
            raise _bad(f"conflicting flags: --{key} is {flags[key]!r} and {value!r}", "keep one")
        flags[key] = value
    return flags


def device_shape(device: str) -> catalog.SliceShape:
    """tpu7x-4x8x8 (generation-topology) or v6e-256 / v5p-128 / v5litepod-16 (a count)."""
    prefix, _, rest = device.strip().lower().partition("-")
    try:
        if "x" in rest:
            gens = [g for g in catalog.GENERATIONS.values() if prefix in g.name_prefixes]
            if not gens:
                raise CatalogError(f"unknown generation {prefix!r}")
            return catalog.shape(gens[0].name, rest)
        return catalog.accelerator_type(device)
    except CatalogError as e:
        raise _bad(f"--device-type={device!r} is not a known TPU device type ({e})", "use one like tpu7x-4x8x8, v6e-256, v5p-128 or v5litepod-16") from None


# -------------------------------------------------------------- the --command


class _Command(BaseModel):
    env: dict[str, str]
    maxtext: list[str]
    unmapped: list[str]


def parse_command(command: str) -> _Command:
    """The container command: its exports, its one MaxText invocation, and the rest."""
    env: dict[str, str] = {}
    exports: dict[str, str] = {}
    maxtext: list[list[str]] = []
    unmapped: list[str] = []
    for words, _ in shellwords.commands(command, env):
        if words[0] == "export":
            exports.update(a for a in map(shellwords.assignment, words) if a)
            continue
        if all(shellwords.assignment(w) for w in words):
            continue  # a shell variable of the command line itself (not exported: not the program's env)
        # `K=v python3 -m ...`: assignments in front of a command are its environment.
        lead = 0
        while lead < len(words) - 1 and shellwords.assignment(words[lead]):
            lead += 1
        train = _train_args(words[lead:])
        if train is not None:
            exports.update(a for a in map(shellwords.assignment, words[:lead]) if a)
            maxtext.append(train)
        elif words[0] != "set":
            unmapped.append(f"--command runs `{' '.join(words)[:70]}`: not carried (the toolkit's image and runner replace it)")
    if not maxtext:
        what = other_framework(command)
        if what:
            raise _bad(f"--command runs {what}, not MaxText training: the toolkit imports MaxText training recipes only", "import a MaxText recipe")
        script = next((ln.split("`", 2)[1] for ln in unmapped if re.match(r"--command runs `(ba)?sh \S+\.sh", ln)), None)
        if script:
            # tpu-recipes' archived PyTorch layouts: the training lives in a script baked into the image.
            raise _bad(f"--command runs `{script}`, a script inside the image that the import cannot read", "import a script whose --command runs MaxText")
        raise _bad(
            "no MaxText training command (python3 -m MaxText.train ... or maxtext.trainers.pre_train.train) in --command",
            "import a script that trains with MaxText",
        )
    if len(maxtext) > 1:
        raise _bad(f"--command runs MaxText {len(maxtext)} times", "import a script with one training command")
    return _Command(env=exports, maxtext=maxtext[0], unmapped=unmapped)


def _train_args(words: list[str]) -> list[str] | None:
    """The arguments after the MaxText train module (or train.py), None if this is not one."""
    if not re.fullmatch(r"(.*/)?python3?(\.\d+)?", words[0]):
        return None
    rest = words[1:]
    while rest and rest[0] in _PYTHON_OPTIONS:  # python3 -u -m ...: buffering, not the program
        rest = rest[1:]
    # `python3 -m src.maxtext.trainers...` is the same module run from a MaxText checkout's root.
    if len(rest) > 1 and rest[0] == "-m" and rest[1].removeprefix("src.") in TRAIN_MODULES:
        return rest[2:]
    if rest and rest[0].endswith("/train.py"):
        return rest[1:]
    return None


_PYTHON_OPTIONS = frozenset({"-u", "-B", "-O", "-OO", "-s", "-E", "-I"})


# ------------------------------------------------------------ the MaxText args


def _whole(text: str, low: int) -> int | None:
    """``text`` as a plain integer in [low, INT32_MAX] (or FILL, -1, when low is FILL), else None.

    The ceiling is the int32 MaxText counts steps and sizes in; the length test comes first
    because int() refuses texts of 4,300 digits and more with a traceback.
    """
    if not PLAIN_INT.match(text) or len(text) > len(str(INT32_MAX)):
        return None
    n = int(text)
    return n if (n == FILL and low == FILL) or max(low, 1 if low == FILL else low) <= n <= INT32_MAX else None


def _config(path: str, unmapped: list[str]) -> str:
    """The config file, in the installed package's terms: ``<any prefix>/configs/X`` -> src/maxtext/configs/X."""
    rest = path.split("configs/", 1)[1] if "configs/" in path else None
    if rest is None:
        unmapped.append(f"MaxText config {path!r} is not under configs/: using {DEFAULT_CONFIG}")
        return DEFAULT_CONFIG
    if rest != "base.yml":
        unmapped.append(f"MaxText config {path!r}: carried as src/maxtext/configs/{rest}; check MaxText {MAXTEXT_IMAGE.split(':')[1]} ships it")
    return f"src/maxtext/configs/{rest}"


def _key_values(args: list[str]) -> tuple[str | None, dict[str, str]]:
    """(config file, key -> value text). A key given twice with two values is a conflict."""
    config = None
    if args and "=" not in args[0] and args[0].endswith((".yml", ".yaml")):
        config, args = args[0], args[1:]
    out: dict[str, str] = {}
    for word in args:
        key, eq, value = word.partition("=")
        if not eq or not shellwords.NAME.fullmatch(key):
            raise _bad(f"MaxText argument {word[:60]!r} is not key=value", "write every MaxText override as key=value")
        if key in out and out[key] != value:
            raise _bad(f"conflicting flags: MaxText {key} is {out[key]!r} and {value!r}", f"keep one {key}=")
        out[key] = value
    return config, out


def _value(text: str) -> int | str:
    """Integers become YAML integers (the same text back); everything else stays the exact text."""
    return int(text) if PLAIN_INT.match(text) and len(text) < 12 else text


def _model(kv: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """(model_name, the dimensions the planner checks): the preset's, with any dimension overrides applied."""
    presets = model_presets()
    name = kv.pop("model_name", "default")
    if name not in presets:
        raise _bad(
            f"model_name={name!r} is not a MaxText {presets_version()} model{suggest(name, list(presets))}",
            "use a model_name MaxText ships, or import with model_name=default and explicit dimensions",
        )
    dims = dict(presets[name])
    given = {k: kv.pop(k) for k in sorted(MODEL_KEYS & kv.keys())}
    if given and name != "default" and kv.get("override_model_config", "").lower() != "true":
        raise _bad(
            f"conflicting flags: {', '.join(given)} change preset {name}, which MaxText refuses without override_model_config=true",
            "add override_model_config=true, or drop the dimension overrides",
        )
    for key, text in given.items():
        n = _whole(text, 1)
        if n is None:
            raise _bad(f"MaxText {key}={text[:20]!r} is not a positive integer of at most {INT32_MAX}", f"write {key} as a whole number")
        dims[key] = n
    return name, dims


def presets_version() -> str:
    return str(_models_file()["maxtext_version"])


def _parallelism(kv: dict[str, str]) -> dict[str, dict[str, int]]:
    levels: dict[str, dict[str, int]] = {"ici": {}, "dcn": {}}
    for key in [k for k in kv if mesh_key(k)]:
        level, axis = mesh_key(key) or ("", "")
        text = kv.pop(key)
        n = _whole(text, FILL)
        if n is None:
            raise _bad(f"MaxText {key}={text[:20]!r} is not a degree", f"write {key} as a positive integer or -1")
        levels[level][axis] = n
    for level, rule in levels.items():
        fills = [a for a, d in rule.items() if d == FILL]
        if len(fills) > 1:
            raise _bad(
                f"conflicting flags: {', '.join(f'{level}_{a}_parallelism=-1' for a in fills)} all ask for the rest", "leave at most one axis per level at -1"
            )
    # MaxText's own defaults (base.yml): fsdp takes a slice's devices, data the slices.
    if not levels["ici"]:
        levels["ici"] = {"fsdp": FILL}
    if not levels["dcn"]:
        levels["dcn"] = {"data": FILL}
    return levels


# ---------------------------------------------------------------- the recipe

_DECIDED_KEYS = {
    "run_name": "the run name (submit --name)",
    "base_output_directory": "the team's checkpoints bucket",
    "steps": "",
    "num_slices": "",
    "hardware": "the planner",
    "compile_topology": "the planner",
    "compile_topology_num_slices": "the planner",
}


def _default_name(model: str, kv: dict[str, str], source: str) -> str:
    """<model>[-<quantization>]; for model_name=default, the file's name."""
    quant = kv.get("quantization", "")
    base = source.rsplit(".", 1)[0] if model == "default" else model
    base = f"{base}-{quant}" if quant else base
    text = re.sub(r"[^a-z0-9.]+", "-", base.lower()).strip("-.")
    return (text if text[:1].isalpha() else f"r-{text}")[:30].rstrip("-.")


# benchmark_runner's flags under the xpk names this module maps (the rest are reported as they are).
_RUNNER_FLAGS = {
    "device_type": "device-type",
    "num_slices": "num-slices",
    "base_docker_image": "docker-image",
    "cluster_name": "cluster",
    "max_restarts": "max-restarts",
}
RUNNER_DEFAULT_STEPS = 20  # benchmark_runner's --num_steps default


def _from_runner(words: list[str], maxtext_repo: Path | None) -> tuple[dict[str, str], _Command]:
    """benchmark_runner's flags (xpk-named) and the command it would build from the checkout's model config."""
    flags = {_RUNNER_FLAGS.get(k, k): v for k, v in xpk_flags(words).items()}
    model_name = flags.pop("model_name", None)
    if model_name is None:
        raise _bad("benchmark_runner has no --model_name", "give --model_name=NAME (a model of MaxText's benchmarks/ configs)")
    if maxtext_repo is None:
        raise FieldError(
            "--maxtext-repo",
            f"the script runs MaxText's benchmark runner: model {model_name!r} is defined in a MaxText checkout's benchmarks/ configs",
            "pass --maxtext-repo PATH (the MaxText directory the script runs from)",
        )
    models = benchmark_configs.parse_models(benchmark_configs.read_checkout(maxtext_repo))
    model = benchmark_configs.lookup(models, model_name)
    if model is None:
        raise FieldError(
            "--model_name",
            f"{model_name!r} is not a model of {maxtext_repo}/benchmarks{suggest(model_name.replace('-', '_'), list(models))}",
            "check the name, or pass --maxtext-repo of the MaxText checkout the recipe was written for",
        )
    unmapped = [f"--model_name={model_name}: read from {model.source} ({model.name}, MaxText model {model.model_type})"]
    steps = flags.pop("num_steps", str(RUNNER_DEFAULT_STEPS))
    args = [f"{DEFAULT_CONFIG}"]
    for key, value in model.tuning.items():
        if isinstance(value, benchmark_configs.Opaque):
            unmapped.append(f"MaxText {key}: computed by the checkout's code ({value.source[:60]}); not carried")
        elif key in ("steps", "model_name"):
            unmapped.append(f"MaxText {key}={value} of the config: the runner passes its own ({'--num_steps' if key == 'steps' else 'model_type'})")
        else:
            args.append(f"{key}={value}")
    args += [f"steps={steps}", f"model_name={model.model_type}"]
    env: dict[str, str] = {}
    if isinstance(model.xla_flags, benchmark_configs.Opaque):
        unmapped.append(f"xla_flags of {model.name}: computed by the checkout's code ({model.xla_flags.source[:60]}); not carried")
    elif model.xla_flags.strip():
        env["LIBTPU_INIT_ARGS"] = model.xla_flags.strip()
    for flag in ("libtpu_version", "libtpu_type"):
        if flag in flags:
            unmapped.append(f"--{flag}={flags.pop(flag)}: not carried; the libtpu is the image's")
    return flags, _Command(env=env, maxtext=args, unmapped=unmapped)


def import_recipe(text: str, *, name: str | None = None, source: str = "the script", maxtext_repo: Path | None = None) -> Imported:
    """The recipe a run script (or an xpk workload create line) describes; FieldError on bad input.

    ``maxtext_repo`` is the MaxText checkout a benchmark-runner script runs from (read, never run).
    """
    text = text.replace("\r\n", "\n")  # a script saved with CRLF: `\` + CR would not continue the line
    try:
        launch, others = _find_launch(text)
        if launch.kind == "runner":
            flags, command = _from_runner(launch.words, maxtext_repo)
        else:
            flags = xpk_flags(launch.words)
            if "command" not in flags:
                raise _bad("xpk workload create has no --command", "import a script whose xpk command runs MaxText")
            command = parse_command(flags.pop("command"))
    except shellwords.ShellError as e:
        raise _bad(f"{source} {e.problem}", e.fix) from None
    unmapped = list(command.unmapped)
    unmapped += [f"the script also runs `{o}` outside the submit command: not carried" for o in dict.fromkeys(others)]

    device = flags.pop("device-type", None)
    if device is None:
        raise _bad("xpk workload create has no --device-type (or --tpu-type)", "give the TPU type, e.g. --device-type=tpu7x-4x4x8")
    shape = device_shape(device)
    slices_text = flags.pop("num-slices", "1")
    slices = _whole(slices_text, 1)
    if slices is None:
        raise _bad(f"--num-slices={slices_text[:20]!r} is not a slice count", f"give --num-slices=N with 1 <= N <= {INT32_MAX}")
    image = _image(flags.pop("docker-image", None), unmapped)
    for flag, value in flags.items():
        why = _XPK_DECIDED.get(flag)
        unmapped.append(f"--{flag}={value}: " + (f"not carried; the toolkit uses {why}" if why and why != "not needed" else "not carried"))

    config, kv = _key_values(command.maxtext)
    if "num_slices" in kv and kv["num_slices"] != slices_text:
        raise _bad(
            f"conflicting flags: --num-slices={slices_text} but MaxText num_slices={kv['num_slices']}",
            "make them agree (the toolkit sets num_slices from --num-slices)",
        )
    steps_text = kv.get("steps")
    steps = 100 if steps_text is None else _whole(steps_text, 1)
    if steps is None:
        raise _bad(f"MaxText steps={str(steps_text)[:20]!r} is not a step count", f"write steps as a positive integer of at most {INT32_MAX}")
    model_name, dims = _model(kv)
    parallelism = _parallelism(kv)
    pdb_text = kv.pop("per_device_batch_size", None)
    args: dict[str, Any] = {}
    known = maxtext_keys()
    # The MaxText version is the recipe's: keys the pinned MaxText lacks are kept when the script
    # names another image (the one it was tuned for), and dropped only for the pinned one.
    pinned = runs_pinned_maxtext(image.get("ref") or image.get("registry", ""))
    kept: list[str] = []
    for key, value in kv.items():
        if key in _DECIDED_KEYS:
            why = _DECIDED_KEYS[key]
            if why:
                unmapped.append(f"MaxText {key}={value[:60]}: not carried; the toolkit sets it from {why}")
            continue
        if key not in known and pinned:
            unmapped.append(
                f"MaxText {key}={value[:60]}: not a MaxText {MAXTEXT_IMAGE.split(':')[1]} key{suggest(key, known)}; not carried"
                " (the recipe runs the toolkit's MaxText image; a script naming its own image keeps it)"
            )
            continue
        if key not in known:
            kept.append(key)
        if "$" in value:
            unmapped.append(f"MaxText {key}={value[:60]}: an unresolved shell expansion; not carried")
            continue
        args[key] = _value(value)
    kept = [k for k in kept if k in args]
    if kept:
        unmapped.append(
            f"kept {len(kept)} key(s) MaxText {MAXTEXT_IMAGE.split(':')[1]} does not have ({', '.join(kept)}): the recipe runs {image['ref']}, not the pinned MaxText"
        )
    if "max_target_length" in args and not isinstance(args["max_target_length"], int):
        raise _bad(f"MaxText max_target_length={args['max_target_length']!r} is not a whole number", "write it as an integer")

    per_device_batch = 1.0
    if pdb_text is not None:
        try:
            per_device_batch = float(pdb_text)
        except ValueError:
            raise _bad(f"MaxText per_device_batch_size={pdb_text!r} is not a number", "write it like per_device_batch_size=2") from None
    else:
        unmapped.append("per_device_batch_size not given: the recipe uses MaxText's default, 1")

    libtpu = command.env.pop("LIBTPU_INIT_ARGS", None)
    env = {}
    for key, value in command.env.items():
        if "$" in value or value == "":
            unmapped.append(f"export {key}={value[:60]!r}: empty or an unresolved shell expansion; not carried")
        else:
            env[key] = value
    gen = shape.generation.name
    name = name or _default_name(model_name, kv, source)
    recipe: dict[str, Any] = {
        "name": name,
        "description": f"Imported from {source}: {model_name} on {shape.accelerator_type} ({gen} {shape.topology}) x {slices}",
        "kind": "maxtext",
        "image": image,
        "steps": steps,
        "shapes": [shape.key],
        "generations": [gen],
        "min_chips_per_slice": shape.chips,
        "slices": slices,
    }
    if steps_text is None:
        unmapped.append("steps not given: the recipe runs 100 (submit --steps changes it)")
    if libtpu is not None:
        if "$" in libtpu:
            unmapped.append("LIBTPU_INIT_ARGS holds an unresolved shell expansion; the flags around it are carried")
        recipe["libtpu_init_args"] = {gen: [f for f in libtpu.split() if "$" not in f]}
    if env:
        recipe["env"] = env
    recipe["maxtext"] = {
        "config": _config(config, unmapped) if config else DEFAULT_CONFIG,
        "model_name": model_name,
        "model": dims,
        "args": args,
        "per_device_batch": [{"min_hbm_gib_per_device": 0, "per_device_batch_size": per_device_batch}],
        "parallelism": parallelism,
    }
    if config is None:
        unmapped.append(f"the MaxText command names no config file: using {DEFAULT_CONFIG}")
    _validate(recipe, source)
    return Imported(name=name, recipe=recipe, unmapped=unmapped, device_type=device, slices=slices)


def _image(ref: str | None, unmapped: list[str]) -> dict[str, str]:
    if ref and _IMAGE_REF.match(ref) and image_problem(ref) is None:
        return {"ref": ref}
    given = f"--docker-image={ref[:60]}: not a tagged image reference" if ref else "no --docker-image (--image)"
    unmapped.append(f"{given}; the recipe uses the toolkit's {MAXTEXT_IMAGE} (submit --image overrides)")
    return {"registry": MAXTEXT_IMAGE}


def _validate(recipe: dict[str, Any], source: str) -> None:
    try:
        model = Recipe.model_validate(recipe)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        field = "--name" if where == "name" else "import-recipe"
        raise FieldError(
            field,
            f"{source} gives a recipe that does not validate: {where}: {msg}",
            "pass --name NAME (lowercase, <= 30 characters)" if field == "--name" else "fix the script",
        ) from None
    check_image(model)
