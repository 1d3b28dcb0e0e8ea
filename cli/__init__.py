"""The front door: `marathon` and its subcommands, on click.

cli/ imports the rest of the project (the service in-process for compile/profile/baseline/hotspots,
the MCP server for `serve`, the bundled client for `run`, `resume`, `status` and `report`) and nothing
imports cli/. `marathon` is cli.main:main; `python -m cli` is the same command.
"""
