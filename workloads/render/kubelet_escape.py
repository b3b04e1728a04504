"""Text the kubelet passes to a container as written: every ``$`` doubled.

The kubelet expands ``$(NAME)`` in a container's ``command``, ``args`` and ``env[].value``
with the container's environment, and turns ``$$`` into ``$`` (Kubernetes v1.34:
``third_party/forked/golang/expansion/expand.go``, called by
``pkg/kubelet/container/helpers.go`` ``ExpandContainerCommandAndArgs`` and by
``pkg/kubelet/kubelet_pods.go`` for env values). Left alone, a MaxText argument
``x=$(HOME)`` would reach the program as the home directory and ``a$$b`` as ``a$b``.
``$$`` is the expansion's own escape for one ``$``, so doubling every ``$`` is undone
exactly, and no ``$(`` is left to expand. Text without ``$`` (every golden run) is
unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable


def k8s_literal(text: str) -> str:
    return text.replace("$", "$$")


def k8s_literals(texts: Iterable[str]) -> list[str]:
    return [k8s_literal(t) for t in texts]
