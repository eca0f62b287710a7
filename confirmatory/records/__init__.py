"""The on-disk contract (docs/RECORDS.md): canonical encoding, the hash chain's writer
and reader, durable JSON, the run directory's layout, manifests and record readers.

Imports only ``confirmatory.core``; never the runner, litellm or psutil."""
