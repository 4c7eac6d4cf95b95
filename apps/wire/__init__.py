"""Pure DCTRL protocol library: no Django imports, usable by the server, tests, bench and CLI."""
