"""The cached builds the local cluster runs from, and how to get them.

Each is a script under ``scripts/`` with one contract (scripts/build-local-cluster.sh,
scripts/build-kuberay.sh): ``--key`` prints its versioned cache dir and builds nothing;
a plain run builds what is missing (progress on stderr) and, once complete, leaves a
stamp file in that dir. The script owns the key, so Python only asks for the dir.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from toolkit import tools
from workloads.local import LocalClusterError

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Build:
    name: str  # "cannot locate the <name> build"
    what: str  # what it produces, in messages: "the local-cluster binaries", "KubeRay v1.6.0"
    script: Path  # scripts/<build script>
    stamp: str  # the file the script touches when the build is complete; keep in step with it
    cold: str  # how long a cold build takes on 2 cores: "~3 min"
    plural: bool = False  # "<what> are not built" rather than "is"

    @property
    def command(self) -> str:
        return f"scripts/{self.script.name}"

    def root(self) -> Path:
        """The versioned cache dir the script builds into (``--key``; builds nothing)."""
        return tools.script_path(self.script, "--key", what=f"cannot locate the {self.name} build", error=LocalClusterError, timeout=60)

    def ensure(self, progress: Progress, *, build: bool = True) -> Path:
        """The cache dir with a complete build in it, running the script first if allowed."""
        root = self.root()
        if (root / self.stamp).is_file():
            return root
        if not build:
            verb = "are" if self.plural else "is"
            raise LocalClusterError(f"{self.what} {verb} not built in {root} — run {self.command} (cold: {self.cold})")
        progress(f"building {self.what} into {root} (cold: {self.cold} on 2 cores; cached afterwards)")
        # The build's progress goes to the terminal (stderr); the stamp says whether it completed.
        done = tools.run(["bash", self.script], stderr_to_terminal=True)
        if not done.ok or not (root / self.stamp).is_file():
            raise LocalClusterError(f"{self.command} failed (exit {done.returncode}); see its output above")
        return root
