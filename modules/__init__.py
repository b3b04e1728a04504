"""CDK Terrain constructs, one concern each (network, cluster, node pools, IAM, storage, ...).

Importing the package prepares the jsii runtime's environment (``_jsii_env.configure``):
every construct module imports cdktn, whose first import starts the runtime with the
environment of that moment, so this is the one place that runs before all of them.
"""

from modules._jsii_env import configure as _configure_jsii

_configure_jsii()
