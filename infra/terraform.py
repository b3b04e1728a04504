"""The one place that builds terraform command lines.

The binary is found once; each call is a ``Step`` that ``--dry-run`` prints and a
real run hands to ``toolkit.tools.run`` (argument lists only, never a shell), so
the dry run shows exactly the calls a real run makes. A failure is one line:
what ran, its exit code and terraform's first error line.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from toolkit import tools
from toolkit.errors import ExternalToolError

TERRAFORM_ENV_VAR = "TGK_TERRAFORM"


def find_terraform() -> str:
    binary = os.environ.get(TERRAFORM_ENV_VAR) or shutil.which("terraform") or shutil.which("tofu")
    if not binary:
        raise ExternalToolError("terraform is not on PATH — install Terraform >= 1.6 (or OpenTofu) or set TGK_TERRAFORM to its path")
    return binary


# Terraform colours its output unless told not to; its output reaches the user through
# toolkit.terminal, which shows an escape sequence instead of obeying it (TF_CLI_ARGS: every
# command, so --dry-run's steps stay the commands a user would type).
NO_COLOR = {"TF_CLI_ARGS": "-no-color"}


@dataclass(frozen=True)
class Step:
    args: tuple[str, ...]
    interactive: bool = False  # lets terraform ask (apply/destroy without an approved plan)

    def render(self) -> str:
        return " ".join(self.args)


@dataclass
class Terraform:
    workdir: Path
    binary: str = "terraform"
    env: dict[str, str] = field(default_factory=dict)

    def _cmd(self, *args: str) -> tuple[str, ...]:
        return (self.binary, f"-chdir={self.workdir}", *args)

    def init(self) -> Step:
        return Step(self._cmd("init", "-input=false", "-no-color"))

    def plan(self, out: str | None = None, destroy: bool = False) -> Step:
        args = ["plan", "-input=false"]
        if destroy:
            args.append("-destroy")
        if out:
            args.append(f"-out={out}")
        return Step(self._cmd(*args))

    def apply(self, plan_file: str) -> Step:
        return Step(self._cmd("apply", "-input=false", plan_file))

    def output_json(self) -> Step:
        return Step(self._cmd("output", "-json"))

    def run_logged(self, step: Step, log_dir: Path, log_name: str) -> tools.Completed:
        """Run ``step`` with its output kept in ``log_dir`` (read by the caller, e.g. for RESOURCE_EXHAUSTED); never raises on failure."""
        env = {**os.environ, "TF_IN_AUTOMATION": "1", **NO_COLOR, **self.env}
        log_dir.mkdir(parents=True, exist_ok=True)
        try:
            return tools.run(step.args, env=env, log_dir=log_dir, log_name=log_name)
        except ExternalToolError as e:
            raise ExternalToolError(f"{e} — install terraform or set TGK_TERRAFORM") from None

    def run(self, step: Step, *, capture: bool = False) -> str:
        """Run ``step``; its stdout if ``capture``, else '' (terraform writes to the terminal).

        An interactive step is never captured: it gets the terminal, stdin included,
        so terraform can ask its question.
        """
        env = {**os.environ, "TF_IN_AUTOMATION": "1", **NO_COLOR, **self.env}
        capture = capture and not step.interactive
        try:
            done = tools.run(step.args, env=env, capture=capture, interactive=step.interactive)
        except ExternalToolError as e:  # the binary is missing or not executable
            raise ExternalToolError(f"{e} — install terraform or set TGK_TERRAFORM") from None
        if not done.ok:
            # Terraform's first error line says what went wrong; later lines are context.
            raise done.failure(" ".join(step.args[:3]), first_line=True)
        return done.stdout
