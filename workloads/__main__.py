import os

# Pydantic scans every installed distribution's entry points for plugins the first time a
# model is built (~15 ms of each command); the toolkit uses none. An explicit setting wins.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from workloads.cli import main  # noqa: E402

main()
