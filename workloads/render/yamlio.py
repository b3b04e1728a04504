"""The one YAML serializer for manifests and recipes.

Manifests are built as plain dicts whose insertion order is the order a person
expects to read (apiVersion, kind, metadata, spec); the dump keeps that order,
writes multi-line strings as ``|`` blocks and never emits Python tags, so the
output is stable enough to diff and to keep as golden files.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


# libyaml's emitter when PyYAML was built with it (~5x faster than PyYAML's; the
# golden files pin that both write the same text); the representers stay PyYAML's.
class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
# Tuples read like lists in a manifest; without this SafeDumper refuses them.
_Dumper.add_representer(tuple, lambda d, v: d.represent_list(list(v)))


def _ignore_aliases(self: yaml.SafeDumper, data: Any) -> bool:
    # The same dict object appears in several places (e.g. one toleration);
    # anchors/aliases are legal YAML but confuse readers and some tools.
    return True


_Dumper.ignore_aliases = _ignore_aliases  # type: ignore[method-assign]


def dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096)


def dump_all(objs: Iterable[Any]) -> str:
    return yaml.dump_all(list(objs), Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096, explicit_start=True)


def load(text: str | bytes) -> Any:
    """One document, safely. Bytes must be UTF-8; a key given twice in a mapping is refused
    (PyYAML would keep the last silently). Failures are ``toolkit.yamlfile.YamlFileError``."""
    from toolkit.yamlfile import load_yaml  # the rules for every YAML file a user hands in

    return load_yaml(text)


def load_all(text: str | bytes) -> list[Any]:
    """Every non-empty document, with ``load``'s rules (UTF-8, no key given twice) for each."""
    from toolkit.yamlfile import load_yaml_all

    return load_yaml_all(text)
