"""`python -m agentsession.kubectl_plugin ARGS`: the plugin run from the package."""

from agentsession.kubectl_plugin.cli import main

main()
