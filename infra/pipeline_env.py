"""What the Cloud Build pipelines read of ``_SPEC``: shell variables, one file per cluster, so no value is typed twice.

``python -m infra.pipeline_env SPEC DIR`` (cloudbuild/provision.yaml and destroy.yaml,
their ``spec-env`` step) writes:

- ``DIR/env.sh``: the spec's own variables, as the pipelines always read them
  (``TGK_PROJECT``, ``TGK_CLUSTER``, ...; for a fleet file, its first worker's), and
  ``TGK_FLEET`` (true for a fleet file);
- ``DIR/members/NN.sh``: one file per cluster in deploy order (``infra.fleet.members``:
  every worker, then the manager; a spec is one cluster), each with the same variables
  for that cluster and ``TGK_MEMBER`` (its name), ``TGK_ROLE`` (cluster, worker or
  manager), ``TGK_MEMBER_SPEC`` (the file a per-cluster command takes as ``--spec``: the
  worker's own spec; the fleet file for the manager, whose Kueue settings carry
  ``multiKueue``), ``TGK_CONTEXT`` (the kubeconfig context the fleet reaches it by) and
  ``TGK_GKE_CONTEXT`` (the one ``gcloud container clusters get-credentials`` writes).

Every value is shell-quoted. A fleet member reached through a kubeconfig file of its own
(``kubeconfig:``) is refused: the pipeline reaches every member through the one
kubeconfig its credentials step writes. Exit 2 with one ``error:`` line on bad input.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from infra.fleet import Fleet, FleetManager, Member, gke_context, load_spec_or_fleet, members
from infra.spec import EnvSpec
from toolkit.errors import SpecError, ToolkitError


def cluster_env(m: EnvSpec | FleetManager) -> dict[str, str]:
    """The variables of one cluster's stack and add-ons."""
    env = {
        "TGK_PROJECT": m.project,
        "TGK_REGION": m.region,
        "TGK_CLUSTER": m.cluster.name,
        "TGK_DELETION_PROTECTION": str(m.cluster.deletion_protection).lower(),
        "TGK_DNS_ENDPOINT": str(m.cluster.dns_endpoint).lower(),
        "TGK_STATE_BUCKET": m.state_bucket,
        "TGK_STATE_PREFIX": m.state_prefix,
    }
    if isinstance(m, EnvSpec):
        env.update(
            {
                "TGK_KUEUE_VERSION": m.versions.kueue,
                "TGK_JOBSET_VERSION": m.versions.jobset,
                "TGK_IMAGE_REPO": f"{m.region}-docker.pkg.dev/{m.project}/{m.artifact_registry.repository}",
            }
        )
    return env


def member_env(member: Member, fleet: Fleet | None, first: EnvSpec) -> dict[str, str]:
    m = member.model
    env = cluster_env(m)
    if isinstance(m, FleetManager):
        # Kueue and JobSet at the workers' versions: MultiKueue creates the workers' objects from the manager's.
        env.update({"TGK_KUEUE_VERSION": first.versions.kueue, "TGK_JOBSET_VERSION": first.versions.jobset})
    gke = gke_context(m.project, m.region, m.cluster.name)
    reach = member.model.reach_context if isinstance(m, FleetManager) else (fleet.worker(member.name).reach_context if fleet else gke)
    env.update(
        {
            "TGK_MEMBER": member.name,
            "TGK_ROLE": "cluster" if fleet is None else ("manager" if member.is_manager else "worker"),
            "TGK_MEMBER_SPEC": str(member.source),
            "TGK_CONTEXT": reach or gke,
            "TGK_GKE_CONTEXT": gke,
        }
    )
    return env


def write(spec: str, out: Path) -> list[Path]:
    """``out/env.sh`` and one ``out/members/NN.sh`` per cluster, in deploy order; the member files."""
    found = load_spec_or_fleet(spec)
    if isinstance(found, Fleet):
        for x in (found.manager, *found.workers):
            if x.kubeconfig is not None:
                raise SpecError(
                    f"{x.field}.kubeconfig",
                    "the provision pipeline reaches every member through the kubeconfig its credentials step writes (gcloud get-credentials)",
                    "remove kubeconfig: from the fleet file (keep context: if you set one), or deploy from a shell with python -m infra deploy",
                )
        listed = members(found)
        first = found.workers[0].spec
        top = {**cluster_env(first), "TGK_FLEET": "true"}
    else:
        listed = [Member(found.cluster.name, found, "", Path(spec))]
        first = found
        top = {**cluster_env(found), "TGK_FLEET": "false"}
    fleet = found if isinstance(found, Fleet) else None
    (out / "members").mkdir(parents=True, exist_ok=True)
    for old in (out / "members").glob("[0-9][0-9].sh"):  # only the names this function writes
        old.unlink()
    (out / "env.sh").write_text(_shell(top))
    paths = []
    for i, member in enumerate(listed, start=1):
        path = out / "members" / f"{i:02d}.sh"
        path.write_text(_shell(member_env(member, fleet, first)))
        paths.append(path)
    return paths


def _shell(env: dict[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m infra.pipeline_env SPEC DIR", file=sys.stderr)
        return 2
    try:
        for path in write(args[0], Path(args[1])):
            sys.stdout.write(f"# {path}\n{path.read_text()}")
    except ToolkitError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
