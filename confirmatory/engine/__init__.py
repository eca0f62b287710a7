"""The Run: lanes, model state, spend, the litellm boundary, the engine pool,
resume requests and config.json."""
