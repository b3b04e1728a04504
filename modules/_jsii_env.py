"""The jsii node runtime's environment: call ``configure()`` before cdktn is first imported.

jsii starts one node process per Python process, with Python's environment, at the
first import of a jsii package; settings made later do not reach it. Pure standard
library: importing this must not start the runtime.

- ``CDKTN_DISABLE_CREATION_STACK``: no stack capture per token (only useful when
  debugging cdktn itself).
- ``NODE_OPTIONS=--require modules/_lazy_provider.cjs``: @cdktn/provider-google loads
  only the resource namespaces a stack uses, instead of all ~1,800 at start
  (4 s -> 0.1 s of every synth). ``TGK_LAZY_PROVIDER=0`` turns it off.

It also makes the process exit fast: the jsii bindings leave hundreds of thousands
of Python objects, and the interpreter's last garbage collection over them took
0.3-0.6 s of every ``python -m infra synth``. At exit (after every other exit
handler, the jsii runtime's shutdown included) the heap is frozen, so that
collection skips it; nothing else changes, as nothing runs after it.

And it points jsii at the toolkit's own tools (``toolkit.paths.tool_environ``): the cached
Node 22 and jsii package cache, as scripts/env.sh does, so a plain shell is as fast.

Node's compile cache (NODE_COMPILE_CACHE) was measured too and is not set: once only
the used namespaces load, it saved no CPU time and cost ~40 MB of cache.
"""

from __future__ import annotations

import atexit
import gc
import os
from collections.abc import MutableMapping
from pathlib import Path

from toolkit.paths import tool_environ

LAZY_PROVIDER = Path(__file__).resolve().with_name("_lazy_provider.cjs")
LAZY_ENV = "TGK_LAZY_PROVIDER"


def _quoted(path: Path) -> str:
    """``path`` as one NODE_OPTIONS word (node splits it on spaces outside double quotes)."""
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


_exit_registered = False


def configure(environ: MutableMapping[str, str] = os.environ) -> None:
    global _exit_registered
    if not _exit_registered:
        atexit.register(gc.freeze)  # registered before the runtime's own handler, so it runs after it
        _exit_registered = True
    tool_environ(environ)
    environ.setdefault("CDKTN_DISABLE_CREATION_STACK", "1")
    if environ.get(LAZY_ENV, "1") == "0" or not LAZY_PROVIDER.is_file():
        return
    current = environ.get("NODE_OPTIONS", "")
    if str(LAZY_PROVIDER) not in current:
        environ["NODE_OPTIONS"] = f"{current} --require {_quoted(LAZY_PROVIDER)}".strip()
