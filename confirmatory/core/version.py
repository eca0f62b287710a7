"""The package's version, in one place (the package and config.json read it)."""

VERSION = "0.1.0"
