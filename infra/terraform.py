"""The one place that runs the terraform CLI.

Argument lists only (never a shell), the binary found once, failures turned into
one-line errors. ``commands()`` returns what would run, so ``--dry-run`` prints
exactly the calls a real run makes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import ExternalToolError

TERRAFORM_ENV_VAR = "TGK_TERRAFORM"


def find_terraform() -> str:
    binary = os.environ.get(TERRAFORM_ENV_VAR) or shutil.which("terraform") or shutil.which("tofu")
    if not binary:
        raise ExternalToolError(
            "terraform is not on PATH — install Terraform >= 1.6 (or OpenTofu) or set TGK_TERRAFORM to its path"
        )
    return binary


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

    def run(self, step: Step, *, capture: bool = False) -> str:
        env = {**os.environ, "TF_IN_AUTOMATION": "1", **self.env}
        try:
            proc = subprocess.run(
                list(step.args),
                env=env,
                text=True,
                stdout=subprocess.PIPE if capture else None,
                stderr=subprocess.PIPE if capture else None,
                check=False,
            )
        except FileNotFoundError:
            raise ExternalToolError(f"cannot run {step.args[0]!r} — install terraform or set TGK_TERRAFORM") from None
        if proc.returncode != 0:
            detail = ""
            if capture and proc.stderr:
                lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("╷") and not ln.startswith("╵")]
                detail = ": " + (lines[0].lstrip("│ ") if lines else "")
            raise ExternalToolError(f"`{' '.join(step.args[:3])}` failed with exit code {proc.returncode}{detail}")
        return proc.stdout or ""
