"""Real MaxText on this machine: its pinned venv, config validation, tiny CPU runs, AOT compiles."""
