"""The bundled reference study: households, a tax-and-benefit calculator run in
the engine pool, a harness that holds the conversation through
``confirmatory.engine.llm``, and the design files that tie them to the simulated
provider (``reference.toml``, ``operator-pause.toml``) or to real providers
(``real-provider.toml``). ``confirmatory demo`` runs it (``main.py``).
"""
