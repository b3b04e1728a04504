import os

# As in workloads/__main__.py: no pydantic plugin scan on every command.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from infra.cli import main  # noqa: E402

main()
