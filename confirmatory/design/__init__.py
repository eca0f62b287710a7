"""The design file: its model (``model``) and its loader (``load``)."""
