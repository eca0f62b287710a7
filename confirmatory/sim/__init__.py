"""The simulated provider that ships with the package (a test double and the demo's default).

An OpenAI-compatible server on loopback (server.py) whose models follow a
fixed, seeded conversation policy (behaviour.py) and fail on a seeded plan
(faults.py). Standard library only: importing it never imports litellm.
"""

from confirmatory.sim.behaviour import SIM_MODELS, SIM_PRICES
from confirmatory.sim.faults import Fault, FaultKind, FaultPlan
from confirmatory.sim.server import ATTEMPT_HEADER, SimProvider, serve_command

__all__ = [
    "ATTEMPT_HEADER",
    "SIM_MODELS",
    "SIM_PRICES",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "SimProvider",
    "serve_command",
]
