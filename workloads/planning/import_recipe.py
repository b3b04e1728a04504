"""A tpu-recipes run script (or a bare ``xpk workload create`` line, or a JobSet manifest) -> a recipe.

Every launch layout tpu-recipes publishes is read:

| layout | launch |
|---|---|
| ``cluster_toolkit/``, ``cluster-toolkit/`` | Cluster Toolkit's ``gcluster [global flags] job submit --compute-type ... --command "..."`` |
| ``xpk/`` and the older flat scripts | ``xpk workload create --device-type=... --command="..."`` |
| Trillium's benchmark-runner scripts | ``python3 -m benchmarks.benchmark_runner xpk --model_name=...`` (the model read from a MaxText checkout) |
| ``k8s/k8s_manifest.yaml`` | a JobSet whose container runs ``bash -c '...'`` (``workloads.planning.import_manifest``) |

Pure: text in, a validated recipe and a report out; the CLI reads and writes the files.
The published scripts set shell variables (XLA_FLAGS, MAXTEXT_ARGS, ...), then run::

    gcluster job submit --compute-type tpu7x --topology 4x8x8 --num-slices 1 --image ... \\
      --command "set -e && export LIBTPU_INIT_ARGS='<flags>' && export K='v' && \\
                 python3 -u -m <MaxText train module> <config>.yml key=value ... 2>&1 | tee train.log; ..."

The command is read as the shell would (``workloads.planning.shellwords``): redirections,
pipes, ``bash -c '...'`` wrappers, ``if [ -f MaxText/train.py ]; then ...; else ...; fi``
fallbacks (the same arguments in both branches: one training), here-documents.

Where each piece goes:

| script | recipe |
|---|---|
| ``--device-type`` / ``--tpu-type``; ``--compute-type`` + ``--topology`` (``compute_types``) | ``shapes``, ``generations``, ``min_chips_per_slice`` |
| ``--num-slices`` | ``slices`` |
| ``--docker-image`` / ``--image`` (a literal, tagged reference) | ``image.ref``; else the toolkit's MaxText image |
| ``--mount SRC;DST;MODE`` / ``--storage NAME`` | ``mounts`` (where the script's data and checkpoints were); a ``base_output_directory`` on a Lustre mount -> ``checkpoint_storage: lustre`` |
| ``--gke-mtc-enabled`` | ``multi_tier_checkpointing`` |
| ``--env K=V``, ``export K=V`` in the command | ``env`` (``LIBTPU_INIT_ARGS``: ``libtpu_init_args.<generation>``, flag by flag) |
| ``model_name`` | ``maxtext.model_name`` + the preset's dimensions (``_maxtext_models.yaml``) |
| ``per_device_batch_size`` | ``maxtext.per_device_batch`` (one rule, any HBM) |
| ``ici_*/dcn_*_parallelism`` | ``maxtext.parallelism`` |
| ``steps`` | ``steps`` |
| every other MaxText key (data paths included: ``workloads.planning.mounts`` checks them at plan time) | ``maxtext.args``, value text unchanged |
| the README's ``completed step: N, seconds: S, ...`` line or summary-table row (``step_figures``) | ``published`` |

Every other flag is listed in ``unmapped`` with what the toolkit uses instead (the cluster,
zone, queue, namespace, priority, restarts, placement) or why it is not carried; nothing is
dropped without a line. A script that trains something else (MaxDiffusion, PyTorch, MaxText
post-training, a cleanup or helper script) is refused with one line saying what it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from infra import catalog
from toolkit import credentials
from toolkit.errors import CatalogError, FieldError
from toolkit.inputfile import NotReadable, read_head
from toolkit.yamlfile import load_yaml
from workloads.planning import benchmark_configs, compute_types, shellwords, step_figures
from workloads.planning.defaults import INT32_MAX
from workloads.planning.errors import suggest
from workloads.planning.image_reference import image_problem
from workloads.planning.images import MAXTEXT_IMAGE, runs_pinned_maxtext
from workloads.planning.maxtext_keys import FILL, MODEL_KEYS, maxtext_keys, mesh_key, secret_env_name, secret_keys
from workloads.planning.maxtext_numbers import PLAIN_INT
from workloads.planning.mounts import PATH_KEYS, local_path
from workloads.planning.recipe_model import Recipe
from workloads.planning.recipes import RECIPES_DIR, check_image

MODELS_FILE = RECIPES_DIR / "_maxtext_models.yaml"
TRAIN_MODULES = ("MaxText.train", "maxtext.train", "maxtext.trainers.pre_train.train", "MaxText.trainers.pre_train.train")
DEFAULT_CONFIG = "src/maxtext/configs/base.yml"
_IMAGE_REF = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?/[^\s$]+(:[A-Za-z0-9_][A-Za-z0-9_.-]*|@sha256:[0-9a-f]{64})$", re.ASCII)


class Imported(BaseModel):
    """The recipe (as the YAML mapping written), what was carried and what was not, one line each."""

    model_config = ConfigDict(frozen=True)

    name: str
    recipe: dict[str, Any]
    unmapped: list[str]
    device_type: str
    slices: int
    carried: list[str] = []  # the launch flags (or manifest fields) that went into the recipe


def _bad(problem: str, fix: str) -> FieldError:
    return FieldError("import-recipe", problem, fix)


@lru_cache(maxsize=1)
def _models_file() -> dict[str, Any]:
    return dict(load_yaml(MODELS_FILE.read_text()))


def model_presets() -> dict[str, dict[str, Any]]:
    """model_name -> the dimensions the planner checks (MaxText's presets, read from the pinned wheel)."""
    return dict(_models_file()["models"])


# ------------------------------------------------------------------ the flags

# What the toolkit uses instead of a launcher flag it decides itself (xpk's, gcluster's and the runner's names).
_DECIDED = {
    "cluster": "the spec's cluster",
    "cluster_name": "the spec's cluster",
    "project": "the spec's project",
    "zone": "the spec's pool zone",
    "location": "the spec's pool zone",
    "priority": "the team's priority (submit --priority)",
    "queue": "the team's Kueue queue",
    "gke-namespace": "the team's namespace",
    "namespace": "the team's namespace",
    "max-restarts": "submit --max-restarts (default by capacity mode)",
    "max_restarts": "submit --max-restarts (default by capacity mode)",
    "restarts": "submit --max-restarts (default by capacity mode)",
    "restart-on-exit-codes": "its own failure policy (every exit restarts the run but 1, 2 and the recipe's fatal_exit_codes)",
    "grace-period": "its own termination grace period",
    "gke-ttl-after-finished": "its own cleanup (`cleanup`)",
    "workload": "the run name (submit --name)",
    "name": "the run name (submit --name)",
    "on-demand": "the pool's capacity mode (the spec's tpu_pools)",
    "spot": "the pool's capacity mode (the spec's tpu_pools)",
    "flex": "the pool's capacity mode (the spec's tpu_pools)",
    "reservation": "the pool's capacity mode (the spec's tpu_pools)",
    "placement-policy": "the spec's node pools (their placement)",
    "node-constraint": "the pool the planner picks from the spec's tpu_pools",
    "gke-nap-provisioning": "the spec's node pools",
    "gke-disable-parallel-containers": "one container per VM holding all its chips",
    "gke-scheduler": "the default scheduler, with Kueue admission",
    "scheduler": "the default scheduler, with Kueue admission",
    "await-job-completion": "submit (it waits for admission) and `status`",
    "base_output_directory": "the team's checkpoints bucket",
}
# Flags that change how the launcher itself behaves, not the run.
_NOT_NEEDED = frozenset({"skip-prereqs", "verbose", "enable-debug-logs", "dry-run", "dry-run-out", "xpk_path", "enable-ml-diagnostics"})
# Flags that build an image from a local directory the import cannot read.
_BUILDS = frozenset({"base-docker-image", "base-image", "build-context", "script-dir"})
# Flags a launcher may give more than once.
_REPEATED = frozenset({"mount", "storage", "env", "node-constraint"})


def flag_list(words: list[str], launcher: str) -> list[tuple[str, str]]:
    """``--flag=value``, ``--flag value`` or a bare ``--flag`` ("true"), in order, repeats kept."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            raise _bad(f"{launcher}: unexpected argument {word[:60]!r}", "give its options as --flag=value")
        key, eq, value = word[2:].partition("=")
        if not eq:
            if i < len(words) and not words[i].startswith("--"):
                value, i = words[i], i + 1
            else:
                value = "true"
        out.append(("device-type" if key == "tpu-type" else key, value))
    return out


def _single(flags: list[tuple[str, str]]) -> dict[str, str]:
    """The flags given once (a repeatable one is kept as its list elsewhere); a flag given twice must agree."""
    out: dict[str, str] = {}
    for key, value in flags:
        if key in _REPEATED:
            continue
        if key in out and out[key] != value:
            raise _bad(f"conflicting flags: --{key} is {out[key]!r} and {value!r}", "keep one")
        out[key] = value
    return out


def xpk_flags(words: list[str]) -> dict[str, str]:
    """xpk's flags as a mapping (--tpu-type read as --device-type); a flag given twice must agree."""
    return _single(flag_list(words, "xpk workload create"))


def _flag_note(key: str, value: str) -> str:
    """The report line for a flag the recipe does not carry."""
    shown = f"--{key}" if value == "true" else f"--{key}={value[:80]}"
    if key in _DECIDED:
        return f"{shown}: not carried; the toolkit uses {_DECIDED[key]}"
    if key in _NOT_NEEDED:
        return f"{shown}: not carried (it changes the launcher's own behaviour, not the run)"
    if key in _BUILDS:
        return f"{shown}: not carried; it builds an image from a local directory the import cannot read"
    if key == "env-file":
        return f"{shown}: not carried; the file is not read (give the variables with --env K=V, or export them in --command)"
    return f"{shown}: not carried (a flag the import does not know)"


# ------------------------------------------------------------------ the script


# Shell keywords before a command, and the commands that only set up or steer the script's own shell.
_SHELL_CONTROL = frozenset({"if", "then", "else", "elif", "fi", "while", "until", "do", "done", "!", "{", "}", "time"})
_SHELL_SETUP = frozenset(
    {"source", ".", "set", "echo", "exit", "printf", "cd", "pip", "command", "[", "[[", "test", "true", "false", ":", "for", "case", "esac", "return"}
)
_SHELL_STEER = frozenset({"wait", "sleep", "trap", "kill", "shift", "unset", "read", "local", "declare", "_sigterm"})
# Inside the container's command, what only steers its shell (a `cd` or `pip install` there is reported).
_COMMAND_QUIET = frozenset({"set", "echo", "exit", "[", "[[", "test", "true", "false", ":", "return", "command", "for", "case", "esac"}) | _SHELL_STEER


def _program(words: list[str]) -> list[str]:
    """The command without the shell keywords in front of it (``then python3 ...`` -> ``python3 ...``)."""
    n = 0
    while n < len(words) and words[n] in _SHELL_CONTROL:
        n += 1
    return words[n:]


@dataclass
class Launch:
    """The one launch of a script: which launcher, its flags as given, and the container's command."""

    kind: str  # "xpk", "xpk-pathways", "gcluster", "runner" or "k8s"
    flags: list[tuple[str, str]]
    notes: list[str] = field(default_factory=list)  # k8s: the manifest fields not carried


def _launch(words: list[str]) -> Launch | None:
    """The launch this command is, if it is one."""
    program = words[0].rsplit("/", 1)[-1]
    for i, word in enumerate(words[:3]):
        prog = word.rsplit("/", 1)[-1]
        if prog in ("xpk", "xpk.py") and words[i + 1 : i + 2] == ["workload"] and words[i + 2 : i + 3] in (["create"], ["create-pathways"]):
            kind = "xpk" if words[i + 2] == "create" else "xpk-pathways"
            return Launch(kind=kind, flags=flag_list(words[i + 3 :], f"xpk workload {words[i + 2]}"))
    # gcluster [--cluster C --location L --project P] job submit ...: the global flags before the
    # subcommand count as its own. The binary may be a path the script computed ("$(cd ...)/gcluster").
    if program == "gcluster" or words[0].startswith("$("):
        i = 1
        while i < len(words) and words[i].startswith("--"):
            i += 1 if "=" in words[i] or i + 1 >= len(words) or words[i + 1].startswith("--") else 2
        if words[i : i + 2] == ["job", "submit"]:
            return Launch(kind="gcluster", flags=flag_list(words[1:i] + words[i + 2 :], "gcluster job submit"))
    runner = _runner_at(words)
    if runner is not None:
        return Launch(kind="runner", flags=flag_list(words[runner:], "benchmark_runner"))
    return None


def _runner_at(words: list[str]) -> int | None:
    """Index after MaxText's benchmark runner (``python3 -m benchmarks.benchmark_runner [xpk]`` or
    ``python3 benchmarks/benchmark_runner.py``), whose model flags live in the MaxText checkout."""
    if not words or not re.fullmatch(r"(.*/)?python3?(\.\d+)?", words[0], re.ASCII):
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


# Commands that remove what a run left behind: a script made of them trains nothing.
_CLEANUP = (
    (("xpk", "workload", "delete"), "xpk workload delete"),
    (("xpk", "storage", "detach"), "xpk storage detach"),
    (("xpk", "storage", "delete"), "xpk storage delete"),
    (("xpk", "cluster", "delete"), "xpk cluster delete"),
    (("gcluster", "job", "cancel"), "gcluster job cancel"),
    (("gcluster", "job", "delete"), "gcluster job delete"),
    (("kubectl", "delete"), "kubectl delete"),
)


def _cleanup(words: list[str]) -> str | None:
    names = [w.rsplit("/", 1)[-1] for w in words[:3]]
    return next((what for prefix, what in _CLEANUP if tuple(names[: len(prefix)]) == prefix), None)


def find_launch(text: str) -> tuple[Launch, list[str]]:
    """(the launch command, the other top-level commands, as report lines)."""
    env: dict[str, str] = {}
    launches: list[Launch] = []
    others: list[str] = []
    maxtext_here = False
    cleanup: str | None = None
    for cmd in shellwords.read_commands(text, env):
        words = _program(cmd.words)
        if not words:
            continue
        launch = _launch(words)
        if launch is not None:
            launches.append(launch)
            continue
        if all(shellwords.assignment(w) for w in words[1 if words[0] == "export" else 0 :]):
            continue
        words = words[next(i for i, w in enumerate(words) if not shellwords.assignment(w)) :]  # `K=v program ...`: the program
        maxtext_here = maxtext_here or _train_args(words) is not None
        cleanup = cleanup or _cleanup(words)
        program = words[0]
        if program[0] not in "<>&0123456789-" and program not in _SHELL_SETUP and program not in _SHELL_STEER:
            others.append(program)
    if len(launches) > 1:
        raise _bad(f"the script launches {len(launches)} workloads", "import a script with one workload")
    if not launches:
        raise _bad(_what_instead(text, cleanup, maxtext_here, others), "import the recipe's cluster_toolkit/ or xpk/ run script, or its k8s_manifest.yaml")
    return launches[0], [f"the script also runs `{o}` outside the submit command: not carried" for o in dict.fromkeys(others)]


def _what_instead(text: str, cleanup: str | None, maxtext_here: bool, programs: list[str]) -> str:
    """What a script with no launch is: its one-line refusal (the order matters: the most telling first)."""
    kind = re.search(r"^kind:\s*(\S+)", text, re.M | re.ASCII) if re.search(r"^apiVersion:", text, re.M | re.ASCII) else None
    if kind:
        return f"this is a Kubernetes {kind.group(1)[:40]} manifest; the import reads JobSet manifests (tpu-recipes' k8s_manifest.yaml)"
    if text.lstrip().startswith(("{", "[")):
        return "this is a JSON file (a configuration the recipe's scripts copy), not a run script"
    if cleanup:
        return f"this is a cleanup script (`{cleanup}`): it removes what a run left and trains nothing"
    what = other_framework(text)
    if what:
        return f"this is {what}, not MaxText pre-training: the toolkit imports MaxText pre-training recipes only"
    if maxtext_here:
        return "this is a script that runs MaxText on this machine (no xpk, gcluster or benchmark_runner launch), so it names no TPU type"
    if re.search(r"gcloud\s+(alpha\s+)?compute\s+tpus\s+tpu-vm\s+ssh", text, re.ASCII):
        return "this is a TPU VM script (`gcloud compute tpus tpu-vm ssh`): it runs on TPU VMs directly, not on GKE"
    if not programs:
        return "this is a settings file: it sets variables and launches nothing"
    return "no launch command (`xpk workload create`, `gcluster job submit` or `python3 -m benchmarks.benchmark_runner xpk`)"


# What a script trains when it is not MaxText, by a word its commands carry (first match wins).
_OTHER_FRAMEWORKS = (
    (re.compile(r"maxdiffusion", re.I), "a MaxDiffusion (image/video diffusion) script"),
    (re.compile(r"diffusers|stable-diffusion", re.I), "a diffusion script (Hugging Face diffusers)"),
    (re.compile(r"post_train|train_rl\b|train_sft\b", re.I | re.ASCII), "MaxText post-training (reinforcement learning or fine-tuning from a checkpoint)"),
    (re.compile(r"accelerator-microbenchmarks|microbenchmark|run_benchmark\.py", re.I), "a microbenchmark"),
    (re.compile(r"torchrun|torch_xla|pytorch|run_clm\.py|\btorch\b|transformers/examples", re.I | re.ASCII), "a PyTorch script"),
    (re.compile(r"\bvllm\b|jetstream|inference", re.I | re.ASCII), "an inference script"),
)


def other_framework(text: str) -> str | None:
    """What the script runs when that is plainly not MaxText pre-training (None when it cannot tell).

    Asked only of a script or command that runs no MaxText training, so a word in an image's
    name (``.../jetstream-maxtext-ar/...``) cannot turn a MaxText recipe into something else.
    """
    return next((what for pattern, what in _OTHER_FRAMEWORKS if pattern.search(text)), None)


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


def parse_command(command: str, env: dict[str, str] | None = None) -> _Command:
    """The container command: its exports, its MaxText training (one, or the same in each branch), and the rest."""
    exports: dict[str, str] = {}
    runs: list[list[str]] = []
    unmapped: list[str] = []
    _read_command(command, dict(env or {}), exports, runs, unmapped, depth=0)
    if not runs:
        what = other_framework(command)
        if what:
            raise _bad(
                f"--command runs {what}, not MaxText pre-training: the toolkit imports MaxText pre-training recipes only",
                "import a MaxText pre-training recipe",
            )
        script = next((ln.split("`", 2)[1] for ln in unmapped if re.match(r"--command runs `(ba)?sh \S+\.sh", ln, re.ASCII)), None)
        if script:
            # tpu-recipes' archived PyTorch layouts: the training lives in a script baked into the image.
            raise _bad(f"--command runs `{script}`, a script inside the image that the import cannot read", "import a script whose --command runs MaxText")
        raise _bad(
            "no MaxText training command (python3 -m MaxText.train ... or maxtext.trainers.pre_train.train) in --command",
            "import a script that trains with MaxText",
        )
    first = _key_values(runs[0])[1]
    if any(_key_values(r)[1] != first for r in runs[1:]):
        raise _bad(f"--command runs MaxText {len(runs)} times with different arguments", "import a script with one training command")
    if len(runs) > 1:
        unmapped.append(f"--command runs MaxText in {len(runs)} places (a fallback on the image's layout) with the same arguments: carried once")
    return _Command(env=exports, maxtext=runs[0], unmapped=list(dict.fromkeys(unmapped)))


def _read_command(text: str, env: dict[str, str], exports: dict[str, str], runs: list[list[str]], unmapped: list[str], depth: int) -> None:
    for cmd in shellwords.read_commands(text, env):
        words = _program(cmd.words)
        if not words:
            continue
        if words[0] == "export":
            exports.update(a for a in map(shellwords.assignment, words) if a)
            continue
        if all(shellwords.assignment(w) for w in words):
            continue  # a shell variable of the command line itself (not exported: not the program's env)
        if words[0].rsplit("/", 1)[-1] in ("bash", "sh") and len(words) > 2 and re.fullmatch(r"-[a-z]*c", words[1]) and depth < 4:
            # `bash -c '<script>'`: the script is the command (it sees what the outer shell exported).
            _read_command(words[2], {**env, **exports}, exports, runs, unmapped, depth + 1)
            continue
        # `K=v python3 -m ...`: assignments in front of a command are its environment.
        lead = 0
        while lead < len(words) - 1 and shellwords.assignment(words[lead]):
            lead += 1
        train = _train_args(words[lead:])
        if train is not None:
            exports.update(a for a in map(shellwords.assignment, words[:lead]) if a)
            runs.append(train)
        elif words[0] not in _COMMAND_QUIET:
            unmapped.append(f"--command runs `{' '.join(words)[:70]}`: not carried (the toolkit's image and runner replace it)")


def _train_args(words: list[str]) -> list[str] | None:
    """The arguments after the MaxText train module (or train.py), None if this is not one."""
    if not re.fullmatch(r"(.*/)?python3?(\.\d+)?", words[0], re.ASCII):
        return None
    rest = words[1:]
    while rest and rest[0] in _PYTHON_OPTIONS:  # python3 -u -m ...: buffering, not the program
        rest = rest[1:]
    # `python3 -m src.maxtext.trainers...` is the same module run from a MaxText checkout's root.
    if len(rest) > 1 and rest[0] == "-m" and rest[1].removeprefix("src.") in TRAIN_MODULES:
        return rest[2:]
    if rest and rest[0].endswith("/train.py") and "post_train" not in rest[0]:
        return rest[1:]
    return None


_PYTHON_OPTIONS = frozenset({"-u", "-B", "-O", "-OO", "-s", "-E", "-I"})


# ------------------------------------------------------------ the MaxText args


def _whole(text: str, low: int) -> int | None:
    """``text`` as a plain integer in [low, INT32_MAX] (or FILL, -1, when low is FILL), else None.

    The ceiling is the int32 MaxText counts steps and sizes in; the length test comes first
    because int() refuses texts of 4,300 digits and more with a traceback.
    """
    if not PLAIN_INT.fullmatch(text) or len(text) > len(str(INT32_MAX)):
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
    return int(text) if PLAIN_INT.fullmatch(text) and len(text) < 12 else text


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
    base = source.rsplit("/", 1)[-1].rsplit(".", 1)[0] if model == "default" else model
    base = f"{base}-{quant}" if quant else base
    text = re.sub(r"[^a-z0-9.]+", "-", base.lower()).strip("-.")
    return (text if text[:1].isalpha() else f"r-{text}")[:30].rstrip("-.")


# benchmark_runner's flags under the xpk names this module maps (the rest are reported as they are).
_RUNNER_FLAGS = {
    "device_type": "device-type",
    "num_slices": "num-slices",
    "base_docker_image": "docker-image",
}
RUNNER_DEFAULT_STEPS = 20  # benchmark_runner's --num_steps default


def _from_runner(flag_pairs: list[tuple[str, str]], maxtext_repo: Path | None) -> tuple[dict[str, str], _Command]:
    """benchmark_runner's flags (xpk-named) and the command it would build from the checkout's model config."""
    flags = {_RUNNER_FLAGS.get(k, k): v for k, v in _single(flag_pairs).items()}
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


@dataclass
class _Target:
    """What the launch flags say about the run itself."""

    device: str
    shape: catalog.SliceShape
    slices_text: str
    image_ref: str | None
    mounts: list[dict[str, Any]]
    env: dict[str, str]
    multi_tier: bool
    carried: list[str]


def _target(kind: str, flags: dict[str, str], pairs: list[tuple[str, str]], unmapped: list[str]) -> _Target:
    """The slice, slices, image, mounts and env the launch asks for; every other flag becomes a report line."""
    carried: list[str] = []

    def take(key: str) -> str | None:
        value = flags.pop(key, None)
        if value is not None:
            carried.append(f"--{key}")
        return value

    pathways = next((k for k in [*flags, *(k for k, _ in pairs)] if "pathways" in k), None)
    if kind == "xpk-pathways" or pathways:
        how = "`xpk workload create-pathways`" if kind == "xpk-pathways" else f"--{pathways}"
        raise _bad(
            f"the script runs MaxText on Pathways ({how}); the toolkit runs MaxText as TPU pods without Pathways", "import the recipe's non-Pathways script"
        )
    if kind == "gcluster":
        compute, topology = take("compute-type"), take("topology")
        if compute is None:
            raise FieldError("--compute-type", "gcluster job submit has no --compute-type", "give the TPU type, e.g. --compute-type tpu7x --topology 4x8x8")
        shape, notes = compute_types.slice_shape(compute, topology)
        unmapped += notes
        device = shape.key
        image = take("image")
    else:
        device_text = take("device-type")
        if device_text is None:
            raise _bad(
                f"{'the manifest' if kind == 'k8s' else 'xpk workload create'} has no --device-type (or --tpu-type)",
                "give the TPU type, e.g. --device-type=tpu7x-4x4x8",
            )
        device, shape = device_text, device_shape(device_text)
        image = take("docker-image")
    slices_text = take("num-slices") or "1"
    mounts: list[dict[str, Any]] = []
    env: dict[str, str] = {}
    for key, value in pairs:
        if key == "mount" and kind == "gcluster":
            mounts.append(_gcluster_mount(value, unmapped))
        elif key == "storage" and kind != "gcluster":
            mounts.append(_storage_mount(value))
        elif key == "env" and kind != "gcluster":
            k, eq, v = value.partition("=")
            if not eq or not shellwords.NAME.fullmatch(k):
                raise _bad(f"--env {value[:60]!r} is not NAME=value", "write it as --env NAME=value")
            env[k] = v
        else:
            continue
        carried.append(f"--{key}")
    multi_tier = take("gke-mtc-enabled" if kind == "gcluster" else "mtc-enabled") is not None
    if "command" in flags:
        carried.append("--command")
    for key, value in flags.items():
        if key != "command":
            unmapped.append(_flag_note(key, value))
    for key, value in pairs:
        if key in _REPEATED and f"--{key}" not in carried:
            unmapped.append(_flag_note(key, value))
    return _Target(device, shape, slices_text, image, mounts, env, multi_tier, list(dict.fromkeys(carried)))


def _mount_kind(source: str, path: str) -> str:
    """gcs (a bucket through GCS FUSE), lustre (a Lustre volume, by its name or mount path) or volume (any other)."""
    if source.startswith("gs://"):
        return "gcs"
    return "lustre" if "lustre" in f"{source} {path}".lower() else "volume"


def _gcluster_mount(value: str, unmapped: list[str]) -> dict[str, Any]:
    """``--mount SRC;DST[;ro|rw][;options=...][;attributes=...]`` as a recipe mount."""
    parts = value.split(";")
    if len(parts) < 2 or not parts[1].startswith("/"):
        raise FieldError("--mount", f"{value[:80]!r} is not SOURCE;/PATH[;ro|rw]", "write it as gcluster takes it, e.g. gs://BUCKET;/data;ro")
    source, path, rest = parts[0], parts[1].rstrip("/") or "/", parts[2:]
    mode = rest[0] if rest and rest[0] in ("ro", "rw") else "rw"
    extra = [p for p in rest if p not in ("ro", "rw")]
    if extra:
        unmapped.append(
            f"--mount {source[:40]};{path}: {';'.join(extra)[:80]}: not carried (the toolkit's dataset and checkpoint mounts set their own options)"
        )
    return {"kind": _mount_kind(source, path), "source": source, "path": path, "read_only": mode == "ro"}


def _storage_mount(name: str) -> dict[str, Any]:
    """xpk's ``--storage NAME``: a storage object whose mount path xpk keeps with it (read later from the paths)."""
    kind = "lustre" if "lustre" in name.lower() else "gcs" if re.search(r"gcs|fuse|bucket", name, re.I) else "volume"
    return {"kind": kind, "source": f"xpk storage {name}", "path": None, "read_only": False}


def _place_mounts(mounts: list[dict[str, Any]], kv: dict[str, str], unmapped: list[str]) -> str | None:
    """Fill an xpk storage's mount path from the paths the command uses; the checkpoint storage a local
    base_output_directory on a mount asks for; one report line per data path on a mount."""
    local = {k: v for k, v in kv.items() if (k in PATH_KEYS or k == "base_output_directory") and local_path(v)}
    unplaced = [m for m in mounts if m["path"] is None]
    values = sorted({local_path(v) or "" for v in local.values()})
    if len(unplaced) == 1 and len(values) >= 2:
        common = _common_dir(values)
        if common.count("/") >= 2:
            unplaced[0]["path"] = common
            unmapped.append(f"{unplaced[0]['source']}: mounted at {common} (read from the paths the command uses; xpk keeps it with the storage)")
    for m in mounts:
        if m["path"] is None:
            unmapped.append(f"{m['source']}: its mount path lives with the xpk storage object, not in the script; not known here")
    storage = None
    out = local.get("base_output_directory")
    if out is not None:
        on = _mount_of(out, mounts)
        if on is not None and on["kind"] == "lustre":
            storage = "lustre"
        elif on is not None and on["kind"] == "gcs" and not on["read_only"]:
            storage = "gcsfuse"
        if storage:
            unmapped.append(
                f"MaxText base_output_directory={out[:60]} is on the script's {on['kind']} mount {on['path']}:"  # type: ignore[index]
                f" the recipe checkpoints with checkpoint_storage {storage} (submit --checkpoint-storage changes it)"
            )
        else:
            unmapped.append(
                f"MaxText base_output_directory={out[:60]}: a local path no mount of the script provides; the toolkit writes to the team's checkpoints bucket"
            )
    for key, value in local.items():
        if key == "base_output_directory":
            continue
        on = _mount_of(value, mounts)
        where = f"on the script's {on['kind']} mount of {on['source'][:50]} at {on['path']}" if on else "a local path no mount of the script provides"
        unmapped.append(
            f"MaxText {key}={value[:70]}: {where}; carried as written, and planning checks that the run mounts it"
            " (--dataset NAME, or --checkpoint-storage lustre for a path on Lustre)"
        )
    return storage


def _common_dir(paths: list[str]) -> str:
    parts = [p.split("/") for p in paths]
    common: list[str] = []
    for items in zip(*parts, strict=False):
        if len(set(items)) != 1:
            break
        common.append(items[0])
    return "/".join(common) or "/"


def _mount_of(path: str, mounts: list[dict[str, Any]]) -> dict[str, Any] | None:
    p = local_path(path) or ""
    return next((m for m in mounts if m["path"] and (p == m["path"] or p.startswith(m["path"].rstrip("/") + "/"))), None)


def import_recipe(
    text: str,
    *,
    name: str | None = None,
    source: str = "the script",
    maxtext_repo: Path | None = None,
    readmes: list[step_figures.Readme] | None = None,
    date: str | None = None,
) -> Imported:
    """The recipe a run script, JobSet manifest or xpk workload create line describes; FieldError on bad input.

    ``maxtext_repo`` is the MaxText checkout a benchmark-runner script runs from (read, never run).
    ``readmes`` are the READMEs beside the script, nearest first (``readmes_near``): the
    publisher's step time is read from them (``step_figures``), dated ``date`` (the day read).
    """
    from workloads.planning import import_manifest

    text = text.replace("\r\n", "\n")  # a script saved with CRLF: `\` + CR would not continue the line
    unmapped: list[str] = []
    try:
        if import_manifest.is_manifest(text):
            pairs, notes = import_manifest.launch_flags(text)
            launch, others = Launch(kind="k8s", flags=pairs), notes
        else:
            launch, others = find_launch(text)
        if launch.kind == "runner":
            flags, command = _from_runner(launch.flags, maxtext_repo)
            pairs = []
        else:
            flags, pairs = _single(launch.flags), [(k, v) for k, v in launch.flags if k in _REPEATED]
            if "command" not in flags:
                raise _bad(f"{'the manifest' if launch.kind == 'k8s' else launch.kind} has no --command", "import a script whose launch command runs MaxText")
            command = parse_command(flags["command"])
    except shellwords.ShellError as e:
        raise _bad(f"{source} {e.problem}", e.fix) from None
    unmapped += command.unmapped
    target = _target(launch.kind, flags, pairs, unmapped)
    unmapped += others
    shape, slices_text = target.shape, target.slices_text
    slices = _whole(slices_text, 1)
    if slices is None:
        raise _bad(f"--num-slices={slices_text[:20]!r} is not a slice count", f"give --num-slices=N with 1 <= N <= {INT32_MAX}")
    image = _image(target.image_ref, unmapped)

    config, kv = _key_values(command.maxtext)
    if "num_slices" in kv and kv["num_slices"] != slices_text:
        raise _bad(
            f"conflicting flags: --num-slices={slices_text} but MaxText num_slices={kv['num_slices']}",
            "make them agree (the toolkit sets num_slices from --num-slices)",
        )
    storage = _place_mounts(target.mounts, kv, unmapped)
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
        if key in secret_keys():  # never the value, not even in a note: the notes are printed and kept in the recipe
            unmapped.append(f"MaxText {key}: a credential; not carried — run with --secret-env {secret_env_name(key)}=SECRET/KEY (a Kubernetes Secret)")
            continue
        if key in _DECIDED_KEYS:
            why = _DECIDED_KEYS[key]
            if why and not (key == "base_output_directory" and (storage or local_path(value))):
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

    env_in = {**command.env, **target.env}
    libtpu = env_in.pop("LIBTPU_INIT_ARGS", None)
    env = {}
    for key, value in env_in.items():
        if credentials.is_secret_name(key):
            unmapped.append(
                f"export {key}: a credential; not carried — run with --secret-env {key}=SECRET/KEY, or add secret_env: {{{key}: SECRET/KEY}} to the recipe"
            )
            continue
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
    if target.multi_tier:
        recipe["multi_tier_checkpointing"] = True
    if storage:
        recipe["checkpoint_storage"] = storage
    if target.mounts:
        recipe["mounts"] = target.mounts
    seq = args.get("max_target_length", dims["max_target_length"])
    facts = step_figures.RecipeFacts(
        model_name=model_name,
        path_parts=tuple(source.split("/")[:-1]),
        chips=shape.chips * slices,
        seq=int(seq),
        quantization=str(args.get("quantization", "")),
        global_batch=int(per_device_batch * shape.devices * slices),
    )
    figure = step_figures.published_figure(readmes or [], facts, date=date or _today())
    if figure is not None:
        recipe["published"] = figure
    elif readmes:
        unmapped.append(f"no published step time for this recipe in {', '.join(r.path for r in readmes)[:160]}")
    _validate(recipe, source)
    return Imported(name=name, recipe=recipe, unmapped=unmapped, device_type=target.device, slices=slices, carried=target.carried)


def _today() -> str:
    import datetime

    return datetime.date.today().isoformat()


README_LEVELS = 4  # a script's README is beside it or up to the model's / the generation's directory
LAUNCH_DIRS = frozenset({"cluster_toolkit", "cluster-toolkit", "xpk", "k8s", "scripts"})  # a recipe's launcher directories


def readmes_near(script: Path) -> list[step_figures.Readme]:
    """The README.md files in the script's directory and the ones above it, nearest first.

    Up to ``README_LEVELS`` levels, never above a ``training/`` directory (the generation's
    README, with its summary table, is the last); shown relative to the directory holding
    ``training/``. The recipe's own: the script's directory, and the one above a launcher directory.
    """
    out: list[step_figures.Readme] = []
    here = script.resolve().parent
    root = next((p.parent for p in [here, *here.parents] if p.name == "training"), None)
    own = {here, here.parent} if here.name in LAUNCH_DIRS else {here}
    for _ in range(README_LEVELS + 1):
        readme = here / "README.md"
        if readme.is_file():
            shown = str(readme.relative_to(root)) if root is not None and readme.is_relative_to(root) else str(readme)
            try:  # its head only, never blocking: a README is text someone else wrote, of any size
                head = read_head(readme, 4 * step_figures.MAX_README_CHARS).decode("utf-8", errors="replace")
            except (OSError, NotReadable):
                head = ""
            out.append(step_figures.Readme(shown, head[: step_figures.MAX_README_CHARS], here in own))
        if here.name == "training" or here.parent == here:
            break
        here = here.parent
    return out


def source_path(script: Path) -> str:
    """The script as named in a recipe: relative to the directory holding ``training/`` when it is in one."""
    resolved = script.resolve()
    root = next((p.parent for p in resolved.parents if p.name == "training"), None)
    return str(resolved.relative_to(root)) if root is not None else script.name


def _image(ref: str | None, unmapped: list[str]) -> dict[str, str]:
    if ref and _IMAGE_REF.fullmatch(ref) and image_problem(ref) is None:
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
