"""What every section of the spec shares: a strict frozen model, the error naming a field, common field checks.

A section is a pydantic model that refuses unknown keys (a typo must not fall back to a
default) and cannot be changed once validated. A model validator that finds a problem
raises ``FieldValueError`` with the field it is about, relative to its model:
``infra.spec.messages.format_validation_error`` joins it to the model's path
(``tpu_pools[0]`` + ``capacity.retry``). Field validators raise ``ValueError("problem;
fix")``, which the same formatter splits again.
"""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict

# An add-on's release tag (Kueue, JobSet): v0.19.2.
RELEASE = r"^v[0-9]+\.[0-9]+\.[0-9]+$"
# A Compute Engine machine type's shape (n2-standard-8); infra/machine_types.py knows which exist.
MACHINE_TYPE = r"^[a-z0-9]+-[a-z0-9-]+$"


class FieldValueError(ValueError):
    """Raised by a model validator to name the offending field inside its model.

    pydantic reports model-validator errors at the model's own location; the field
    (relative to that model) is appended by ``format_validation_error``.
    """

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field, self.problem, self.fix = field, problem, fix
        super().__init__(f"{problem}; {fix}" if fix else problem)


class Section(BaseModel):
    # Unknown keys are errors: a typo must not silently fall back to a default.
    model_config = ConfigDict(extra="forbid", frozen=True)


def refuse(found: tuple[str, str] | None) -> None:
    """Raise a field validator's ValueError ('problem; fix', split again by the error formatter) for a GCP rule broken."""
    if found is not None:
        raise ValueError(f"{found[0]}; {found[1]}")


def overlap(a: str, b: str) -> bool:
    return ipaddress.ip_network(a, strict=False).overlaps(ipaddress.ip_network(b, strict=False))


def private_cidr(v: str, example: str) -> str:
    """``v`` if it is a private IPv4 CIDR block, else a ValueError saying how to write one (like ``example``)."""
    try:
        net = ipaddress.ip_network(v, strict=True)
    except ValueError as e:
        raise ValueError(f"{v!r} is not a CIDR block ({e}); write it like {example}") from None
    if net.version != 4 or not net.is_private:
        raise ValueError(f"{v!r} is not a private IPv4 range (RFC 1918); use one like {example}")
    return v


def any_cidr(v: str, example: str) -> str:
    """``v`` if it is a CIDR block (public or private), else a ValueError saying how to write one."""
    try:
        ipaddress.ip_network(v, strict=True)
    except ValueError:
        raise ValueError(f"{v!r} is not a CIDR block; write it like {example}") from None
    return v
