"""How it is measured: clocks, the isolated and in-situ engines, placements, energy, host facts.

``timing`` is the timing core (the one :class:`~opcost.measure.timing.Clock`, adaptive back-to-back measurement,
the rotation); ``rotation`` plans a model-order rotation; ``profile`` measures configurations in isolation
(rotation or back-to-back, every placement); ``insitu`` times them inside real iterations; ``coplace`` places them
inside real iterations; ``e2e`` times whole iterations (also with the job's memory on a slower tier); ``engine`` the
autograd engine's fixed cost; ``placement`` finds memory tiers and places tensors; ``numa`` the NUMA syscalls
(binding a range or a whole process, locating pages); ``memory`` the allocator; ``energy`` the meters (NVML,
RAPL); ``hostinfo`` what each row records about the machine; ``trace`` records Kineto traces of model iterations with
their operators replayed alongside.
"""
