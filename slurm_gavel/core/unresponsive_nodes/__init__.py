"""Unresponsive nodes: runs on a node that stopped answering kept where they are.
Plugin: unresponsive_nodes_plugin.py; no settings, no state.

Imports the round's interfaces (slurm_gavel.core's own modules), not another
feature's internals, except where tests/test_layering.py names it."""
