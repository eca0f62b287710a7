"""Host evidence: the sampler (``sampler``) and the sources it reads (``sources``)."""
