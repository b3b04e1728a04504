"""``EnvSpec``: the environment's fields (``infra.spec.env``) held to the cross-field rules (``infra.spec.rules``).

Validating an ``EnvSpec`` (``parse_spec``, ``load_spec``, ``EnvSpec.model_validate``)
validates every section, then runs ``rules.RULES`` in order; the first rule that refuses
raises its ``SpecError``. The fields and derived values live in ``EnvFields`` and the
rules in their own module so each reads alone: this class only joins them.
"""

from __future__ import annotations

from pydantic import model_validator

from infra.spec import rules
from infra.spec.env import EnvFields


class EnvSpec(EnvFields):
    """The whole environment, validated."""

    @model_validator(mode="after")
    def _cross(self) -> EnvSpec:
        for rule in rules.RULES:
            rule(self)
        return self
