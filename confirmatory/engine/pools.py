"""Starting a run's engine pools on the design's backend, and what the run
records about them.

``[engine]`` names either a ``factory`` (called once per model as
``factory(workers)``, it starts a pool of its own) or a ``target`` (the
function every worker runs), which the runner starts in a pool on the
design's ``backend``: ``processes`` (``ProcessEnginePool`` on this machine)
or ``ray`` (``RayEnginePool``, actors on a Ray cluster, docs/ENGINE.md).

With ``ray`` the runner connects to the cluster and starts every model's
pool *before* the run directory exists, so that the run manifest and
config.json can record what the pools got (Ray's version, the address, the
cluster's nodes and CPUs, the nodes each pool's actors were placed on). A
pool that fails to start is kept as its exception, and the Run stops its
model with cause ``pool`` once the run directory exists, as it does for a
process pool that fails to start.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confirmatory.engine.pool import ProcessEnginePool, not_a_pool


class EnginePools:
    """The engine pools of one run (see the module docstring)."""

    def __init__(self, loaded: Any) -> None:
        from confirmatory.design.load import resolve_entry

        self.engine = loaded.design.engine
        self.backend: str = self.engine.backend
        self.workers: int = self.engine.workers_per_model
        self.factory = resolve_entry(self.engine.factory, loaded.base_dir) if self.engine.factory else None
        if self.engine.target:
            resolve_entry(self.engine.target, loaded.base_dir, key="engine.target")  # puts its directory on sys.path
        self.cluster: Any = None
        self.cluster_problem: BaseException | None = None
        self.started: dict[str, Any] = {}  # model -> its pool, or the exception that kept it from starting

    @property
    def early(self) -> bool:
        """Whether the pools start before the run directory exists (to be recorded in it)."""
        return self.backend == "ray"

    def start_all(self, models: list[str]) -> None:
        """Start one pool per model; a failure is kept, by model, never raised."""
        if self.backend == "ray":
            from confirmatory.engine.raypool import RayCluster

            try:
                self.cluster = RayCluster(self.engine.address or "local")
            except Exception as exc:  # noqa: BLE001 - every model then stops, cause pool
                self.cluster_problem = exc
                for name in models:
                    self.started[name] = RuntimeError(
                        f"the Ray cluster at {self.engine.address!r} could not be joined: {type(exc).__name__}: {exc}"
                    )
                return
            # The actors of every pool start at once: a pool's start is
            # mostly waiting for the cluster, not work of this process.
            with ThreadPoolExecutor(max_workers=max(1, len(models))) as ex:
                for name, outcome in zip(models, ex.map(self._start_one, models)):
                    self.started[name] = outcome
            return
        for name in models:
            self.started[name] = self._start_one(name)

    def _start_one(self, name: str) -> Any:
        try:
            if self.factory is not None:
                pool = self.factory(self.workers)
                problem = not_a_pool(pool, self.engine.factory)
                if problem:
                    if callable(getattr(pool, "close", None)):
                        pool.close()  # it may hold worker processes
                    raise TypeError(problem)
                return pool
            if self.backend == "ray":
                from confirmatory.engine.raypool import RayEnginePool

                return RayEnginePool(self.engine.target, self.workers, num_cpus=self.engine.num_cpus)
            return ProcessEnginePool(self.engine.target, self.workers)
        except Exception as exc:  # noqa: BLE001 - a pool that fails to start stops its model
            return exc

    def hand_out(self, run: Any) -> None:
        """Give each model of ``run`` its pool, or stop it (cause ``pool``) when its pool did not start."""
        for m in run.models.values():
            if m.name not in self.started:
                continue  # stopped before a crash: no pool
            pool = self.started[m.name]
            if isinstance(pool, BaseException):
                run.stop_model(m, "pool", detail=f"engine pool failed to start: {pool!r}")
            else:
                m.pool = pool

    def record(self) -> dict[str, Any]:
        """What the run manifest and config.json say about the backend (``engine.backend``)."""
        if self.backend != "ray":
            return {"name": self.backend}
        out: dict[str, Any] = {"name": "ray", "address": None, "num_cpus_per_actor": self.engine.num_cpus}
        if self.cluster is not None:
            try:
                out.update(self.cluster.describe())
            except Exception as exc:  # noqa: BLE001 - the cluster went away after the pools started
                out["problem"] = f"{type(exc).__name__}: {exc}"
        else:
            from confirmatory.engine.raypool import public_address

            out["address"] = public_address(self.engine.address or "local")
            out["problem"] = f"{type(self.cluster_problem).__name__}: {self.cluster_problem}"
        out["num_cpus_per_actor"] = 1.0 if self.engine.num_cpus is None else float(self.engine.num_cpus)
        out["pools"] = {
            name: (
                pool.placement()
                if callable(getattr(pool, "placement", None))
                else {"problem": f"did not start: {type(pool).__name__}: {pool}"}
            )
            for name, pool in self.started.items()
        }
        return out

    def close(self) -> None:
        """After the Run closed its pools: leave the cluster (stopping one started for the run)."""
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            try:
                cluster.close()
            except Exception:  # noqa: BLE001 - closing is best effort; the records are written
                pass
