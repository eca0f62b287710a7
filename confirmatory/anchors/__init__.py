"""Anchors: the anchorer that writes and pushes them, and the witness repository."""
